//! CSV of the kernel-side waits, in the same dialect as [`super::csv`]: `run-N-waits.csv`,
//! one row per phase × container (run-queue delay, PSI, OOM kills, listen drops, conntrack,
//! retransmits summed over its destinations), and `run-N-retransmits.csv`, one row per phase ×
//! source → destination that retransmitted in the run. A value herd does not have is an
//! empty cell (the JSON report and the Markdown say why).

use super::csv::{field, line, num};
use crate::model::{Cell, Report};

fn cell(c: &Cell) -> String {
    c.value().map(num).unwrap_or_default()
}

/// One row per phase × container.
pub fn waits(r: &Report) -> String {
    let mut s = String::new();
    line(
        &mut s,
        [
            "phase",
            "container",
            "run-queue delay (ms)",
            "run-queue delay (ms/s)",
            "run-queue wait p99 log2 bound (us)",
            "run-queue waits",
            "PSI cpu some (ms)",
            "PSI cpu full (ms)",
            "PSI memory some (ms)",
            "PSI memory full (ms)",
            "PSI io some (ms)",
            "PSI io full (ms)",
            "OOM kills",
            "listen drops",
            "conntrack peak",
            "conntrack max",
            "conntrack drops",
            "SYN retransmits",
            "data retransmits",
        ]
        .map(String::from),
    );
    for c in &r.containers {
        let w = &c.waits;
        let retrans = w.retransmit_sums();
        line(
            &mut s,
            [
                field(&c.phase),
                field(&c.container),
                cell(&w.runq_total_ms),
                cell(&w.runq_ms_per_s),
                // The open last bucket has no finite bound: empty, as the JSON's says why.
                match w.runq_p99_le_us.value() {
                    Some(v) if v < u64::MAX as f64 => num(v),
                    _ => String::new(),
                },
                cell(&w.runq_waits),
                cell(&w.psi_cpu_some_ms),
                cell(&w.psi_cpu_full_ms),
                cell(&w.psi_memory_some_ms),
                cell(&w.psi_memory_full_ms),
                cell(&w.psi_io_some_ms),
                cell(&w.psi_io_full_ms),
                cell(&w.oom_kills),
                cell(&w.listen_drops),
                cell(&w.conntrack_peak),
                cell(&w.conntrack_max),
                cell(&w.conntrack_drops),
                retrans.map(|r| r.0.to_string()).unwrap_or_default(),
                retrans.map(|r| r.1.to_string()).unwrap_or_default(),
            ],
        );
    }
    s
}

/// One row per phase × source → destination that retransmitted anywhere in the run.
pub fn retransmits(r: &Report) -> String {
    let mut s = String::new();
    line(
        &mut s,
        [
            "phase",
            "source",
            "destination",
            "destination container",
            "SYN retransmits",
            "data retransmits",
        ]
        .map(String::from),
    );
    for c in &r.containers {
        for x in &c.waits.retransmits {
            line(
                &mut s,
                [
                    field(&c.phase),
                    field(&c.container),
                    field(&x.remote),
                    field(&x.remote_container),
                    x.syn.to_string(),
                    x.data.to_string(),
                ],
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::csv::tests::parse;

    #[test]
    fn the_fixtures_waits_read_back_as_the_reports_numbers() {
        let r = Report::build(&crate::snapshot_tests::fixture(false));
        let t = parse(&waits(&r));
        assert_eq!(t.len(), r.containers.len() + 1);
        assert!(t.iter().all(|row| row.len() == t[0].len()));
        let col = |h: &str| t[0].iter().position(|x| x == h).unwrap();
        let gw = t
            .iter()
            .find(|row| row[0] == "step 2" && row[1] == "gateway")
            .unwrap();
        let row = r
            .containers
            .iter()
            .find(|c| c.phase == "step 2" && c.container == "gateway")
            .unwrap();
        assert_eq!(
            gw[col("run-queue delay (ms)")].parse::<f64>().ok(),
            row.waits.runq_total_ms.value()
        );
        assert_eq!(gw[col("run-queue wait p99 log2 bound (us)")], "4096");
        assert_eq!(gw[col("listen drops")], "1");
        assert_eq!(gw[col("SYN retransmits")], "1");
        // Not measured: empty, never 0.
        assert_eq!(gw[col("PSI cpu full (ms)")], "");
        let be = t
            .iter()
            .find(|row| row[0] == "step 2" && row[1] == "backend")
            .unwrap();
        assert_eq!(be[col("PSI cpu some (ms)")], "");
        let x = parse(&retransmits(&r));
        assert!(
            x.iter().any(
                |row| row[..6] == ["step 2", "gateway", "198.18.0.6:8082", "backend", "1", "8"]
            )
        );
    }
}
