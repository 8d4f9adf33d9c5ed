//! What a plan needs from the host, checked before the first player starts: a plan that
//! cannot fit is refused in one line naming the numbers and the way out, instead of growing
//! until the OOM killer (`players = 1000000000`) or turning into a run of `connect` errors
//! (20 000 players under `ulimit -n 1024`).

use crate::scenario::{Connections, Scenario};

/// Memory one player takes while it runs, measured for an h2c player with its connection,
/// stream and calls (docs/benchmarks.md, "21 KiB all told"). HTTP/1.1 and TLS players take
/// more, so the estimate is a floor: a plan it refuses certainly does not fit.
pub const PLAYER_BYTES: u64 = 21 * 1024;

/// Memory the driver keeps per op while it runs (its phase and interval histograms and
/// counters), measured at about 35 KiB with 26 000 ops (docs/reliability.md, cell 3).
pub const OP_BYTES: u64 = 35 * 1024;

/// File descriptors herd holds besides the players' sockets: the runtime, stdio, the store,
/// the kernel probe's maps and programs, the output files.
pub const RESERVED_FDS: u64 = 256;

/// What a plan needs at its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Players (and hammer workers, rate-step requests in flight, catalog routes) alive at
    /// once, counted as if every shape peaked together.
    pub players: u64,
    /// Connections open at once to the one destination.
    pub sockets: u64,
    /// Local source addresses they are spread over (`target.source_addrs`; 1 without).
    pub sources: u64,
    /// The scenario's ops.
    pub ops: u64,
    /// Bytes of memory the players and the ops' measurements take.
    pub memory: u64,
}

impl Needs {
    /// The peak of `s`'s plan.
    pub fn of(s: &Scenario) -> Self {
        let steps = s.steps.iter().map(|p| p.players as u64).max().unwrap_or(0);
        let rates = s
            .shapes
            .rates
            .iter()
            .map(|r| r.max_in_flight as u64)
            .max()
            .unwrap_or(0);
        let catalog = s
            .shapes
            .catalog
            .iter()
            .map(|r| r.concurrency as u64)
            .max()
            .unwrap_or(0);
        let soak = s.shapes.soak.as_ref().map_or(0, |k| k.up_to as u64);
        let hammer = s.hammer.as_ref().map_or(0, |h| h.workers as u64);
        let players = steps
            .max(rates)
            .max(catalog)
            .max(soak)
            .saturating_add(hammer);
        let sockets = match s.target.connections {
            Connections::PerPlayer => players,
            Connections::Pool(n) => n as u64,
        };
        let ops = s.ops.len() as u64;
        Needs {
            players,
            sockets,
            sources: (s.target.source_addrs.len() as u64).max(1),
            ops,
            memory: players
                .saturating_mul(PLAYER_BYTES)
                .saturating_add(ops.saturating_mul(OP_BYTES)),
        }
    }
}

/// What the host offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// The soft `RLIMIT_NOFILE` (after [`raise_nofile`]).
    pub nofile: u64,
    /// The hard `RLIMIT_NOFILE`: what the soft one can be raised to without privileges.
    pub nofile_hard: u64,
    /// `MemAvailable` from /proc/meminfo, if readable.
    pub memory: Option<u64>,
    /// Ephemeral ports (`net.ipv4.ip_local_port_range`), if readable: the most connections
    /// one host can open to one destination address and port.
    pub ports: Option<(u16, u16)>,
}

impl Host {
    /// The running host and process.
    pub fn now() -> Self {
        let (nofile, nofile_hard) = nofile();
        let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|kb| kb * 1024)
        });
        let ports = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| {
                let mut it = r.split_whitespace().map(|v| v.parse::<u16>().ok());
                Some((it.next()??, it.next()??))
            });
        Host {
            nofile,
            nofile_hard,
            memory,
            ports,
        }
    }
}

/// A plan larger than the host: bad input (exit 2), fixed in the scenario or the host.
#[derive(Debug, thiserror::Error)]
#[error("{file}: the plan does not fit this host: {}", .reasons.join("; "))]
pub struct PlanTooLarge {
    /// The scenario, as the user named it.
    pub file: String,
    /// One sentence per exceeded limit, with the numbers and the way out.
    pub reasons: Vec<String>,
}

/// Refuses `needs` when it exceeds `host`.
pub fn check(file: &str, needs: Needs, host: Host) -> Result<(), PlanTooLarge> {
    let mut reasons = Vec::new();
    let fds = needs.sockets.saturating_add(RESERVED_FDS);
    if fds > host.nofile {
        let way_out = if fds <= host.nofile_hard {
            format!("raise it with `ulimit -n {fds}`")
        } else {
            format!(
                "the hard limit is {}: raise it (`ulimit -Hn`, LimitNOFILE= in systemd, \
                 /etc/security/limits.conf) or use fewer players or `target.connections = N`",
                host.nofile_hard
            )
        };
        reasons.push(format!(
            "{} connections need {fds} file descriptors ({RESERVED_FDS} for herd itself) but \
             the limit (RLIMIT_NOFILE) is {}; {way_out}",
            needs.sockets, host.nofile
        ));
    }
    if let Some((lo, hi)) = host.ports {
        let range = u64::from(hi.saturating_sub(lo)) + 1;
        let per_source = needs.sockets.div_ceil(needs.sources.max(1));
        if per_source > range {
            reasons.push(format!(
                "{} connections to one address from {} source address{} need {per_source} \
                 ephemeral ports each but net.ipv4.ip_local_port_range ({lo}-{hi}) holds \
                 {range}; widen it, add source addresses (`target.source_addrs`), use fewer \
                 players, or share connections (`target.connections = N`)",
                needs.sockets,
                needs.sources,
                if needs.sources == 1 { "" } else { "es" }
            ));
        }
    }
    if let Some(avail) = host.memory
        && needs.memory > avail
    {
        reasons.push(format!(
            "{} players and {} ops need at least {} MiB ({} KiB a player, {} KiB an op) but {} \
             MiB are available; use fewer players or ops, or a larger host",
            needs.players,
            needs.ops,
            needs.memory >> 20,
            PLAYER_BYTES >> 10,
            OP_BYTES >> 10,
            avail >> 20
        ));
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(PlanTooLarge {
            file: file.to_owned(),
            reasons,
        })
    }
}

/// Refuses shard `shard` of `s` when its peak exceeds the running host: a shard holds
/// about 1/N of the players (a pool is per process, whole in every shard).
pub fn check_host(s: &Scenario, shard: herd_model::Shard) -> Result<(), PlanTooLarge> {
    let mut needs = Needs::of(s);
    let n = u64::from(shard.count);
    needs.players = needs.players.div_ceil(n);
    if let Connections::PerPlayer = s.target.connections {
        needs.sockets = needs.sockets.div_ceil(n);
    }
    needs.memory = needs
        .players
        .saturating_mul(PLAYER_BYTES)
        .saturating_add(needs.ops.saturating_mul(OP_BYTES));
    check(&s.file, needs, Host::now())
}

/// The soft and hard `RLIMIT_NOFILE`.
fn nofile() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return (u64::MAX, u64::MAX);
    }
    (r.rlim_cur, r.rlim_max)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as Go's runtime does at start: the soft
/// default (1024) exists for select(2), which herd does not use. Returns the limit now in force.
pub fn raise_nofile() -> u64 {
    let (soft, hard) = nofile();
    if soft >= hard {
        return soft;
    }
    let r = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } == 0 {
        hard
    } else {
        soft
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: Host = Host {
        nofile: 1024,
        nofile_hard: 4096,
        memory: Some(8 << 30),
        ports: Some((32768, 60999)),
    };

    #[test]
    fn a_billion_players_are_refused_with_every_number() {
        let needs = Needs {
            players: 1_000_000_000,
            sockets: 1_000_000_000,
            sources: 1,
            ops: 1,
            memory: 1_000_000_000 * PLAYER_BYTES + OP_BYTES,
        };
        let e = check("s.toml", needs, HOST).unwrap_err().to_string();
        for says in [
            "1000000000 connections need 1000000256 file descriptors",
            "the limit (RLIMIT_NOFILE) is 1024",
            "the hard limit is 4096",
            "ip_local_port_range (32768-60999) holds 28232",
            "1000000000 players and 1 ops need at least 20507812 MiB (21 KiB a player, 35 KiB an op) but 8192 MiB",
        ] {
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn a_plan_within_the_soft_limit_passes_and_one_within_the_hard_says_ulimit() {
        let needs = |n: u64| Needs {
            players: n,
            sockets: n,
            sources: 1,
            ops: 1,
            memory: n * PLAYER_BYTES + OP_BYTES,
        };
        assert!(check("s.toml", needs(700), HOST).is_ok());
        let e = check("s.toml", needs(2000), HOST).unwrap_err().to_string();
        assert!(e.contains("`ulimit -n 2256`"), "{e}");
    }

    #[test]
    fn source_addresses_multiply_the_ports_toward_one_destination() {
        let needs = |sources: u64| Needs {
            players: 50_000,
            sockets: 50_000,
            sources,
            ops: 1,
            memory: 0,
        };
        let host = Host {
            nofile: 100_000,
            nofile_hard: 100_000,
            ..HOST
        };
        let e = check("s.toml", needs(1), host).unwrap_err().to_string();
        assert!(
            e.contains("from 1 source address need 50000 ephemeral ports"),
            "{e}"
        );
        check("s.toml", needs(2), host).unwrap();
    }

    /// A plan of few players but a huge op list is refused on the ops' memory, before load.
    #[test]
    fn a_huge_op_list_is_refused_on_its_memory() {
        let needs = Needs {
            players: 2,
            sockets: 2,
            sources: 1,
            ops: 300_000,
            memory: 2 * PLAYER_BYTES + 300_000 * OP_BYTES,
        };
        let e = check("s.toml", needs, HOST).unwrap_err().to_string();
        assert!(
            e.contains("2 players and 300000 ops need at least 10253 MiB")
                && e.contains("fewer players or ops"),
            "{e}"
        );
        assert!(!e.contains("file descriptors"), "{e}");
    }
}
