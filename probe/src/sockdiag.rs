//! Exact TCP gauges per network namespace, read from user space through NETLINK_SOCK_DIAG
//! (what `ss` uses) and the namespace's own procfs files.
//!
//! The eBPF programs count events; they cannot say how many sockets sit in TIME_WAIT right
//! now (`tcp_time_wait()` creates the timewait socket without a tracepoint, see
//! KERNEL-NOTES.md). A sock_diag dump can, exactly, and it also gives every socket's 4-tuple
//! and smoothed RTT. A dump only sees the network namespace its netlink socket was created in
//! (`sock_net(skb->sk)` in `inet_diag_dump_icsk`), so [`Netns`] creates one socket inside each
//! container's namespace and keeps it.
//!
//! One [`Netns::sample`] = two dumps (IPv4 and IPv6, every state, `INET_DIAG_INFO` for srtt),
//! the namespace's counters and its ephemeral-port range, aggregated by [`aggregate`] into
//! state counts, per-destination gauges and port headroom.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs::File,
    io::{self, Read as _, Seek as _, SeekFrom},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
    time::Instant,
};

use probe_common::Log2Hist;

use crate::netstat::{self, NetCounters, ParseError, PortRange};

// Netlink and sock_diag ABI (include/uapi/linux/netlink.h, sock_diag.h, inet_diag.h).
const NLMSG_HDRLEN: usize = 16;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
/// `SOCK_DIAG_BY_FAMILY`: request and reply type of `inet_diag_req_v2` dumps (3.3+).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `sizeof(struct inet_diag_req_v2)`.
const REQ_V2_LEN: usize = 56;
/// `sizeof(struct inet_diag_msg)`.
const DIAG_MSG_LEN: usize = 72;
/// `INET_DIAG_INFO`: the reply carries `struct tcp_info` (`tcp_diag_get_info`).
const INET_DIAG_INFO: u16 = 2;
/// `NLA_TYPE_MASK`: attribute type without the nested/byte-order flags.
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `idiag_timer` value `inet_twsk_diag_fill` sets: only timewait sockets carry it.
const TIMER_TIME_WAIT: u8 = 3;
/// Offsets of `tcpi_rtt` and `tcpi_rttvar` in `struct tcp_info` (µs, `tp->srtt_us >> 3` and
/// `tp->mdev_us >> 2` in `tcp_get_info`, unchanged since 3.15).
const TCPI_RTT: usize = 68;
const TCPI_RTTVAR: usize = 72;
/// Dump skbs are at most 32 KiB (`netlink_recvmsg` caps `max_recvmsg_len` at
/// `SKB_WITH_OVERHEAD(32768)`, `netlink_dump` sizes the next skb from it); twice that leaves
/// room, and `MSG_TRUNC` catches anything larger.
const RECV_BUF: usize = 64 * 1024;
/// A dump never waits on the network, so a kernel that goes quiet this long is a bug; the
/// sampler must not hang on it.
const RECV_TIMEOUT_S: libc::time_t = 5;

/// TCP states as the kernel numbers them (`include/net/tcp_states.h`) and `ss` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum TcpState {
    /// `TCP_ESTABLISHED`.
    Established = 1,
    /// `TCP_SYN_SENT`: a connect waiting for the SYN-ACK.
    SynSent = 2,
    /// `TCP_SYN_RECV`, and request sockets (`TCP_NEW_SYN_RECV`), which inet_diag reports as
    /// SYN_RECV (`inet_req_diag_fill`).
    SynRecv = 3,
    /// `TCP_FIN_WAIT1`.
    FinWait1 = 4,
    /// `TCP_FIN_WAIT2`, including timewait sockets whose substate is FIN_WAIT2 (as `ss`).
    FinWait2 = 5,
    /// `TCP_TIME_WAIT`: timewait sockets whose substate is TIME_WAIT (as `ss`).
    TimeWait = 6,
    /// `TCP_CLOSE`.
    Close = 7,
    /// `TCP_CLOSE_WAIT`.
    CloseWait = 8,
    /// `TCP_LAST_ACK`.
    LastAck = 9,
    /// `TCP_LISTEN`.
    Listen = 10,
    /// `TCP_CLOSING`.
    Closing = 11,
}

impl TcpState {
    /// Every state a dump asks for, in kernel order.
    pub const ALL: [TcpState; 11] = [
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait1,
        TcpState::FinWait2,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Closing,
    ];

    /// The state numbered `n` by the kernel.
    pub fn from_kernel(n: u8) -> Option<Self> {
        Self::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// One TCP socket of a dump.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TcpSocket {
    /// State; for timewait sockets their substate, as `ss` shows it.
    pub state: TcpState,
    /// Local address and port (IPv4-mapped IPv6 addresses are given as IPv4).
    pub local: SocketAddr,
    /// Remote address and port (unspecified for listeners).
    pub remote: SocketAddr,
    /// True for a timewait socket (`struct inet_timewait_sock`): substate TIME_WAIT or
    /// FIN_WAIT2. These are what sockstat's `tw` counts.
    pub timewait: bool,
    /// Smoothed RTT in µs (`tcpi_rtt`, what `ss -ti` prints as `rtt:`), for ESTABLISHED
    /// sockets only.
    pub srtt_us: Option<u32>,
    /// RTT variance in µs (`tcpi_rttvar`), for ESTABLISHED sockets only.
    pub rttvar_us: Option<u32>,
    /// `idiag_rqueue`: bytes unread, or for a listener its accept-queue length.
    pub recv_q: u32,
    /// `idiag_wqueue`: bytes unsent, or for a listener its backlog.
    pub send_q: u32,
    /// The socket cookie (stable for the socket's life, kept by its timewait socket).
    pub cookie: u64,
}

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

/// Why a namespace could not be opened or read. Every variant names the namespace.
#[derive(Debug, thiserror::Error)]
pub enum SockDiagError {
    /// The namespace file could not be opened.
    #[error("opening network namespace {netns} ({path}): {source}")]
    Open {
        /// The namespace.
        netns: String,
        /// The file tried.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Entering the namespace (in a helper thread) or creating something inside it failed.
    #[error("network namespace {netns}: {op}: {source}{hint}")]
    Enter {
        /// The namespace.
        netns: String,
        /// What was being done (`setns`, `creating the NETLINK_SOCK_DIAG socket`, `opening
        /// /proc/thread-self/net/netstat`, ...).
        op: String,
        /// The error.
        source: io::Error,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// Sending the dump request or receiving the reply failed.
    #[error("network namespace {netns}: sock_diag dump of {family} TCP sockets: {op}: {source}")]
    Io {
        /// The namespace.
        netns: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// `send` or `recv`.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The kernel answered the dump with an error.
    #[error(
        "network namespace {netns}: the kernel refused the sock_diag dump of {family} TCP \
         sockets: {source}{hint}"
    )]
    Kernel {
        /// The namespace.
        netns: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// The errno the kernel returned.
        source: io::Error,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// The reply did not follow the netlink/inet_diag format.
    #[error(
        "network namespace {netns}: malformed sock_diag reply for {family} TCP sockets: {what}"
    )]
    Malformed {
        /// The namespace.
        netns: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// What was wrong.
        what: String,
    },
    /// A procfs file of the namespace could not be read.
    #[error("network namespace {netns}: reading {file}: {source}")]
    Read {
        /// The namespace.
        netns: String,
        /// The file (`net/netstat`, `ip_local_port_range`, ...).
        file: &'static str,
        /// The error.
        source: io::Error,
    },
    /// A procfs file of the namespace did not parse.
    #[error("network namespace {netns}: parsing {file}: {source}")]
    Parse {
        /// The namespace.
        netns: String,
        /// The file.
        file: &'static str,
        /// The error.
        source: ParseError,
    },
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
        let (sock, files) = create_inside(&label, &ns)?;
        Ok(Self {
            label,
            inode,
            ns,
            sock: Some(sock),
            files,
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
        let info = 1u8 << (INET_DIAG_INFO - 1);
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

    /// One sample: dump, aggregate, counters and port range. `dump_us` in the result is what
    /// the two dumps cost.
    pub fn sample(&mut self) -> Result<NetnsSample, SockDiagError> {
        let at_ns = crate::clock::now_ns();
        let started = Instant::now();
        let sockets = self.dump()?;
        let dump_us = started.elapsed().as_micros() as u64;
        let counters = self.counters()?;
        let port_range = self.port_range()?;
        let gauges = aggregate(&sockets, &port_range);
        Ok(NetnsSample {
            netns: self.label.clone(),
            netns_inode: self.inode,
            at_ns,
            dump_us,
            gauges,
            port_range,
            counters,
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
        let req = request(family, states, ext, self.seq);
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
            match parse_datagram(&self.buf[..n], self.seq, out) {
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
fn create_inside(label: &str, ns: &File) -> Result<(OwnedFd, [File; FILES.len()]), SockDiagError> {
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
                Ok((sock, files))
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

/// A `SOCK_DIAG_BY_FAMILY` dump request: `nlmsghdr` + `inet_diag_req_v2` for TCP sockets of
/// `family` in `states`, with extensions `ext` (a bit per `INET_DIAG_*` minus one).
fn request(family: u8, states: u32, ext: u8, seq: u32) -> [u8; NLMSG_HDRLEN + REQ_V2_LEN] {
    let mut b = [0u8; NLMSG_HDRLEN + REQ_V2_LEN];
    b[0..4].copy_from_slice(&((NLMSG_HDRLEN + REQ_V2_LEN) as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: the kernel fills in our port id.
    let r = NLMSG_HDRLEN;
    b[r] = family;
    b[r + 1] = libc::IPPROTO_TCP as u8;
    b[r + 2] = ext;
    b[r + 4..r + 8].copy_from_slice(&states.to_ne_bytes());
    // id (sockid) all zero: no port, address or cookie filter.
    b
}

/// Where a dump stands after one datagram.
#[derive(Debug, PartialEq, Eq)]
enum Progress {
    More,
    Done,
}

#[derive(Debug, PartialEq, Eq)]
enum Failure {
    Errno(i32),
    Malformed(String),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses one datagram of a dump reply: zero or more `nlmsghdr`-framed messages. Messages of
/// another sequence number (a stale reply) are skipped.
fn parse_datagram(mut b: &[u8], seq: u32, out: &mut Vec<TcpSocket>) -> Result<Progress, Failure> {
    while b.len() >= NLMSG_HDRLEN {
        let len = u32_at(b, 0) as usize;
        let kind = u16_at(b, 4);
        let msg_seq = u32_at(b, 8);
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(Failure::Malformed(format!(
                "message length {len} with {} bytes left",
                b.len()
            )));
        }
        let payload = &b[NLMSG_HDRLEN..len];
        b = &b[align4(len).min(b.len())..];
        if msg_seq != seq {
            continue;
        }
        match kind {
            NLMSG_NOOP => {}
            NLMSG_DONE => {
                // The payload is the dump's final status (`netlink_dump_done`).
                if payload.len() >= 4 {
                    let status = u32_at(payload, 0) as i32;
                    if status < 0 {
                        return Err(Failure::Errno(-status));
                    }
                }
                return Ok(Progress::Done);
            }
            NLMSG_ERROR => {
                if payload.len() < 4 {
                    return Err(Failure::Malformed("short NLMSG_ERROR".into()));
                }
                let errno = u32_at(payload, 0) as i32;
                // errno 0 is an acknowledgement, which a dump does not ask for; treat it as
                // the end.
                return if errno == 0 {
                    Ok(Progress::Done)
                } else {
                    Err(Failure::Errno(-errno))
                };
            }
            SOCK_DIAG_BY_FAMILY => out.push(parse_diag_msg(payload)?),
            other => {
                return Err(Failure::Malformed(format!(
                    "unexpected message type {other}"
                )));
            }
        }
    }
    if !b.is_empty() {
        return Err(Failure::Malformed(format!(
            "{} trailing bytes after the last message",
            b.len()
        )));
    }
    Ok(Progress::More)
}

fn addr(family: u8, raw: &[u8], port: u16) -> Result<SocketAddr, Failure> {
    let ip = if family == libc::AF_INET as u8 {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else if family == libc::AF_INET6 as u8 {
        let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(raw).expect("16 bytes"));
        // A dual-stack socket talking IPv4 reports ::ffff:a.b.c.d; group it with IPv4.
        v6.to_canonical()
    } else {
        return Err(Failure::Malformed(format!("address family {family}")));
    };
    Ok(SocketAddr::new(ip, port))
}

/// Parses an `inet_diag_msg` and its attributes.
fn parse_diag_msg(p: &[u8]) -> Result<TcpSocket, Failure> {
    if p.len() < DIAG_MSG_LEN {
        return Err(Failure::Malformed(format!(
            "inet_diag_msg of {} bytes, expected {DIAG_MSG_LEN}",
            p.len()
        )));
    }
    let family = p[0];
    let state = TcpState::from_kernel(p[1])
        .ok_or_else(|| Failure::Malformed(format!("TCP state {}", p[1])))?;
    let timer = p[2];
    // inet_diag_sockid: ports big-endian, addresses in network order.
    let sport = u16::from_be_bytes([p[4], p[5]]);
    let dport = u16::from_be_bytes([p[6], p[7]]);
    let local = addr(family, &p[8..24], sport)?;
    let remote = addr(family, &p[24..40], dport)?;
    let cookie = u64::from(u32_at(p, 44)) | (u64::from(u32_at(p, 48)) << 32);
    let (recv_q, send_q) = (u32_at(p, 56), u32_at(p, 60));
    let (mut srtt_us, mut rttvar_us) = (None, None);
    let mut attrs = &p[DIAG_MSG_LEN..];
    while attrs.len() >= 4 {
        let len = usize::from(u16_at(attrs, 0));
        let kind = u16_at(attrs, 2) & NLA_TYPE_MASK;
        if len < 4 || len > attrs.len() {
            return Err(Failure::Malformed(format!(
                "attribute length {len} with {} bytes left",
                attrs.len()
            )));
        }
        let data = &attrs[4..len];
        if kind == INET_DIAG_INFO && state == TcpState::Established && data.len() >= TCPI_RTTVAR + 4
        {
            srtt_us = Some(u32_at(data, TCPI_RTT));
            rttvar_us = Some(u32_at(data, TCPI_RTTVAR));
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    Ok(TcpSocket {
        state,
        local,
        remote,
        timewait: timer == TIMER_TIME_WAIT,
        srtt_us,
        rttvar_us,
        recv_q,
        send_q,
        cookie,
    })
}

/// Sockets per TCP state, as `ss -tan` would count them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StateCounts {
    /// ESTABLISHED.
    pub established: u64,
    /// SYN_SENT.
    pub syn_sent: u64,
    /// SYN_RECV (request sockets included).
    pub syn_recv: u64,
    /// FIN_WAIT1.
    pub fin_wait1: u64,
    /// FIN_WAIT2, timewait sockets with substate FIN_WAIT2 included.
    pub fin_wait2: u64,
    /// TIME_WAIT (timewait sockets with substate TIME_WAIT).
    pub time_wait: u64,
    /// CLOSE.
    pub close: u64,
    /// CLOSE_WAIT.
    pub close_wait: u64,
    /// LAST_ACK.
    pub last_ack: u64,
    /// LISTEN.
    pub listen: u64,
    /// CLOSING.
    pub closing: u64,
}

impl StateCounts {
    /// The count of `state`.
    pub fn get(&self, state: TcpState) -> u64 {
        match state {
            TcpState::Established => self.established,
            TcpState::SynSent => self.syn_sent,
            TcpState::SynRecv => self.syn_recv,
            TcpState::FinWait1 => self.fin_wait1,
            TcpState::FinWait2 => self.fin_wait2,
            TcpState::TimeWait => self.time_wait,
            TcpState::Close => self.close,
            TcpState::CloseWait => self.close_wait,
            TcpState::LastAck => self.last_ack,
            TcpState::Listen => self.listen,
            TcpState::Closing => self.closing,
        }
    }

    fn slot(&mut self, state: TcpState) -> &mut u64 {
        match state {
            TcpState::Established => &mut self.established,
            TcpState::SynSent => &mut self.syn_sent,
            TcpState::SynRecv => &mut self.syn_recv,
            TcpState::FinWait1 => &mut self.fin_wait1,
            TcpState::FinWait2 => &mut self.fin_wait2,
            TcpState::TimeWait => &mut self.time_wait,
            TcpState::Close => &mut self.close,
            TcpState::CloseWait => &mut self.close_wait,
            TcpState::LastAck => &mut self.last_ack,
            TcpState::Listen => &mut self.listen,
            TcpState::Closing => &mut self.closing,
        }
    }
}

/// A listening socket.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Listener {
    /// The address it listens on.
    pub local: SocketAddr,
    /// Connections completed and waiting for `accept()` (`sk_ack_backlog`).
    pub accept_queue: u32,
    /// The accept queue's limit (`sk_max_ack_backlog`: `listen()`'s backlog capped by
    /// `net.core.somaxconn`); the queue is full at `backlog + 1` (`sk_acceptq_is_full`).
    pub backlog: u32,
}

/// srtt of the ESTABLISHED sockets toward one destination.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SrttSummary {
    /// Sockets with an srtt.
    pub count: u64,
    /// Smallest srtt, µs.
    pub min_us: u32,
    /// Median (the lower middle value), µs.
    pub p50_us: u32,
    /// Largest srtt, µs.
    pub max_us: u32,
    /// Mean, µs (rounded down).
    pub mean_us: u32,
    /// The log2 histogram of the values.
    pub log2: Log2Hist,
}

impl SrttSummary {
    /// Summarises srtt values; `None` when there are none.
    pub fn of(values: &mut [u32]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let n = values.len();
        let sum: u64 = values.iter().map(|&v| u64::from(v)).sum();
        let mut log2 = Log2Hist::default();
        for &v in values.iter() {
            log2.record(u64::from(v));
        }
        Some(Self {
            count: n as u64,
            min_us: values[0],
            p50_us: values[(n - 1) / 2],
            max_us: values[n - 1],
            mean_us: (sum / n as u64) as u32,
            log2,
        })
    }
}

/// Gauges of the outbound sockets of one namespace toward one remote address and port.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DestinationGauges {
    /// The remote address and port.
    pub remote: SocketAddr,
    /// ESTABLISHED sockets.
    pub established: u64,
    /// SYN_SENT sockets (connects in flight).
    pub syn_sent: u64,
    /// TIME_WAIT sockets (substate TIME_WAIT, as `ss`).
    pub time_wait: u64,
    /// Sockets in every other state (FIN_WAIT1/2, CLOSE_WAIT, LAST_ACK, CLOSING): they hold
    /// their port too.
    pub other: u64,
    /// Ephemeral ports held toward this destination: outbound sockets whose local port is in
    /// the usable range, counted per local address and the largest taken (a connect needs a
    /// 4-tuple that is unique, `__inet_check_established`).
    pub ports_in_use: u64,
    /// Ports a new connect to this destination can still pick: usable range − ports in use.
    pub headroom: u64,
    /// srtt of the ESTABLISHED sockets; `None` when there are none.
    pub srtt: Option<SrttSummary>,
}

/// The destination closest to running out of ephemeral ports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MinHeadroom {
    /// The destination.
    pub remote: SocketAddr,
    /// Its ports in use.
    pub ports_in_use: u64,
    /// Its headroom.
    pub headroom: u64,
}

/// What one dump says about one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SocketGauges {
    /// Sockets in the dump.
    pub sockets: u64,
    /// Sockets per state, as `ss` reports them.
    pub states: StateCounts,
    /// Timewait sockets whatever their substate (TIME_WAIT or FIN_WAIT2): what sockstat's
    /// `tw` counts.
    pub timewait_sockets: u64,
    /// Listening sockets, by local address.
    pub listeners: Vec<Listener>,
    /// Outbound sockets grouped by remote address and port, ascending.
    pub destinations: Vec<DestinationGauges>,
    /// The destination with the least headroom; `None` without outbound sockets.
    pub min_headroom: Option<MinHeadroom>,
}

impl SocketGauges {
    /// The gauges toward `remote`, if any socket goes there.
    pub fn destination(&self, remote: SocketAddr) -> Option<&DestinationGauges> {
        self.destinations.iter().find(|d| d.remote == remote)
    }
}

#[derive(Default)]
struct DestinationAcc {
    established: u64,
    syn_sent: u64,
    time_wait: u64,
    other: u64,
    ports_by_local: HashMap<IpAddr, u64>,
    srtt: Vec<u32>,
}

/// Aggregates a dump. A socket is outbound when it is not a listener and its local port is
/// not a listening port of the namespace (an accepted socket shares its listener's port, and
/// `__inet_hash_connect` never hands `connect()` a port that `bind()` holds).
pub fn aggregate(sockets: &[TcpSocket], range: &PortRange) -> SocketGauges {
    let mut g = SocketGauges {
        sockets: sockets.len() as u64,
        ..SocketGauges::default()
    };
    let mut listening: HashSet<u16> = HashSet::new();
    for s in sockets.iter().filter(|s| s.state == TcpState::Listen) {
        listening.insert(s.local.port());
        g.listeners.push(Listener {
            local: s.local,
            accept_queue: s.recv_q,
            backlog: s.send_q,
        });
    }
    g.listeners.sort_by_key(|l| l.local);
    let mut dest: BTreeMap<SocketAddr, DestinationAcc> = BTreeMap::new();
    for s in sockets {
        *g.states.slot(s.state) += 1;
        g.timewait_sockets += u64::from(s.timewait);
        if s.state == TcpState::Listen || listening.contains(&s.local.port()) {
            continue;
        }
        let d = dest.entry(s.remote).or_default();
        match s.state {
            TcpState::Established => {
                d.established += 1;
                d.srtt.extend(s.srtt_us);
            }
            TcpState::SynSent => d.syn_sent += 1,
            TcpState::TimeWait => d.time_wait += 1,
            _ => d.other += 1,
        }
        if range.contains(s.local.port()) {
            *d.ports_by_local.entry(s.local.ip()).or_default() += 1;
        }
    }
    let usable = u64::from(range.usable);
    for (remote, mut d) in dest {
        let ports_in_use = d.ports_by_local.values().copied().max().unwrap_or(0);
        let headroom = usable.saturating_sub(ports_in_use);
        if g.min_headroom
            .as_ref()
            .is_none_or(|m| headroom < m.headroom)
        {
            g.min_headroom = Some(MinHeadroom {
                remote,
                ports_in_use,
                headroom,
            });
        }
        g.destinations.push(DestinationGauges {
            remote,
            established: d.established,
            syn_sent: d.syn_sent,
            time_wait: d.time_wait,
            other: d.other,
            ports_in_use,
            headroom,
            srtt: SrttSummary::of(&mut d.srtt),
        });
    }
    g
}

/// One sample of one network namespace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NetnsSample {
    /// The namespace (its `ip netns` name or path).
    pub netns: String,
    /// Its inode number.
    pub netns_inode: u64,
    /// When the dump started, on the shared monotonic clock ([`crate::clock::now_ns`]).
    pub at_ns: u64,
    /// What the dumps cost, µs of wall time.
    pub dump_us: u64,
    /// Socket gauges.
    #[serde(flatten)]
    pub gauges: SocketGauges,
    /// The ephemeral-port range the headroom is computed against.
    pub port_range: PortRange,
    /// The namespace's TCP counters, read right after the dump.
    pub counters: NetCounters,
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

    fn v4(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// An inet_diag reply message as the kernel lays it out.
    struct Msg {
        family: u8,
        state: u8,
        timer: u8,
        local: SocketAddr,
        remote: SocketAddr,
        cookie: u64,
        rq: u32,
        wq: u32,
        rtt: Option<(u32, u32)>,
    }

    impl Msg {
        fn tcp(state: TcpState, local: &str, remote: &str) -> Self {
            Msg {
                family: libc::AF_INET as u8,
                state: state as u8,
                timer: if state == TcpState::TimeWait { 3 } else { 0 },
                local: v4(local),
                remote: v4(remote),
                cookie: 0x1_0000_0002,
                rq: 0,
                wq: 0,
                rtt: None,
            }
        }

        fn bytes(&self, seq: u32) -> Vec<u8> {
            let mut p = vec![0u8; DIAG_MSG_LEN];
            p[0] = self.family;
            p[1] = self.state;
            p[2] = self.timer;
            p[4..6].copy_from_slice(&self.local.port().to_be_bytes());
            p[6..8].copy_from_slice(&self.remote.port().to_be_bytes());
            let put = |p: &mut [u8], at: usize, a: IpAddr| match a {
                IpAddr::V4(a) => p[at..at + 4].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => p[at..at + 16].copy_from_slice(&a.octets()),
            };
            put(&mut p, 8, self.local.ip());
            put(&mut p, 24, self.remote.ip());
            p[44..48].copy_from_slice(&(self.cookie as u32).to_ne_bytes());
            p[48..52].copy_from_slice(&((self.cookie >> 32) as u32).to_ne_bytes());
            p[56..60].copy_from_slice(&self.rq.to_ne_bytes());
            p[60..64].copy_from_slice(&self.wq.to_ne_bytes());
            // An unrelated attribute first (INET_DIAG_SHUTDOWN, 1 byte, padded).
            p.extend_from_slice(&5u16.to_ne_bytes());
            p.extend_from_slice(&8u16.to_ne_bytes());
            p.extend_from_slice(&[0, 0, 0, 0]);
            if let Some((rtt, var)) = self.rtt {
                let mut info = vec![0u8; 232];
                info[TCPI_RTT..TCPI_RTT + 4].copy_from_slice(&rtt.to_ne_bytes());
                info[TCPI_RTTVAR..TCPI_RTTVAR + 4].copy_from_slice(&var.to_ne_bytes());
                p.extend_from_slice(&((4 + info.len()) as u16).to_ne_bytes());
                p.extend_from_slice(&INET_DIAG_INFO.to_ne_bytes());
                p.extend_from_slice(&info);
            }
            nl(SOCK_DIAG_BY_FAMILY, seq, &p)
        }
    }

    fn nl(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(payload);
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        b
    }

    #[test]
    fn tcp_info_offsets_match_the_c_struct() {
        assert_eq!(std::mem::offset_of!(libc::tcp_info, tcpi_rtt), TCPI_RTT);
        assert_eq!(
            std::mem::offset_of!(libc::tcp_info, tcpi_rttvar),
            TCPI_RTTVAR
        );
    }

    #[test]
    fn request_is_an_inet_diag_req_v2_dump() {
        let r = request(libc::AF_INET6 as u8, 0b110, 2, 7);
        assert_eq!(r.len(), 72);
        assert_eq!(u32_at(&r, 0), 72);
        assert_eq!(u16_at(&r, 4), SOCK_DIAG_BY_FAMILY);
        assert_eq!(u16_at(&r, 6), NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(u32_at(&r, 8), 7);
        assert_eq!(r[16], libc::AF_INET6 as u8);
        assert_eq!(r[17], libc::IPPROTO_TCP as u8);
        assert_eq!(r[18], 2);
        assert_eq!(u32_at(&r, 20), 0b110);
        assert!(r[24..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_multipart_reply_parses_until_done() {
        let mut est = Msg::tcp(TcpState::Established, "10.0.0.1:40000", "10.0.0.2:80");
        est.rtt = Some((123, 45));
        let tw = Msg::tcp(TcpState::TimeWait, "10.0.0.1:40001", "10.0.0.2:80");
        let mut six = Msg::tcp(TcpState::SynSent, "10.0.0.1:40002", "10.0.0.2:80");
        six.family = libc::AF_INET6 as u8;
        six.local = "[::ffff:10.0.0.1]:40002".parse().unwrap();
        six.remote = "[2001:db8::2]:443".parse().unwrap();
        // tcp_info of a socket that is not ESTABLISHED is not an srtt the gauges use.
        six.rtt = Some((999, 1));
        let mut first = est.bytes(9);
        first.extend(tw.bytes(9));
        // A stale message of an earlier dump is skipped.
        first.extend(tw.bytes(8));
        let mut out = Vec::new();
        assert_eq!(parse_datagram(&first, 9, &mut out), Ok(Progress::More));
        let mut second = six.bytes(9);
        second.extend(nl(NLMSG_DONE, 9, &0i32.to_ne_bytes()));
        assert_eq!(parse_datagram(&second, 9, &mut out), Ok(Progress::Done));
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].state, TcpState::Established);
        assert_eq!(out[0].local, v4("10.0.0.1:40000"));
        assert_eq!(out[0].remote, v4("10.0.0.2:80"));
        assert_eq!((out[0].srtt_us, out[0].rttvar_us), (Some(123), Some(45)));
        assert_eq!(out[0].cookie, 0x1_0000_0002);
        assert!(!out[0].timewait);
        assert!(out[1].timewait);
        assert_eq!(out[1].srtt_us, None);
        assert_eq!(out[2].local, v4("10.0.0.1:40002"));
        assert_eq!(out[2].remote, "[2001:db8::2]:443".parse().unwrap());
        assert_eq!(out[2].srtt_us, None);
    }

    #[test]
    fn errors_and_garbage_are_reported() {
        let mut out = Vec::new();
        let err = nl(NLMSG_ERROR, 1, &(-libc::EPERM).to_ne_bytes());
        assert_eq!(
            parse_datagram(&err, 1, &mut out),
            Err(Failure::Errno(libc::EPERM))
        );
        let done = nl(NLMSG_DONE, 1, &(-libc::ENOBUFS).to_ne_bytes());
        assert_eq!(
            parse_datagram(&done, 1, &mut out),
            Err(Failure::Errno(libc::ENOBUFS))
        );
        let mut short = Msg::tcp(TcpState::Established, "1.1.1.1:1", "2.2.2.2:2").bytes(1);
        short[0..4].copy_from_slice(&500u32.to_ne_bytes());
        assert!(matches!(
            parse_datagram(&short, 1, &mut out),
            Err(Failure::Malformed(_))
        ));
        let tiny = nl(SOCK_DIAG_BY_FAMILY, 1, &[0u8; 20]);
        assert!(matches!(
            parse_datagram(&tiny, 1, &mut out),
            Err(Failure::Malformed(_))
        ));
        let mut bad_state = Msg::tcp(TcpState::Established, "1.1.1.1:1", "2.2.2.2:2");
        bad_state.state = 42;
        assert!(matches!(
            parse_datagram(&bad_state.bytes(1), 1, &mut out),
            Err(Failure::Malformed(_))
        ));
        assert!(matches!(
            parse_datagram(&[0u8; 7], 1, &mut out),
            Err(Failure::Malformed(_))
        ));
        assert!(out.is_empty());
    }

    fn sock(state: TcpState, local: &str, remote: &str) -> TcpSocket {
        TcpSocket {
            state,
            local: v4(local),
            remote: v4(remote),
            timewait: matches!(state, TcpState::TimeWait),
            srtt_us: None,
            rttvar_us: None,
            recv_q: 0,
            send_q: 0,
            cookie: 0,
        }
    }

    #[test]
    fn aggregate_splits_inbound_from_outbound_and_computes_headroom() {
        let range = netstat::port_range(40000, 40099, &[(40090, 40099)], 2);
        assert_eq!(range.usable, 90);
        let mut listener = sock(TcpState::Listen, "0.0.0.0:8080", "0.0.0.0:0");
        listener.recv_q = 3;
        listener.send_q = 128;
        let mut est = sock(TcpState::Established, "10.0.0.1:40001", "10.0.0.2:80");
        est.srtt_us = Some(100);
        let mut est2 = sock(TcpState::Established, "10.0.0.1:40002", "10.0.0.2:80");
        est2.srtt_us = Some(300);
        let mut tw_fin = sock(TcpState::FinWait2, "10.0.0.1:40004", "10.0.0.2:80");
        tw_fin.timewait = true;
        let sockets = vec![
            listener,
            // Inbound: accepted on the listening port, in any state.
            sock(TcpState::Established, "10.0.0.1:8080", "10.0.0.9:50000"),
            sock(TcpState::TimeWait, "10.0.0.1:8080", "10.0.0.9:50001"),
            est,
            est2,
            sock(TcpState::TimeWait, "10.0.0.1:40003", "10.0.0.2:80"),
            tw_fin,
            sock(TcpState::SynSent, "10.0.0.1:40005", "10.0.0.2:80"),
            // Reserved and out-of-range local ports hold no ephemeral port.
            sock(TcpState::TimeWait, "10.0.0.1:40095", "10.0.0.2:80"),
            sock(TcpState::TimeWait, "10.0.0.1:2000", "10.0.0.2:80"),
            // A second local address: its ports are counted on their own.
            sock(TcpState::TimeWait, "10.0.1.1:40001", "10.0.0.2:80"),
            sock(TcpState::TimeWait, "10.0.0.1:40001", "10.0.0.3:5432"),
        ];
        let g = aggregate(&sockets, &range);
        assert_eq!(g.sockets, 12);
        assert_eq!(g.states.listen, 1);
        assert_eq!(g.states.established, 3);
        assert_eq!(g.states.time_wait, 6);
        assert_eq!(g.states.fin_wait2, 1);
        assert_eq!(g.states.syn_sent, 1);
        assert_eq!(g.timewait_sockets, 7);
        assert_eq!(
            g.listeners,
            vec![Listener {
                local: v4("0.0.0.0:8080"),
                accept_queue: 3,
                backlog: 128
            }]
        );
        assert_eq!(g.destinations.len(), 2);
        let d = g.destination(v4("10.0.0.2:80")).unwrap();
        assert_eq!(
            (d.established, d.syn_sent, d.time_wait, d.other),
            (2, 1, 4, 1)
        );
        // 10.0.0.1 holds 40001..=40005 (5 ports); 10.0.1.1 holds 1.
        assert_eq!(d.ports_in_use, 5);
        assert_eq!(d.headroom, 85);
        let srtt = d.srtt.as_ref().unwrap();
        assert_eq!(
            (
                srtt.count,
                srtt.min_us,
                srtt.p50_us,
                srtt.max_us,
                srtt.mean_us
            ),
            (2, 100, 100, 300, 200)
        );
        let other = g.destination(v4("10.0.0.3:5432")).unwrap();
        assert_eq!((other.ports_in_use, other.headroom), (1, 89));
        assert!(other.srtt.is_none());
        assert_eq!(
            g.min_headroom,
            Some(MinHeadroom {
                remote: v4("10.0.0.2:80"),
                ports_in_use: 5,
                headroom: 85
            })
        );
        assert!(g.destination(v4("10.0.0.9:50000")).is_none());
    }

    #[test]
    fn srtt_histogram_buckets_are_powers_of_two() {
        let s = SrttSummary::of(&mut [0, 1, 2, 3, 4, 1000, 1023, 1024]).unwrap();
        // Buckets `[2^i, 2^(i+1))` as everywhere in herd (0 and 1 share the first).
        let b: Vec<(u64, u64)> = (0..probe_common::HIST_BUCKETS)
            .filter(|&i| s.log2.0[i] > 0)
            .map(|i| (Log2Hist::upper(i), s.log2.0[i]))
            .collect();
        assert_eq!(b, vec![(2, 2), (4, 2), (8, 1), (1024, 2), (2048, 1)]);
        assert_eq!((s.min_us, s.p50_us, s.max_us), (0, 3, 1024));
        assert!(SrttSummary::of(&mut []).is_none());
    }

    #[test]
    fn samples_serialize_with_stable_snake_case_names() {
        let range = netstat::port_range(32768, 60999, &[], 2);
        let mut est = sock(TcpState::Established, "10.0.0.1:40000", "10.0.0.2:80");
        est.srtt_us = Some(50);
        let s = NetnsSample {
            netns: "gw".into(),
            netns_inode: 4026532000,
            at_ns: 1,
            dump_us: 2,
            gauges: aggregate(&[est], &range),
            port_range: range,
            counters: NetCounters::default(),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["states"]["established"], 1);
        assert_eq!(v["states"]["time_wait"], 0);
        assert_eq!(v["timewait_sockets"], 0);
        assert_eq!(v["destinations"][0]["remote"], "10.0.0.2:80");
        assert_eq!(v["destinations"][0]["headroom"], 28_231);
        assert_eq!(v["destinations"][0]["srtt"]["p50_us"], 50);
        assert_eq!(v["min_headroom"]["headroom"], 28_231);
        assert_eq!(v["port_range"]["usable"], 28_232);
        assert_eq!(v["counters"]["listen_overflows"], 0);
        assert!(v["counters"]["time_wait_overflows"].is_null());
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
