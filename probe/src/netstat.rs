//! Per-network-namespace TCP counters from procfs: `net/netstat`, `net/snmp` and
//! `net/sockstat`, plus the sysctls that bound ephemeral ports.
//!
//! These files describe the network namespace they were opened in, not the reader's, so a
//! container's counters are read through files opened inside its namespace (see
//! [`crate::sockdiag::Netns`]). The parsers here are pure functions over the files' text.

use std::collections::BTreeMap;

/// A procfs counter file parsed into `section → name → value`, e.g.
/// `"TcpExt" → "ListenOverflows" → 3`.
pub type Sections = BTreeMap<String, BTreeMap<String, i64>>;

/// Why a counter file could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A header line has no matching value line, or the two differ in length.
    #[error("section {section}: {names} names but {values} values")]
    Mismatch {
        /// The section (`TcpExt`, `Tcp`, ...).
        section: String,
        /// Number of names in the header line.
        names: usize,
        /// Number of values in the value line.
        values: usize,
    },
    /// A value is not an integer.
    #[error("section {section}: {name} = {value:?} is not an integer")]
    NotANumber {
        /// The section.
        section: String,
        /// The counter name.
        name: String,
        /// The text found.
        value: String,
    },
    /// A line has no `Section:` prefix.
    #[error("line {0:?} has no `Section:` prefix")]
    NoSection(String),
    /// `ip_local_port_range` is not two ports, low ≤ high.
    #[error("ip_local_port_range {0:?} is not `LOW HIGH`")]
    PortRange(String),
    /// `ip_local_reserved_ports` is not a comma-separated list of ports and ranges.
    #[error("ip_local_reserved_ports {0:?} is not a list of ports and LOW-HIGH ranges")]
    ReservedPorts(String),
}

fn section_of(line: &str) -> Result<(&str, &str), ParseError> {
    line.split_once(':')
        .filter(|(s, _)| !s.is_empty() && !s.contains(char::is_whitespace))
        .ok_or_else(|| ParseError::NoSection(line.to_owned()))
}

fn number(section: &str, name: &str, value: &str) -> Result<i64, ParseError> {
    value.parse().map_err(|_| ParseError::NotANumber {
        section: section.to_owned(),
        name: name.to_owned(),
        value: value.to_owned(),
    })
}

/// Parses the two-line format of `/proc/net/netstat` and `/proc/net/snmp`: a line of names
/// and a line of values per section, both prefixed with `Section:`. Values are signed
/// because `Tcp: MaxConn` is -1 (`net/ipv4/proc.c`, `snmp_seq_show_tcp_udp`). A section that
/// appears twice (never seen, but harmless) keeps the later values.
pub fn parse_two_line(text: &str) -> Result<Sections, ParseError> {
    let mut out = Sections::new();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    while let Some(header) = lines.next() {
        let (section, names) = section_of(header)?;
        let names: Vec<&str> = names.split_whitespace().collect();
        let values: Vec<&str> = match lines.next() {
            Some(line) => {
                let (s, values) = section_of(line)?;
                if s != section {
                    return Err(ParseError::Mismatch {
                        section: section.to_owned(),
                        names: names.len(),
                        values: 0,
                    });
                }
                values.split_whitespace().collect()
            }
            None => Vec::new(),
        };
        if names.len() != values.len() {
            return Err(ParseError::Mismatch {
                section: section.to_owned(),
                names: names.len(),
                values: values.len(),
            });
        }
        let map = out.entry(section.to_owned()).or_default();
        for (name, value) in names.into_iter().zip(values) {
            map.insert(name.to_owned(), number(section, name, value)?);
        }
    }
    Ok(out)
}

/// Parses `/proc/net/sockstat`: one line per section of alternating names and values,
/// e.g. `TCP: inuse 3 orphan 0 tw 200 alloc 4 mem 1`. Fields added by newer kernels are
/// simply more pairs.
pub fn parse_sockstat(text: &str) -> Result<Sections, ParseError> {
    let mut out = Sections::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (section, rest) = section_of(line)?;
        let words: Vec<&str> = rest.split_whitespace().collect();
        if !words.len().is_multiple_of(2) {
            return Err(ParseError::Mismatch {
                section: section.to_owned(),
                names: words.len().div_ceil(2),
                values: words.len() / 2,
            });
        }
        let map = out.entry(section.to_owned()).or_default();
        for kv in words.chunks_exact(2) {
            map.insert(kv[0].to_owned(), number(section, kv[0], kv[1])?);
        }
    }
    Ok(out)
}

fn get(s: &Sections, section: &str, name: &str) -> Option<i64> {
    s.get(section)?.get(name).copied()
}

fn counter(s: &Sections, section: &str, name: &str) -> u64 {
    get(s, section, name).map_or(0, |v| v.max(0) as u64)
}

/// The TCP counters of one network namespace, cumulative since the namespace was created
/// (except the gauges `curr_estab`, `sockstat_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetCounters {
    /// `TcpExt: ListenOverflows`: SYNs or handshake-completing ACKs dropped because a
    /// listener's accept queue was full (`tcp_conn_request`, `tcp_v4_syn_recv_sock`).
    pub listen_overflows: u64,
    /// `TcpExt: ListenDrops`: every drop at a listener, overflows included (`tcp_listendrop`).
    pub listen_drops: u64,
    /// `TcpExt: TCPTimeWaitOverflow`: sockets that skipped TIME_WAIT because
    /// `tcp_max_tw_buckets` was reached. `None` when the kernel does not export it.
    pub time_wait_overflows: Option<u64>,
    /// `TcpExt: TCPSynRetrans`: SYN retransmissions of connects, e.g. toward a destination
    /// whose accept queue is full.
    pub syn_retrans: u64,
    /// `Tcp: ActiveOpens`: connects (SYN sent).
    pub active_opens: u64,
    /// `Tcp: PassiveOpens`: accepted handshakes.
    pub passive_opens: u64,
    /// `Tcp: AttemptFails`: connects that failed before ESTABLISHED.
    pub attempt_fails: u64,
    /// `Tcp: EstabResets`: ESTABLISHED or CLOSE_WAIT sockets reset.
    pub estab_resets: u64,
    /// `Tcp: CurrEstab`: sockets now in ESTABLISHED or CLOSE_WAIT (a gauge).
    pub curr_estab: u64,
    /// `Tcp: RetransSegs`.
    pub retrans_segs: u64,
    /// `Tcp: OutRsts`: resets sent.
    pub out_rsts: u64,
    /// `sockstat` `TCP: tw`: timewait sockets of the namespace, IPv4 and IPv6, whatever their
    /// substate (`refcount(tcp_death_row.tw_refcount) - 1` in `sockstat_seq_show`).
    pub sockstat_tw: u64,
    /// `sockstat` `TCP: inuse`: IPv4 TCP sockets in the hash tables (IPv6 ones are in
    /// `sockstat6`).
    pub sockstat_inuse: u64,
    /// `sockstat` `TCP: orphan`: sockets no process holds. This one is host-wide: the kernel
    /// keeps a single orphan counter (`tcp_orphan_count_sum`).
    pub sockstat_orphan: u64,
}

impl NetCounters {
    /// Picks the counters out of parsed `netstat`, `snmp` and `sockstat`.
    pub fn from_sections(netstat: &Sections, snmp: &Sections, sockstat: &Sections) -> Self {
        Self {
            listen_overflows: counter(netstat, "TcpExt", "ListenOverflows"),
            listen_drops: counter(netstat, "TcpExt", "ListenDrops"),
            time_wait_overflows: get(netstat, "TcpExt", "TCPTimeWaitOverflow")
                .map(|v| v.max(0) as u64),
            syn_retrans: counter(netstat, "TcpExt", "TCPSynRetrans"),
            active_opens: counter(snmp, "Tcp", "ActiveOpens"),
            passive_opens: counter(snmp, "Tcp", "PassiveOpens"),
            attempt_fails: counter(snmp, "Tcp", "AttemptFails"),
            estab_resets: counter(snmp, "Tcp", "EstabResets"),
            curr_estab: counter(snmp, "Tcp", "CurrEstab"),
            retrans_segs: counter(snmp, "Tcp", "RetransSegs"),
            out_rsts: counter(snmp, "Tcp", "OutRsts"),
            sockstat_tw: counter(sockstat, "TCP", "tw"),
            sockstat_inuse: counter(sockstat, "TCP", "inuse"),
            sockstat_orphan: counter(sockstat, "TCP", "orphan"),
        }
    }
}

/// The ports `connect()` may pick in one network namespace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PortRange {
    /// `net.ipv4.ip_local_port_range` low end (it also governs IPv6).
    pub low: u16,
    /// High end, inclusive.
    pub high: u16,
    /// Ports of the range listed in `net.ipv4.ip_local_reserved_ports`, which `connect()`
    /// never picks.
    pub reserved: u32,
    /// Ports `connect()` can pick: range size minus reserved.
    pub usable: u32,
    /// `net.ipv4.tcp_tw_reuse` (0 off, 1 on, 2 loopback only): with 1, a connect may reuse a
    /// TIME_WAIT port after 1 s, so TIME_WAIT sockets overstate the ports in use.
    pub tw_reuse: u8,
    /// The reserved ports as inclusive ranges, as the sysctl lists them.
    #[serde(skip)]
    pub reserved_ranges: Vec<(u16, u16)>,
}

impl PortRange {
    /// True when `port` is one `connect()` may pick (`inet_is_local_reserved_port`).
    pub fn contains(&self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
            && !self
                .reserved_ranges
                .iter()
                .any(|&(a, b)| (a..=b).contains(&port))
    }
}

/// Parses `ip_local_port_range` (`"32768\t60999\n"`).
pub fn parse_port_range(text: &str) -> Result<(u16, u16), ParseError> {
    let bad = || ParseError::PortRange(text.trim().to_owned());
    let mut it = text.split_whitespace().map(str::parse::<u16>);
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(low)), Some(Ok(high)), None) if low <= high => Ok((low, high)),
        _ => Err(bad()),
    }
}

/// Parses `ip_local_reserved_ports` (`""`, `"8080"`, `"8080,9000-9100"`) into inclusive
/// ranges.
pub fn parse_reserved_ports(text: &str) -> Result<Vec<(u16, u16)>, ParseError> {
    let bad = || ParseError::ReservedPorts(text.trim().to_owned());
    let mut out = Vec::new();
    for item in text.trim().split(',').filter(|s| !s.is_empty()) {
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (a.trim().parse(), b.trim().parse()),
            None => (item.trim().parse(), item.trim().parse()),
        };
        match (a, b) {
            (Ok(a), Ok(b)) if a <= b => out.push((a, b)),
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// Builds a [`PortRange`] from the parsed sysctls.
pub fn port_range(low: u16, high: u16, reserved: &[(u16, u16)], tw_reuse: u8) -> PortRange {
    let in_range: u32 = reserved
        .iter()
        .map(|&(a, b)| {
            let (a, b) = (a.max(low), b.min(high));
            if a <= b { u32::from(b - a) + 1 } else { 0 }
        })
        .sum();
    let size = u32::from(high - low) + 1;
    PortRange {
        low,
        high,
        reserved: in_range,
        usable: size.saturating_sub(in_range),
        tw_reuse,
        reserved_ranges: reserved.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Abridged from this host's kernel (6.18); names and order as the kernel prints them.
    const NETSTAT: &str = "\
TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops TW TCPSynRetrans TCPTimeWaitOverflow
TcpExt: 0 0 7 9 300 2 0
IpExt: InNoRoutes InTruncatedPkts InOctets
IpExt: 0 0 123456789012
MPTcpExt: MPCapableSYNRX
MPTcpExt: 0
";
    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 1000
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 300 2 1 0 5 900 901 3 0 4 0
";
    const SOCKSTAT: &str = "\
sockets: used 12
TCP: inuse 3 orphan 0 tw 300 alloc 4 mem 1
UDP: inuse 0 mem 0
FRAG: inuse 0 memory 0
";

    #[test]
    fn two_line_sections_parse_into_name_value_maps() {
        let s = parse_two_line(NETSTAT).unwrap();
        assert_eq!(get(&s, "TcpExt", "ListenOverflows"), Some(7));
        assert_eq!(get(&s, "TcpExt", "TCPTimeWaitOverflow"), Some(0));
        assert_eq!(get(&s, "IpExt", "InOctets"), Some(123_456_789_012));
        assert_eq!(get(&s, "MPTcpExt", "MPCapableSYNRX"), Some(0));
        let snmp = parse_two_line(SNMP).unwrap();
        assert_eq!(get(&snmp, "Tcp", "MaxConn"), Some(-1));
        assert_eq!(get(&snmp, "Tcp", "OutRsts"), Some(4));
    }

    #[test]
    fn counters_pick_the_right_fields_and_tolerate_missing_ones() {
        let c = NetCounters::from_sections(
            &parse_two_line(NETSTAT).unwrap(),
            &parse_two_line(SNMP).unwrap(),
            &parse_sockstat(SOCKSTAT).unwrap(),
        );
        assert_eq!(c.listen_overflows, 7);
        assert_eq!(c.listen_drops, 9);
        assert_eq!(c.time_wait_overflows, Some(0));
        assert_eq!(c.syn_retrans, 2);
        assert_eq!(c.active_opens, 300);
        assert_eq!(c.passive_opens, 2);
        assert_eq!(c.attempt_fails, 1);
        assert_eq!(c.curr_estab, 5);
        assert_eq!(c.retrans_segs, 3);
        assert_eq!(c.out_rsts, 4);
        assert_eq!(c.sockstat_tw, 300);
        assert_eq!(c.sockstat_inuse, 3);
        let old_kernel = parse_two_line("TcpExt: ListenOverflows\nTcpExt: 1\n").unwrap();
        let c = NetCounters::from_sections(&old_kernel, &Sections::new(), &Sections::new());
        assert_eq!(c.listen_overflows, 1);
        assert_eq!(c.time_wait_overflows, None);
        assert_eq!(c.sockstat_tw, 0);
    }

    #[test]
    fn malformed_files_are_errors_not_zeros() {
        assert!(matches!(
            parse_two_line("TcpExt: A B\nTcpExt: 1\n"),
            Err(ParseError::Mismatch {
                names: 2,
                values: 1,
                ..
            })
        ));
        assert!(matches!(
            parse_two_line("TcpExt: A\n"),
            Err(ParseError::Mismatch { values: 0, .. })
        ));
        assert!(matches!(
            parse_two_line("TcpExt: A\nIpExt: 1\n"),
            Err(ParseError::Mismatch { .. })
        ));
        assert!(matches!(
            parse_two_line("TcpExt: A\nTcpExt: x\n"),
            Err(ParseError::NotANumber { .. })
        ));
        assert!(matches!(
            parse_two_line("no prefix here\n"),
            Err(ParseError::NoSection(_))
        ));
        assert!(matches!(
            parse_sockstat("TCP: inuse 3 orphan\n"),
            Err(ParseError::Mismatch { .. })
        ));
        let s = parse_sockstat(SOCKSTAT).unwrap();
        assert_eq!(get(&s, "sockets", "used"), Some(12));
        assert_eq!(get(&s, "FRAG", "memory"), Some(0));
    }

    #[test]
    fn port_range_and_reserved_ports() {
        assert_eq!(parse_port_range("32768\t60999\n"), Ok((32768, 60999)));
        assert!(parse_port_range("60999 32768").is_err());
        assert!(parse_port_range("1").is_err());
        assert!(parse_port_range("1 2 3").is_err());
        assert_eq!(parse_reserved_ports("\n"), Ok(vec![]));
        assert_eq!(
            parse_reserved_ports("8080,40000-40009\n"),
            Ok(vec![(8080, 8080), (40000, 40009)])
        );
        assert!(parse_reserved_ports("9-1").is_err());
        assert!(parse_reserved_ports("x").is_err());
        let reserved = parse_reserved_ports("8080,32760-32770,60999").unwrap();
        let r = port_range(32768, 60999, &reserved, 2);
        // 32768..=32770 (3) and 60999 (1) lie in the range; 8080 does not.
        assert_eq!(r.reserved, 4);
        assert_eq!(r.usable, 28_232 - 4);
        assert!(r.contains(32771));
        assert!(!r.contains(32769));
        assert!(!r.contains(60999));
        assert!(!r.contains(61000));
    }
}
