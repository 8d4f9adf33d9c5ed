//! The driver's own CPU and memory are still read when the players hold every descriptor
//! the process may open (EMFILE): its own process, since it lowers its descriptor limit.

use std::{fs::File, time::Duration};

use herd_driver::measure::health;

#[test]
fn cpu_and_rss_are_read_with_every_descriptor_taken() {
    // What the aggregator does before the first player starts.
    health::prepare();
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit each.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    let low = libc::rlimit {
        rlim_cur: 128.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut held = Vec::new();
    let refused = loop {
        match File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) => break e,
        }
        assert!(held.len() <= 128, "the limit of 128 did not hold");
    };
    let by_path = File::open("/proc/self/statm").err();
    let (cpu, rss) = (health::process_cpu(), health::rss_bytes());
    drop(held);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);

    assert_eq!(refused.raw_os_error(), Some(libc::EMFILE), "{refused}");
    assert!(by_path.is_some(), "opening a file by path must fail here");
    assert!(cpu.is_some_and(|c| c > Duration::ZERO), "cpu {cpu:?}");
    assert!(rss > 1 << 20, "rss {rss} B");
}
