//! The NETLINK_SOCK_DIAG wire format: the `inet_diag_req_v2` dump request and the parser of
//! the multipart reply into [`TcpSocket`]s. Pure functions over bytes, tested against
//! messages laid out as the kernel lays them out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{TcpSocket, TcpState};

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
pub(super) const INET_DIAG_INFO: u16 = 2;
/// `INET_DIAG_SKMEMINFO`: the reply carries `u32 [SK_MEMINFO_VARS]` (`sock_diag_put_meminfo`).
pub(super) const INET_DIAG_SKMEMINFO: u16 = 7;
/// Offset of `SK_MEMINFO_DROPS` (index 8, since 4.x) in it.
const SK_MEMINFO_DROPS: usize = 8 * 4;
/// `NLA_TYPE_MASK`: attribute type without the nested/byte-order flags.
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `idiag_timer` value `inet_twsk_diag_fill` sets: only timewait sockets carry it.
const TIMER_TIME_WAIT: u8 = 3;
/// Offsets of `tcpi_rtt` and `tcpi_rttvar` in `struct tcp_info` (µs, `tp->srtt_us >> 3` and
/// `tp->mdev_us >> 2` in `tcp_get_info`, unchanged since 3.15).
const TCPI_RTT: usize = 68;
const TCPI_RTTVAR: usize = 72;

/// A `SOCK_DIAG_BY_FAMILY` dump request: `nlmsghdr` + `inet_diag_req_v2` for TCP sockets of
/// `family` in `states`, with extensions `ext` (a bit per `INET_DIAG_*` minus one).
pub(super) fn request(
    family: u8,
    states: u32,
    ext: u8,
    seq: u32,
) -> [u8; NLMSG_HDRLEN + REQ_V2_LEN] {
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
pub(super) enum Progress {
    More,
    Done,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
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
pub(super) fn parse_datagram(
    mut b: &[u8],
    seq: u32,
    out: &mut Vec<TcpSocket>,
) -> Result<Progress, Failure> {
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
    let expires_ms = u32_at(p, 52);
    let (recv_q, send_q) = (u32_at(p, 56), u32_at(p, 60));
    let (mut srtt_us, mut rttvar_us, mut drops) = (None, None, None);
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
        if kind == INET_DIAG_SKMEMINFO
            && state == TcpState::Listen
            && data.len() >= SK_MEMINFO_DROPS + 4
        {
            drops = Some(u32_at(data, SK_MEMINFO_DROPS));
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
        expires_ms,
        drops,
    })
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
        expires: u32,
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
                expires: if state == TcpState::TimeWait {
                    59_876
                } else {
                    0
                },
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
            p[52..56].copy_from_slice(&self.expires.to_ne_bytes());
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
        assert_eq!((out[0].expires_ms, out[1].expires_ms), (0, 59_876));
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
}
