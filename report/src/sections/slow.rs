//! The section "Slow requests and their waits": per op, its requests above its whole-run p99
//! and the share in flight during each kernel-side wait on the request path, with the
//! windows they overlapped.

use crate::{
    doc::{Block, Column, Table, Text},
    model::{
        Report,
        attribution::{RUNQ_PERCENT, WaitKind},
    },
    units,
};

fn kind(k: WaitKind) -> &'static str {
    match k {
        WaitKind::Throttled => "throttled",
        WaitKind::RunQueue => "run-queue delay",
        WaitKind::Retransmit => "retransmits",
        WaitKind::SynRetransmit => "SYN retransmits",
        WaitKind::ListenDrop => "listen drops",
    }
}

pub(super) fn slow(b: &mut Vec<Block>, r: &Report) {
    let ops: Vec<_> = r
        .totals
        .iter()
        .filter_map(|t| Some((t, t.slow.as_ref()?)))
        .collect();
    if ops.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Slow requests and their waits".into()));
    b.push(Block::Para(Text::plain(format!(
        "Each op's requests slower than its whole-run p99 that the driver kept (its {} \
         slowest per op and interval), against the probe's windows on the request path: CFS \
         throttling and run-queue delay (at least {RUNQ_PERCENT} % of a window, summed over \
         the container's threads) per 100 ms window, retransmits per pair per 100 ms window, \
         listen drops per probe interval. A request counts for a wait when it was in flight \
         during one of its windows: the window is the resolution, not the wait's length.",
        herd_model::SLOWEST_PER_INTERVAL
    ))));
    let mut list = Vec::new();
    let mut t = Table::new(vec![
        Column::left("op"),
        Column::left("wait"),
        Column::left("at"),
        Column::left("window (s)"),
        Column::left("measured"),
        Column::right("slow requests in flight"),
    ]);
    for (total, s) in ops {
        if s.waits.is_empty() {
            list.push(Text::plain(format!(
                "Of {}'s {} requests over {} (its whole-run p99), none was in flight during a \
                 wait the probe saw on {}.",
                total.op,
                s.kept,
                units::latency(s.over_us),
                s.scope
            )));
        }
        for w in &s.waits {
            list.push(Text::plain(if w.more_windows > 0 {
                format!(
                    "{} ({} more windows than the table lists.)",
                    w.sentence, w.more_windows
                )
            } else {
                w.sentence.clone()
            }));
            for e in &w.evidence {
                t.row(vec![
                    total.op.clone().into(),
                    kind(w.kind).into(),
                    w.at.clone().into(),
                    format!("{:.1}–{:.1}", e.start_s, e.end_s).into(),
                    e.what.clone().into(),
                    e.requests.to_string().into(),
                ]);
            }
        }
    }
    b.push(Block::List(list));
    if !t.rows.is_empty() {
        b.push(Block::Table(t));
    }
}
