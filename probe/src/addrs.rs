//! Which addresses belong to which container: the local addresses of a container's network
//! namespace, read through one of its processes (`/proc/<pid>/net/...` shows the netns of
//! `<pid>`). Used to label a destination `198.18.0.2:8080` as `backend`.

use std::{collections::HashMap, net::IpAddr, os::unix::fs::MetadataExt as _, path::Path};

use crate::containers::ContainerSet;

/// Local, non-loopback addresses in `fib_trie` text (`/proc/<pid>/net/fib_trie`): an address
/// line `|-- a.b.c.d` followed by `/32 host LOCAL`.
pub fn parse_fib_trie(text: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut last: Option<IpAddr> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.parse().ok();
        } else if t.contains("/32 host LOCAL")
            && let Some(a) = last
            && !a.is_loopback()
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    out
}

/// Global addresses in `/proc/<pid>/net/if_inet6` text (32 hex digits per address).
pub fn parse_if_inet6(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(|v| IpAddr::from(std::net::Ipv6Addr::from(v)))
        .filter(|a| match a {
            IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
            IpAddr::V4(_) => false,
        })
        .collect()
}

fn netns_inode(pid: u32) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// Maps the addresses of every container that has its own network namespace (different from
/// this process's) to the container's name. Containers sharing the host's namespace are not
/// labelled: their addresses are the host's.
pub fn owners(set: &ContainerSet, unified: &Path) -> HashMap<IpAddr, String> {
    let own = netns_inode(std::process::id());
    let mut out = HashMap::new();
    for c in set.containers().iter().filter(|c| c.ended_ns.is_none()) {
        let procs = unified
            .join(c.cgroup.strip_prefix("/").unwrap_or(&c.cgroup))
            .join("cgroup.procs");
        let Some(pid) = std::fs::read_to_string(procs)
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()))
        else {
            continue;
        };
        if netns_inode(pid) == own {
            continue;
        }
        let read =
            |f: &str| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default();
        for a in parse_fib_trie(&read("fib_trie"))
            .into_iter()
            .chain(parse_if_inet6(&read("if_inet6")))
        {
            out.entry(a).or_insert_with(|| c.name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_local_addresses() {
        let fib = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 127.0.0.1\n        /32 host LOCAL\n     |-- 198.18.0.2\n        /32 host LOCAL\n     |-- 198.18.0.3\n        /32 link BROADCAST\nLocal:\n     |-- 198.18.0.2\n        /32 host LOCAL\n";
        assert_eq!(
            parse_fib_trie(fib),
            vec!["198.18.0.2".parse::<IpAddr>().unwrap()]
        );
        let v6 = "00000000000000000000000000000001 01 80 10 80       lo\nfe800000000000000000000000000001 02 40 20 80 eth0\n20010db8000000000000000000000001 02 40 00 80 eth0\n";
        assert_eq!(
            parse_if_inet6(v6),
            vec!["2001:db8::1".parse::<IpAddr>().unwrap()]
        );
    }
}
