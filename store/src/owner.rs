//! The process that recorded a run, to tell a live run from an interrupted one.

/// The process that recorded a run: enough to tell later whether it still lives.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// The host's name.
    pub host: String,
    /// The kernel's boot id (a pid means nothing after a reboot).
    pub boot_id: String,
    /// The process's start time in clock ticks since boot (a pid is reused).
    pub start_ticks: u64,
    /// Its PID namespace (the inode of /proc/self/ns/pid; 0 when unknown or written before
    /// herd recorded it): a shard in a container with the host's network has the host's
    /// name, but its pid means nothing in another PID namespace.
    #[serde(default)]
    pub pid_ns: u64,
}

impl Owner {
    /// This process.
    pub fn me() -> Self {
        let pid = std::process::id();
        Owner {
            pid,
            host: read_trim("/proc/sys/kernel/hostname"),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            start_ticks: start_ticks(pid).unwrap_or(0),
            pid_ns: std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| {
                use std::os::unix::fs::MetadataExt as _;
                m.ino()
            }),
        }
    }

    /// True when this is the host it ran on and the process is certainly gone. On another
    /// host, or from another PID namespace (a shard in a container), nothing can be told,
    /// so the run is left `running`.
    pub fn gone(&self) -> bool {
        let me = Owner::me();
        if self.host != me.host || self.host.is_empty() {
            return false;
        }
        if self.pid_ns != me.pid_ns && self.pid_ns != 0 && me.pid_ns != 0 {
            return false;
        }
        self.boot_id != me.boot_id || start_ticks(self.pid) != Some(self.start_ticks)
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of /proc/PID/stat, after the parenthesised command name (which may hold spaces).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(19)?.parse().ok()
}
