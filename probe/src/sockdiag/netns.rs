//! One network namespace, entered once: its sock_diag socket and procfs files are created
//! inside it by a helper thread and kept, so a sample is two dumps and six reads with no
//! `setns` on the sampler's thread. [`NetnsCache`] keeps one per namespace.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, Read as _, Seek as _, SeekFrom},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
    time::Instant,
};

use super::{
    SockDiagError, TcpSocket, TcpState,
    codec::{self, Failure, INET_DIAG_INFO, INET_DIAG_SKMEMINFO, Progress},
    gauges::{NetnsSample, aggregate_since},
};
use crate::netstat::{self, NetCounters, ParseError, PortRange};

/// Dump skbs are at most 32 KiB (`netlink_recvmsg` caps `max_recvmsg_len` at
/// `SKB_WITH_OVERHEAD(32768)`, `netlink_dump` sizes the next skb from it); twice that leaves
/// room, and `MSG_TRUNC` catches anything larger.
const RECV_BUF: usize = 64 * 1024;
/// A dump never waits on the network, so a kernel that goes quiet this long is a bug; the
/// sampler must not hang on it.
const RECV_TIMEOUT_S: libc::time_t = 5;

/// Where a network namespace is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NetnsTarget {
    /// A namespace named by `ip netns add NAME`: `/run/netns/NAME`.
    Named(String),
    /// The namespace of process `pid`: `/proc/PID/ns/net`.
    Pid(u32),
    /// Any nsfs file or bind mount of one.
    Path(PathBuf),
}

impl NetnsTarget {
    fn path(&self) -> PathBuf {
        match self {
            NetnsTarget::Named(name) => Path::new("/run/netns").join(name),
            NetnsTarget::Pid(pid) => PathBuf::from(format!("/proc/{pid}/ns/net")),
            NetnsTarget::Path(p) => p.clone(),
        }
    }

    fn label(&self) -> String {
        match self {
            NetnsTarget::Named(name) => name.clone(),
            NetnsTarget::Pid(pid) => format!("pid {pid}"),
            NetnsTarget::Path(p) => p.display().to_string(),
        }
    }
}

/// Each file: its name in errors and where it is opened from inside the namespace.
/// `/proc/thread-self/net`, not `/proc/self/net`: the latter follows the thread-group
/// leader's namespace (`proc_tgid_net_lookup` uses the task of `/proc/<tgid>`), and only the
/// helper thread is inside. A `/proc/sys/net` file resolves against the opener's namespace
/// (`net_ctl_header_lookup` uses `current->nsproxy`). Once open, both keep describing that
/// namespace whichever thread reads them (`seq_open_net` takes a reference on it; a net
/// sysctl's `table->data` points into its `struct net`).
const FILES: [(&str, &str); 6] = [
    ("net/netstat", "/proc/thread-self/net/netstat"),
    ("net/snmp", "/proc/thread-self/net/snmp"),
    ("net/sockstat", "/proc/thread-self/net/sockstat"),
    (
        "ip_local_port_range",
        "/proc/sys/net/ipv4/ip_local_port_range",
    ),
    (
        "ip_local_reserved_ports",
        "/proc/sys/net/ipv4/ip_local_reserved_ports",
    ),
    ("tcp_tw_reuse", "/proc/sys/net/ipv4/tcp_tw_reuse"),
];
/// conntrack's per-namespace files: present only where nf_conntrack is loaded (and, for the
/// stat file, `CONFIG_NF_CONNTRACK_PROCFS`). `nf_conntrack_count` is this namespace's
/// `net->ct.count`; `nf_conntrack_max` is host-wide (only init_net may write it).
const CONNTRACK_COUNT: &str = "/proc/sys/net/netfilter/nf_conntrack_count";
const CONNTRACK_MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
const CONNTRACK_STAT: &str = "/proc/thread-self/net/stat/nf_conntrack";

/// conntrack's files of one namespace, opened inside it, or why there are none.
type ConntrackFiles = Result<(File, File, Option<File>), String>;

/// One reading of a namespace's connection tracking.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ConntrackReading {
    /// Read.
    Read {
        /// Entries in the namespace's table.
        entries: u64,
        /// The table's limit (host-wide).
        max: u64,
        /// Cumulative per-CPU sums of `/proc/net/stat/nf_conntrack`: `drop`, `early_drop`,
        /// `insert_failed` (`None` for a column this kernel lacks, or without the file).
        drop: Option<u64>,
        /// `early_drop`.
        early_drop: Option<u64>,
        /// `insert_failed`.
        insert_failed: Option<u64>,
    },
    /// Not available here.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// Sums the columns `names` over the per-CPU lines of `/proc/net/stat/nf_conntrack` (a
/// header of column names, then one line of hex values per CPU; columns differ across
/// kernels, so they are found by name).
pub fn parse_conntrack_stat(text: &str, names: &[&str]) -> Vec<Option<u64>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let idx: Vec<Option<usize>> = names
        .iter()
        .map(|n| header.iter().position(|h| h == n))
        .collect();
    let mut sums: Vec<Option<u64>> = idx.iter().map(|i| i.map(|_| 0)).collect();
    for line in lines {
        let values: Vec<&str> = line.split_whitespace().collect();
        for (sum, i) in sums.iter_mut().zip(&idx) {
            if let (Some(s), Some(i)) = (sum.as_mut(), i) {
                *s += values
                    .get(*i)
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
                    .unwrap_or(0);
            }
        }
    }
    sums
}

const NETSTAT: usize = 0;
const SNMP: usize = 1;
const SOCKSTAT: usize = 2;
const PORT_RANGE: usize = 3;
const RESERVED_PORTS: usize = 4;
const TW_REUSE: usize = 5;

/// An open network namespace: its sock_diag socket and procfs files, created inside it.
///
/// Holding a `Netns` keeps the namespace alive (the socket and files reference it) after
/// `ip netns del`; drop it when its container ends.
#[derive(Debug)]
pub struct Netns {
    label: String,
    inode: u64,
    ns: File,
    sock: Option<OwnedFd>,
    /// [`FILES`], opened inside the namespace and re-read at offset 0 for every sample.
    files: [File; FILES.len()],
    conntrack: ConntrackFiles,
    seq: u32,
    buf: Vec<u8>,
}

impl Netns {
    /// Opens the namespace at `target` and creates its sock_diag socket inside it.
    pub fn open(target: &NetnsTarget) -> Result<Self, SockDiagError> {
        let (label, ns, (_, inode)) = open_ns(target)?;
        Self::enter(label, ns, inode)
    }

    fn enter(label: String, ns: File, inode: u64) -> Result<Self, SockDiagError> {
        let (sock, files, conntrack) = create_inside(&label, &ns)?;
        Ok(Self {
            label,
            inode,
            ns,
            sock: Some(sock),
            files,
            conntrack,
            seq: 0,
            buf: vec![0; RECV_BUF],
        })
    }

    /// The namespace as errors and samples name it.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The namespace's inode number (what `ip netns identify` and `/proc/PID/ns/net` show).
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Every TCP socket of the namespace, IPv4 and IPv6, in every state but the
    /// `TCP_BOUND_INACTIVE` pseudo-state of recent kernels (bound, never listened or
    /// connected; dumped only when asked for): one dump per family, as `ss -ta` does.
    ///
    /// Each dump walks the host's whole established hash (every namespace shares it unless
    /// `tcp_child_ehash_entries` gave this one its own), so the dumps are as few as possible:
    /// rather than a separate ESTABLISHED dump for `INET_DIAG_INFO`, the one dump asks for it
    /// and [`TcpSocket::srtt_us`] is kept for ESTABLISHED sockets only. Timewait and request
    /// sockets never carry it (`inet_twsk_diag_fill`, `inet_req_diag_fill` ignore
    /// `idiag_ext`), so the extra `tcp_get_info` calls are for the few sockets in transient
    /// states.
    pub fn dump(&mut self) -> Result<Vec<TcpSocket>, SockDiagError> {
        let states = TcpState::ALL.iter().map(|s| s.bit()).fold(0, |a, b| a | b);
        // SKMEMINFO for the listeners' drops (`sk_drops`); the kernel adds it to full sockets
        // only (timewait and request sockets ignore `idiag_ext`).
        let info = (1u8 << (INET_DIAG_INFO - 1)) | (1u8 << (INET_DIAG_SKMEMINFO - 1));
        let mut out = Vec::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            self.dump_into(family, states, info, &mut out)?;
        }
        Ok(out)
    }

    /// The namespace's TCP counters (`net/netstat`, `net/snmp`, `net/sockstat`).
    pub fn counters(&mut self) -> Result<NetCounters, SockDiagError> {
        let netstat = self.read_parsed(NETSTAT, netstat::parse_two_line)?;
        let snmp = self.read_parsed(SNMP, netstat::parse_two_line)?;
        let sockstat = self.read_parsed(SOCKSTAT, netstat::parse_sockstat)?;
        Ok(NetCounters::from_sections(&netstat, &snmp, &sockstat))
    }

    /// The ports `connect()` may pick in this namespace.
    pub fn port_range(&mut self) -> Result<PortRange, SockDiagError> {
        let (low, high) = self.read_parsed(PORT_RANGE, netstat::parse_port_range)?;
        let reserved = self.read_parsed(RESERVED_PORTS, netstat::parse_reserved_ports)?;
        let tw_reuse = self.read_parsed(TW_REUSE, |t| {
            t.trim().parse::<u8>().map_err(|_| ParseError::NotANumber {
                section: "net.ipv4".into(),
                name: "tcp_tw_reuse".into(),
                value: t.trim().into(),
            })
        })?;
        Ok(netstat::port_range(low, high, &reserved, tw_reuse))
    }

    /// The namespace's connection tracking: entries, limit and drop counters.
    pub fn conntrack(&mut self) -> ConntrackReading {
        let (count, max, stat) = match &mut self.conntrack {
            Ok(files) => files,
            Err(reason) => {
                return ConntrackReading::Unavailable {
                    reason: reason.clone(),
                };
            }
        };
        let read = |f: &mut File| -> io::Result<String> {
            let mut text = String::new();
            f.seek(SeekFrom::Start(0))?;
            f.read_to_string(&mut text)?;
            Ok(text)
        };
        let number = |f: &mut File, name: &str| -> Result<u64, String> {
            let text = read(f).map_err(|e| format!("reading {name}: {e}"))?;
            text.trim()
                .parse()
                .map_err(|_| format!("{name} is {:?}, not a number", text.trim()))
        };
        let (entries, max) = match (number(count, CONNTRACK_COUNT), number(max, CONNTRACK_MAX)) {
            (Ok(e), Ok(m)) => (e, m),
            (Err(reason), _) | (_, Err(reason)) => return ConntrackReading::Unavailable { reason },
        };
        let sums = stat
            .as_mut()
            .and_then(|f| read(f).ok())
            .map(|t| parse_conntrack_stat(&t, &["drop", "early_drop", "insert_failed"]))
            .unwrap_or_else(|| vec![None; 3]);
        ConntrackReading::Read {
            entries,
            max,
            drop: sums[0],
            early_drop: sums[1],
            insert_failed: sums[2],
        }
    }

    /// One sample: dump, aggregate, counters and port range. `dump_us` in the result is what
    /// the two dumps cost.
    pub fn sample(&mut self) -> Result<NetnsSample, SockDiagError> {
        self.sample_since(None)
    }

    /// [`Self::sample`], with TIME_WAIT sockets that entered TIME_WAIT before `start_ns`
    /// (on the shared monotonic clock: when the run or `herd probe` started) counted apart
    /// as the baseline.
    pub fn sample_since(&mut self, start_ns: Option<u64>) -> Result<NetnsSample, SockDiagError> {
        let at_ns = crate::clock::now_ns();
        let started = Instant::now();
        let sockets = self.dump()?;
        let dump_us = started.elapsed().as_micros() as u64;
        let counters = self.counters()?;
        let port_range = self.port_range()?;
        let conntrack = self.conntrack();
        let age_ms = start_ns.map(|s| at_ns.saturating_sub(s) / 1_000_000);
        let gauges = aggregate_since(&sockets, &port_range, age_ms);
        Ok(NetnsSample {
            netns: self.label.clone(),
            netns_inode: self.inode,
            at_ns,
            dump_us,
            gauges,
            port_range,
            counters,
            conntrack,
        })
    }

    fn read_parsed<T>(
        &mut self,
        which: usize,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> Result<T, SockDiagError> {
        let file = &mut self.files[which];
        let name = FILES[which].0;
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text))
            .map_err(|source| SockDiagError::Read {
                netns: self.label.clone(),
                file: name,
                source,
            })?;
        parse(&text).map_err(|source| SockDiagError::Parse {
            netns: self.label.clone(),
            file: name,
            source,
        })
    }

    /// One dump of `family` sockets in `states`, appended to `out`. A failure leaves the
    /// socket in an unknown place of a dump, so it is dropped and recreated next time.
    fn dump_into(
        &mut self,
        family: u8,
        states: u32,
        ext: u8,
        out: &mut Vec<TcpSocket>,
    ) -> Result<(), SockDiagError> {
        let fam = family_name(family);
        if self.sock.is_none() {
            self.sock = Some(create_inside(&self.label, &self.ns)?.0);
        }
        self.seq = self.seq.wrapping_add(1);
        let req = codec::request(family, states, ext, self.seq);
        let result = self.exchange(&req, fam, out);
        match result {
            Ok(()) => Ok(()),
            // IPv6 compiled out: no inet6 handler (`sock_diag_handlers[AF_INET6]` unset).
            Err(SockDiagError::Kernel { ref source, .. })
                if family == libc::AF_INET6 as u8
                    && source.raw_os_error() == Some(libc::ENOENT) =>
            {
                Ok(())
            }
            Err(e) => {
                if !matches!(e, SockDiagError::Kernel { .. }) {
                    self.sock = None;
                }
                Err(e)
            }
        }
    }

    fn exchange(
        &mut self,
        req: &[u8],
        family: &'static str,
        out: &mut Vec<TcpSocket>,
    ) -> Result<(), SockDiagError> {
        let fd = self.sock.as_ref().expect("created above").as_raw_fd();
        let io_err = |op, source| SockDiagError::Io {
            netns: self.label.clone(),
            family,
            op,
            source,
        };
        loop {
            // SAFETY: req is a valid buffer of req.len() bytes.
            let n = unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) };
            if n == req.len() as isize {
                break;
            }
            let e = io::Error::last_os_error();
            if n < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_err("send", e));
        }
        loop {
            // SAFETY: buf is a valid writable buffer of buf.len() bytes. MSG_TRUNC makes
            // netlink return the datagram's full length, so truncation is detectable.
            let n = unsafe {
                libc::recv(
                    fd,
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io_err("recv", e));
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(self.malformed(
                    family,
                    format!("a {n}-byte datagram exceeds the {RECV_BUF}-byte buffer"),
                ));
            }
            if n == 0 {
                return Err(self.malformed(family, "the kernel closed the dump early".into()));
            }
            match codec::parse_datagram(&self.buf[..n], self.seq, out) {
                Ok(Progress::More) => {}
                Ok(Progress::Done) => return Ok(()),
                Err(Failure::Errno(errno)) => {
                    // The kernel ended the dump itself; nothing is left to drain.
                    let hint = if errno == libc::ENOENT {
                        "; this kernel has no TCP sock_diag (CONFIG_INET_DIAG and \
                         CONFIG_INET_TCP_DIAG, module tcp_diag)"
                    } else {
                        ""
                    };
                    return Err(SockDiagError::Kernel {
                        netns: self.label.clone(),
                        family,
                        source: io::Error::from_raw_os_error(errno),
                        hint,
                    });
                }
                Err(Failure::Malformed(what)) => return Err(self.malformed(family, what)),
            }
        }
    }

    fn malformed(&self, family: &'static str, what: String) -> SockDiagError {
        SockDiagError::Malformed {
            netns: self.label.clone(),
            family,
            what,
        }
    }
}

fn family_name(family: u8) -> &'static str {
    if family == libc::AF_INET6 as u8 {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// Opens a namespace file: its label, the file, and its (device, inode) identity.
fn open_ns(target: &NetnsTarget) -> Result<(String, File, (u64, u64)), SockDiagError> {
    let path = target.path();
    let label = target.label();
    let open_err = |source| SockDiagError::Open {
        netns: label.clone(),
        path: path.clone(),
        source,
    };
    let ns = File::open(&path).map_err(open_err)?;
    let meta = ns.metadata().map_err(open_err)?;
    Ok((label, ns, (meta.dev(), meta.ino())))
}

/// Enters the namespace on a short-lived thread and creates, there, what must be created
/// inside it: the sock_diag socket (its namespace is fixed at `socket()`, `__sock_create`
/// takes `current->nsproxy->net_ns`) and the procfs files. The caller's thread never changes
/// namespace; the helper exits with its namespace.
fn create_inside(
    label: &str,
    ns: &File,
) -> Result<(OwnedFd, [File; FILES.len()], ConntrackFiles), SockDiagError> {
    let err = |op: String, source: io::Error| {
        let hint = match source.raw_os_error() {
            Some(libc::EPERM) => "; entering a network namespace needs CAP_SYS_ADMIN (run as root)",
            Some(libc::EINVAL) if op == "setns" => "; the file is not a network namespace",
            _ => "",
        };
        SockDiagError::Enter {
            netns: label.to_owned(),
            op,
            source,
            hint,
        }
    };
    let ns_fd = ns.as_raw_fd();
    let result = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("herd-netns".into())
            .spawn_scoped(s, move || -> Result<_, (String, io::Error)> {
                // SAFETY: setns on a valid fd affects only this thread (CLONE_NEWNET may be
                // changed per thread), which ends when this closure returns.
                if unsafe { libc::setns(ns_fd, libc::CLONE_NEWNET) } != 0 {
                    return Err(("setns".into(), io::Error::last_os_error()));
                }
                let sock = diag_socket()
                    .map_err(|e| ("creating the NETLINK_SOCK_DIAG socket".to_owned(), e))?;
                let files = FILES
                    .iter()
                    .map(|(_, path)| File::open(path).map_err(|e| (format!("opening {path}"), e)))
                    .collect::<Result<Vec<File>, _>>()?
                    .try_into()
                    .expect("one file per entry of FILES");
                let conntrack = match (File::open(CONNTRACK_COUNT), File::open(CONNTRACK_MAX)) {
                    (Ok(count), Ok(max)) => Ok((count, max, File::open(CONNTRACK_STAT).ok())),
                    (Err(e), _) | (_, Err(e)) => Err(if e.kind() == io::ErrorKind::NotFound {
                        format!(
                            "conntrack is not loaded in this network namespace (no \
                             {CONNTRACK_COUNT}: no NAT or stateful firewall rule uses it)"
                        )
                    } else {
                        format!("opening {CONNTRACK_COUNT}: {e}")
                    }),
                };
                Ok((sock, files, conntrack))
            })
            .map_err(|e| ("spawning the helper thread".to_owned(), e))?
            .join()
            .unwrap_or_else(|_| {
                Err((
                    "helper thread".to_owned(),
                    io::Error::other("the helper thread panicked"),
                ))
            })
    });
    result.map_err(|(op, e)| err(op, e))
}

fn diag_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: RECV_TIMEOUT_S,
        tv_usec: 0,
    };
    // SAFETY: valid fd, option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// Open namespaces by inode, so containers sharing a namespace share one socket and a
/// namespace is entered once, not once per sample.
#[derive(Debug, Default)]
pub struct NetnsCache {
    /// By (device, inode) of the namespace file: the inode alone identifies a namespace only
    /// among nsfs files.
    by_id: HashMap<(u64, u64), Netns>,
}

impl NetnsCache {
    /// The cached handle of the namespace at `target`, opened and cached on first use.
    /// A hit costs one `open` + `fstat` of the namespace file.
    pub fn get(&mut self, target: &NetnsTarget) -> Result<&mut Netns, SockDiagError> {
        let (label, ns, id) = open_ns(target)?;
        match self.by_id.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(v) => {
                Ok(v.insert(Netns::enter(label, ns, id.1)?))
            }
        }
    }

    /// Forgets (and so releases) the namespace with `inode`, e.g. when its container ended.
    pub fn remove(&mut self, inode: u64) -> Option<Netns> {
        let id = *self.by_id.keys().find(|(_, ino)| *ino == inode)?;
        self.by_id.remove(&id)
    }

    /// Namespaces held.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when no namespace is held.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conntrack_stat_columns_are_found_by_name_and_summed_over_cpus() {
        // As this host's 6.18 prints it (hex, one line per CPU).
        let text = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n\
                    0000000a  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000010 00000002 00000000  00000000 00000000 00000000 00000000\n\
                    0000000a  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000  00000000 00000000 00000000 00000000\n";
        assert_eq!(
            parse_conntrack_stat(text, &["drop", "early_drop", "insert_failed", "nope"]),
            [Some(17), Some(2), Some(1), None]
        );
        assert_eq!(parse_conntrack_stat("", &["drop"]), [None]);
    }

    #[test]
    fn opening_a_missing_namespace_names_it() {
        let e = Netns::open(&NetnsTarget::Named("herd-no-such-netns".into())).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("herd-no-such-netns") && msg.contains("/run/netns"),
            "{msg}"
        );
    }
}
