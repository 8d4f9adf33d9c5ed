//! A minimal reader for the running kernel's BTF (`/sys/kernel/btf/vmlinux`): just enough to
//! find the byte offset of a struct member, following anonymous structs and unions.
//!
//! Rust eBPF has no CO-RE relocations, so the probe resolves the few offsets it dereferences
//! here, at load time, and passes them to the programs as read-only globals. aya parses BTF too
//! but keeps member access crate-private, hence this file (format: Documentation/bpf/btf.rst).

use std::{collections::HashMap, path::Path};

/// Where the kernel exposes its own BTF (`CONFIG_DEBUG_INFO_BTF`, kernel ≥ 5.4).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Why a BTF lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The BTF file could not be read.
    #[error(
        "reading kernel BTF at {path}: {source} (herd needs a kernel built with CONFIG_DEBUG_INFO_BTF=y, 5.4 or newer)"
    )]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The data is not BTF.
    #[error("kernel BTF is malformed: {0}")]
    Malformed(&'static str),
    /// A struct the probe needs does not exist in this kernel.
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    /// A member the probe needs does not exist in this kernel.
    #[error("kernel BTF: struct {st} has no member {member}")]
    NoMember {
        /// The struct searched.
        st: String,
        /// The missing member.
        member: String,
    },
    /// The member is a bitfield or not byte aligned.
    #[error("kernel BTF: {0} is a bitfield; the probe needs a byte-aligned member")]
    Bitfield(String),
}

#[derive(Clone, Copy)]
struct Member {
    name_off: u32,
    type_id: u32,
    bit_offset: u32,
}

struct Type {
    name_off: u32,
    kind: u32,
    /// Referenced type for typedef/const/volatile/ptr/…
    ref_type: u32,
    members: Vec<Member>,
}

/// Parsed kernel BTF: composite types with their members, and names.
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
    structs_by_name: HashMap<String, u32>,
}

fn u16_at(d: &[u8], at: usize) -> Result<u16, BtfError> {
    d.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or(BtfError::Malformed("truncated"))
}

fn u32_at(d: &[u8], at: usize) -> Result<u32, BtfError> {
    d.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(BtfError::Malformed("truncated"))
}

impl Btf {
    /// Reads and parses the running kernel's BTF.
    pub fn from_kernel() -> Result<Self, BtfError> {
        Self::from_file(Path::new(VMLINUX_BTF))
    }

    /// Reads and parses a raw BTF file.
    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    /// Parses little-endian raw BTF (the only byte order herd's BPF target uses).
    pub fn parse(d: &[u8]) -> Result<Self, BtfError> {
        if u16_at(d, 0)? != MAGIC {
            return Err(BtfError::Malformed("bad magic (not little-endian BTF)"));
        }
        let hdr_len = u32_at(d, 4)? as usize;
        let type_off = hdr_len + u32_at(d, 8)? as usize;
        let type_len = u32_at(d, 12)? as usize;
        let str_off = hdr_len + u32_at(d, 16)? as usize;
        let str_len = u32_at(d, 20)? as usize;
        let strings = d
            .get(str_off..str_off + str_len)
            .ok_or(BtfError::Malformed("string section out of bounds"))?
            .to_vec();
        let end = type_off + type_len;
        if end > d.len() {
            return Err(BtfError::Malformed("type section out of bounds"));
        }
        // Type id 0 is void.
        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            ref_type: 0,
            members: Vec::new(),
        }];
        let mut at = type_off;
        while at < end {
            let name_off = u32_at(d, at)?;
            let info = u32_at(d, at + 4)?;
            let size_or_type = u32_at(d, at + 8)?;
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let mut members = Vec::new();
            match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => at += 4,
                KIND_ARRAY => at += 12,
                KIND_STRUCT | KIND_UNION => {
                    members.reserve(vlen);
                    for _ in 0..vlen {
                        let raw = u32_at(d, at + 8)?;
                        // kind_flag: high 8 bits are the bitfield size, low 24 the bit offset.
                        let bit_offset = if kind_flag { raw & 0xff_ffff } else { raw };
                        let bitfield = kind_flag && raw >> 24 != 0;
                        members.push(Member {
                            name_off: u32_at(d, at)?,
                            type_id: u32_at(d, at + 4)?,
                            bit_offset: if bitfield { u32::MAX } else { bit_offset },
                        });
                        at += 12;
                    }
                }
                KIND_ENUM | KIND_FUNC_PROTO => at += 8 * vlen,
                KIND_DATASEC | KIND_ENUM64 => at += 12 * vlen,
                _ => {}
            }
            types.push(Type {
                name_off,
                kind,
                ref_type: size_or_type,
                members,
            });
        }
        let mut btf = Btf {
            types,
            strings,
            structs_by_name: HashMap::new(),
        };
        for (id, t) in btf.types.iter().enumerate() {
            if t.kind == KIND_STRUCT && t.name_off != 0 {
                let name = btf.name(t.name_off).to_owned();
                // Keep the first (complete) definition; forward declarations are KIND_FWD.
                btf.structs_by_name.entry(name).or_insert(id as u32);
            }
        }
        Ok(btf)
    }

    fn name(&self, off: u32) -> &str {
        let s = &self.strings[(off as usize).min(self.strings.len())..];
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        std::str::from_utf8(&s[..end]).unwrap_or("")
    }

    /// Follows typedef/const/volatile/restrict/type-tag to the underlying type.
    fn strip(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            let Some(t) = self.types.get(id as usize) else {
                return id;
            };
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.ref_type
                }
                _ => return id,
            }
        }
        id
    }

    /// Finds `member` in the struct/union `id`, descending into anonymous members.
    /// Returns (bit offset from the start of `id`, member type id).
    fn find_member(&self, id: u32, member: &str) -> Option<(u32, u32)> {
        let t = self.types.get(id as usize)?;
        for m in &t.members {
            if m.name_off != 0 && self.name(m.name_off) == member {
                return Some((m.bit_offset, m.type_id));
            }
        }
        for m in &t.members {
            if m.name_off == 0 {
                let inner = self.strip(m.type_id);
                let kind = self.types.get(inner as usize)?.kind;
                if (kind == KIND_STRUCT || kind == KIND_UNION)
                    && let Some((off, ty)) = self.find_member(inner, member)
                {
                    if m.bit_offset == u32::MAX || off == u32::MAX {
                        return Some((u32::MAX, ty));
                    }
                    return Some((m.bit_offset + off, ty));
                }
            }
        }
        None
    }

    /// Byte offset of `path` inside `struct st`, e.g. `("sock", &["sk_cgrp_data", "cgroup"])`.
    /// Each step but the last must be an embedded struct or union (not a pointer).
    pub fn member_offset(&self, st: &str, path: &[&str]) -> Result<u64, BtfError> {
        let mut id = *self
            .structs_by_name
            .get(st)
            .ok_or_else(|| BtfError::NoStruct(st.to_owned()))?;
        let mut bits: u64 = 0;
        let mut here = st.to_owned();
        for member in path {
            let (off, ty) = self
                .find_member(id, member)
                .ok_or_else(|| BtfError::NoMember {
                    st: here.clone(),
                    member: (*member).to_owned(),
                })?;
            if off == u32::MAX || off % 8 != 0 {
                return Err(BtfError::Bitfield(format!("{here}.{member}")));
            }
            bits += u64::from(off);
            here = format!("{here}.{member}");
            id = self.strip(ty);
        }
        Ok(bits / 8)
    }

    /// The BTF type id of kernel function `name` (what fentry/fexit programs attach to),
    /// `None` when the kernel has no such function or it is not in BTF.
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|t| t.kind == KIND_FUNC && self.name(t.name_off) == name)
            .map(|id| id as u32)
    }

    /// True when `path` inside `struct st` is a pointer (used to validate assumptions).
    pub fn member_is_pointer(&self, st: &str, path: &[&str]) -> Result<bool, BtfError> {
        let (last, parents) = path.split_last().ok_or(BtfError::Malformed("empty path"))?;
        let mut id = *self
            .structs_by_name
            .get(st)
            .ok_or_else(|| BtfError::NoStruct(st.to_owned()))?;
        for member in parents {
            let (_, ty) = self
                .find_member(id, member)
                .ok_or_else(|| BtfError::NoMember {
                    st: st.to_owned(),
                    member: (*member).to_owned(),
                })?;
            id = self.strip(ty);
        }
        let (_, ty) = self
            .find_member(id, last)
            .ok_or_else(|| BtfError::NoMember {
                st: st.to_owned(),
                member: (*last).to_owned(),
            })?;
        Ok(self.types.get(self.strip(ty) as usize).map(|t| t.kind) == Some(KIND_PTR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a tiny BTF blob: int, struct inner { int a; int b; }, struct outer { int x;
    /// union { struct inner in; }; int *p; }.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0inner\0a\0b\0outer\0x\0in\0p\0".to_vec();
        let s = |name: &str| {
            let hay = std::str::from_utf8(&strings).unwrap();
            hay.find(&format!("\0{name}\0")).unwrap() as u32 + 1
        };
        let mut t = Vec::new();
        let mut ty = |name: u32, kind: u32, vlen: u32, kf: bool, st: u32, extra: &[u32]| {
            t.extend_from_slice(&name.to_le_bytes());
            t.extend_from_slice(&((kind << 24) | vlen | (u32::from(kf) << 31)).to_le_bytes());
            t.extend_from_slice(&st.to_le_bytes());
            for e in extra {
                t.extend_from_slice(&e.to_le_bytes());
            }
        };
        ty(s("int"), KIND_INT, 0, false, 4, &[32]); // 1
        ty(
            s("inner"),
            KIND_STRUCT,
            2,
            false,
            8,
            &[s("a"), 1, 0, s("b"), 1, 32],
        ); // 2
        ty(0, KIND_UNION, 1, false, 8, &[s("in"), 2, 0]); // 3 anonymous union
        ty(0, KIND_PTR, 0, false, 1, &[]); // 4 int *
        ty(
            s("outer"),
            KIND_STRUCT,
            3,
            false,
            24,
            &[s("x"), 1, 0, 0, 3, 64, s("p"), 4, 128],
        ); // 5
        let mut d = Vec::new();
        d.extend_from_slice(&MAGIC.to_le_bytes());
        d.extend_from_slice(&[1, 0]);
        d.extend_from_slice(&24u32.to_le_bytes());
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&(t.len() as u32).to_le_bytes());
        d.extend_from_slice(&(t.len() as u32).to_le_bytes());
        d.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        d.extend_from_slice(&t);
        d.extend_from_slice(&strings);
        d
    }

    #[test]
    fn finds_members_through_anonymous_unions() {
        let btf = Btf::parse(&blob()).unwrap();
        assert_eq!(btf.member_offset("outer", &["x"]).unwrap(), 0);
        assert_eq!(btf.member_offset("outer", &["in", "b"]).unwrap(), 12);
        assert_eq!(btf.member_offset("outer", &["p"]).unwrap(), 16);
        assert!(btf.member_is_pointer("outer", &["p"]).unwrap());
        assert!(!btf.member_is_pointer("outer", &["x"]).unwrap());
    }

    #[test]
    fn names_what_is_missing() {
        let btf = Btf::parse(&blob()).unwrap();
        let err = btf
            .member_offset("outer", &["nope"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("outer") && err.contains("nope"), "{err}");
        let err = btf.member_offset("sock", &["x"]).unwrap_err().to_string();
        assert!(err.contains("no struct sock"), "{err}");
        assert!(Btf::parse(b"garbage garbage garbage!").is_err());
    }

    #[test]
    fn reads_the_running_kernel() {
        // Every host herd supports has kernel BTF; this is not a privileged read.
        let Ok(btf) = Btf::from_kernel() else {
            panic!("{VMLINUX_BTF} unreadable: herd requires CONFIG_DEBUG_INFO_BTF");
        };
        let off = btf
            .member_offset("sock", &["sk_cgrp_data", "cgroup"])
            .unwrap();
        assert!(off > 0 && off < 4096, "{off}");
        assert!(
            btf.member_is_pointer("sock", &["sk_cgrp_data", "cgroup"])
                .unwrap()
        );
        assert!(btf.member_is_pointer("cgroup", &["kn"]).unwrap());
        btf.member_offset("kernfs_node", &["id"]).unwrap();
        // skc_daddr sits inside an anonymous union/struct of sock_common.
        btf.member_offset("sock_common", &["skc_daddr"]).unwrap();
        let id = btf
            .func_id("tcp_connect")
            .expect("tcp_connect is in every kernel's BTF");
        assert!(id > 0);
        assert_eq!(btf.func_id("no_such_function_in_any_kernel"), None);
    }
}
