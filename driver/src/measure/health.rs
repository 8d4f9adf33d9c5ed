//! The driver's own CPU, memory and scheduling lag, and when they say it is saturated.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

/// How often the lag probe wakes. Short enough for 100 samples a second, long enough that
/// the probe itself costs nothing measurable.
pub const LAG_PERIOD: Duration = Duration::from_millis(10);

/// This process's user + system CPU time, from `getrusage`: a system call, so it still
/// answers when the players hold every file descriptor the process may have (EMFILE),
/// where opening `/proc/self/stat` would fail exactly when the driver is most loaded.
pub fn process_cpu() -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the pointer it is given and nothing else.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: initialised by the successful call above (and zeroed before it).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// `/proc/self/statm`, opened once (by [`prepare`], before the load) and re-read from offset
/// 0 each interval: a descriptor held from the start cannot be refused by EMFILE later.
static STATM: std::sync::LazyLock<Option<std::fs::File>> =
    std::sync::LazyLock::new(|| std::fs::File::open("/proc/self/statm").ok());

/// Opens what [`rss_bytes`] reads while descriptors are still free; the aggregator calls it
/// before the first player starts.
pub fn prepare() {
    std::sync::LazyLock::force(&STATM);
}

/// Resident memory, from `/proc/self/statm` (0 when it cannot be read).
pub fn rss_bytes() -> u64 {
    use std::os::unix::fs::FileExt as _;
    let mut buf = [0u8; 256];
    let statm = match STATM.as_ref().map(|f| f.read_at(&mut buf, 0)) {
        Some(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        // Not opened (procfs missing at start) or unreadable: one more try by path.
        _ => match std::fs::read_to_string("/proc/self/statm") {
            Ok(s) => s,
            Err(_) => return 0,
        },
    };
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * page.max(0) as u64
}

/// Sleeps [`LAG_PERIOD`] in a loop and sends how late each wake-up was, in µs, until the
/// receiver is gone. It runs on the same runtime as the players, so a busy runtime shows.
pub(crate) async fn lag_probe(tx: UnboundedSender<u64>) {
    loop {
        let asked = Instant::now();
        tokio::time::sleep(LAG_PERIOD).await;
        let late = asked.elapsed().saturating_sub(LAG_PERIOD);
        if tx.send(late.as_micros() as u64).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// utime + stime in clock ticks from a `/proc/<pid>/stat` line. Fields are counted
    /// after the last `)`, since the command name in parentheses may itself hold spaces and
    /// parentheses.
    fn cpu_ticks(stat: &str) -> Option<u64> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        // After `)`: state is field 3; utime and stime are fields 14 and 15.
        let utime: u64 = fields.nth(11)?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        Some(utime + stime)
    }

    #[test]
    fn getrusage_agrees_with_proc_self_stat() {
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(120) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let before = process_cpu().unwrap();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let after = process_cpu().unwrap();
        // SAFETY: sysconf has no preconditions; it only reads a constant.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let tick = Duration::from_nanos(1_000_000_000 / hz);
        let proc = tick * cpu_ticks(&stat).unwrap() as u32;
        // /proc counts whole ticks (and other test threads run meanwhile): a few ticks apart.
        assert!(
            proc <= after + tick * 2 && proc + tick * 5 >= before,
            "/proc/self/stat {proc:?}, getrusage {before:?}..{after:?}"
        );
    }

    #[test]
    fn stat_fields_after_the_command_name() {
        let stat = "4242 (herd (drive) x) S 1 4242 4242 0 -1 4194560 1 2 3 4 250 75 0 0 20 0 9 0 100 1000 200";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let before = process_cpu().unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(process_cpu().unwrap() > before);
        assert!(rss_bytes() > 1 << 20);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lag_probe_sees_a_blocked_runtime() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let probe = tokio::spawn(lag_probe(tx));
        tokio::time::sleep(Duration::from_millis(25)).await;
        // Block the only runtime thread: the probe's timer cannot fire on time.
        std::thread::sleep(Duration::from_millis(150));
        tokio::time::sleep(Duration::from_millis(25)).await;
        probe.abort();
        let mut worst = 0;
        while let Ok(l) = rx.try_recv() {
            worst = worst.max(l);
        }
        assert!(worst >= 100_000, "worst lag {worst} µs");
    }
}
