//! The timeline section: the run's charts over time, driver and probe side by side, phases
//! marked, and the helpers the comparison draws its charts with.

use super::*;

/// Where each phase starts: the start of its first interval (an interval belongs to the
/// phase running at its end, and the driver cuts its intervals at phase boundaries), named.
pub(crate) fn phase_marks(t: &[TimelinePoint]) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut last = None;
    for p in t {
        if p.phase_index != last {
            if let Some(k) = p.phase_index {
                let name = p
                    .phase
                    .clone()
                    .unwrap_or_else(|| format!("phase {}", k + 1));
                out.push((p.start_s, name));
            }
            last = p.phase_index;
        }
    }
    out
}

/// The driver's saturated intervals, adjacent ones joined, with what saturated it.
pub(crate) fn saturated_bands(t: &[TimelinePoint]) -> Vec<Band> {
    let mut out: Vec<Band> = Vec::new();
    for p in t {
        let Some(why) = &p.driver.saturated else {
            continue;
        };
        match out.last_mut() {
            Some(b) if (b.end - p.start_s).abs() < 1e-6 => b.end = p.end_s(),
            _ => out.push(Band {
                start: p.start_s,
                end: p.end_s(),
                label: format!("driver saturated: {why}"),
            }),
        }
    }
    out
}

/// Intervals shorter than half the usual one (a run's last, cut short when the plan
/// ended): their rates are over their real length, but too noisy to set a chart's scale.
pub(crate) fn short_intervals(t: &[TimelinePoint]) -> Vec<(f64, f64)> {
    let mut lengths: Vec<f64> = t.iter().map(|p| p.duration_s).collect();
    lengths.sort_by(f64::total_cmp);
    let Some(usual) = lengths.get(lengths.len() / 2).copied() else {
        return Vec::new();
    };
    t.iter()
        .filter(|p| p.duration_s < usual / 2.0)
        .map(|p| (p.start_s, p.end_s()))
        .collect()
}

/// A timeline chart's frame: phase marks, saturated intervals, short intervals off the
/// scale (said in a note), the time axis to the run's end.
pub(crate) fn timeline_chart(
    t: &[TimelinePoint],
    title: &str,
    unit: &str,
    series: Vec<Series>,
) -> Chart {
    let mut c = Chart::new(title, unit, series);
    c.marks = phase_marks(t);
    c.bands = saturated_bands(t);
    c.off_scale = short_intervals(t);
    c.x_max = t.last().map(TimelinePoint::end_s);
    for p in t
        .iter()
        .filter(|p| c.off_scale.contains(&(p.start_s, p.end_s())))
    {
        c.notes.push(format!(
            "The interval at {:.1} s lasted {:.2} s: its rates are over its real length and \
             do not set the scale.",
            p.start_s, p.duration_s
        ));
    }
    c
}

/// `f` of each point at its interval's middle (a rate belongs to the whole interval).
pub(crate) fn points_of(
    t: &[TimelinePoint],
    f: &dyn Fn(&TimelinePoint) -> Option<f64>,
) -> Vec<(f64, f64)> {
    t.iter()
        .filter_map(|p| Some((p.start_s + p.duration_s / 2.0, f(p)?)))
        .collect()
}

/// The ops of a timeline, in the order they first appear.
pub(crate) fn timeline_ops(t: &[TimelinePoint]) -> Vec<String> {
    let mut ops: Vec<String> = Vec::new();
    for o in t.iter().flat_map(|p| &p.ops) {
        if !ops.contains(&o.op) {
            ops.push(o.op.clone());
        }
    }
    ops
}

/// The containers of a timeline, sorted.
pub(crate) fn timeline_containers(t: &[TimelinePoint]) -> Vec<String> {
    let mut names: Vec<String> = t
        .iter()
        .flat_map(|p| p.containers.iter().map(|c| c.container.clone()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A per-container figure of the timeline, and why a container may lack it.
pub(crate) type ContainerFigure = (fn(&TimelineContainer) -> Option<f64>, &'static str);

/// CPU used, cores.
pub(crate) const CPU: ContainerFigure =
    (|c| c.cpu_cores, "its cgroup's CPU usage was not readable");
/// The CPU quota, cores.
pub(crate) const QUOTA: ContainerFigure = (|c| c.cpu_quota_cores, "no CPU quota");
/// New connections per second.
pub(crate) const CONNECTS: ContainerFigure = (|c| Some(c.connects_per_s), "");
/// Share of CFS periods throttled, in percent.
pub(crate) const THROTTLED: ContainerFigure = (
    |c| c.throttled_share.map(|s| s * 100.0),
    "its cgroup's cpu.stat was not readable",
);
/// The TIME_WAIT gauge of its network namespace.
pub(crate) const TIME_WAIT: ContainerFigure = (
    |c| c.time_wait.map(|v| v as f64),
    "its network namespace was not sampled",
);
/// The usable ephemeral ports of its network namespace.
pub(crate) const PORTS: ContainerFigure = (
    |c| c.port_range.map(|v| v as f64),
    "its network namespace was not sampled",
);

/// The points of figure `f` of container `name`.
pub(crate) fn container_points(
    t: &[TimelinePoint],
    name: &str,
    f: ContainerFigure,
) -> Vec<(f64, f64)> {
    points_of(t, &|p| {
        p.containers
            .iter()
            .find(|c| c.container == name)
            .and_then(f.0)
    })
}

/// Why a report has no per-container timeline.
fn no_probe(r: &Report) -> String {
    r.notes
        .iter()
        .find_map(|n| n.strip_prefix("Kernel probe: "))
        .unwrap_or("the probe recorded no interval")
        .to_owned()
}

pub(super) fn timeline(b: &mut Vec<Block>, r: &Report) {
    let t = &r.timeline;
    b.push(Block::Heading(2, "Timeline".into()));
    if t.is_empty() {
        b.push(Block::Para(Text::plain(
            "No driver interval was recorded: there is no timeline to draw.",
        )));
        return;
    }
    let chart = |title: &str, unit: &str, series: Vec<Series>| {
        Block::Chart(timeline_chart(t, title, unit, series))
    };
    let ops = timeline_ops(t);
    let per_op = |f: fn(&crate::model::TimelineOp) -> f64| -> Vec<Series> {
        ops.iter()
            .enumerate()
            .map(|(i, op)| {
                Series::new(
                    op.clone(),
                    i,
                    points_of(t, &|p| p.ops.iter().find(|o| o.op == *op).map(f)),
                )
            })
            .collect()
    };
    b.push(chart(
        "Requests per second, by op",
        "req/s",
        per_op(|o| o.req_per_s),
    ));
    b.push(chart(
        "p99 latency, by op",
        "ms",
        per_op(|o| o.p99_us as f64 / 1e3),
    ));
    b.push(chart(
        "Errors and expected outcomes per interval",
        "requests",
        vec![
            Series::new("errors", 1, points_of(t, &|p| Some(p.split.errors as f64))),
            Series::new(
                "expected",
                4,
                points_of(t, &|p| Some(p.split.expected as f64)),
            ),
        ],
    ));
    if !r.streams.is_empty() {
        b.push(chart(
            "Stream and long-poll events per second",
            "events/s",
            vec![Series::new(
                "all stream ops",
                0,
                points_of(t, &|p| Some(p.stream_events_per_s)),
            )],
        ));
    }
    if !r.open.is_empty() {
        b.push(chart(
            "Open-model starts behind schedule, per interval",
            "starts",
            vec![
                Series::new(
                    "late starts",
                    3,
                    points_of(t, &|p| Some(p.late_starts as f64)),
                ),
                Series::new(
                    "dropped starts",
                    1,
                    points_of(t, &|p| Some(p.dropped_starts as f64)),
                ),
            ],
        ));
    }
    let names = timeline_containers(t);
    if names.is_empty() {
        let mut c = timeline_chart(t, "Per container (kernel probe)", "", Vec::new());
        c.empty = Some(no_probe(r));
        b.push(Block::Chart(c));
        return;
    }
    let by = |f: ContainerFigure| -> Vec<Series> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Series::new(n.clone(), i, container_points(t, n, f)).or_why(f.1))
            .collect()
    };
    b.push(chart(
        "New TCP connections per second, by container",
        "connects/s",
        by(CONNECTS),
    ));
    // Each container's quota beside its usage, dashed in the same colour: where the line
    // meets the dash, the container is at its cap.
    let mut cpu = Vec::new();
    for (i, n) in names.iter().enumerate() {
        cpu.push(Series::new(n.clone(), i, container_points(t, n, CPU)).or_why(CPU.1));
        let quota = container_points(t, n, QUOTA);
        if !quota.is_empty() {
            cpu.push(Series::new(format!("{n} quota"), i, quota).stroke(Stroke::Dashed));
        }
    }
    b.push(chart("CPU, by container (quota dashed)", "cores", cpu));
    b.push(chart(
        "Share of CFS periods throttled, by container",
        "%",
        by(THROTTLED),
    ));
    // The TIME_WAIT gauge against the namespace's ephemeral ports: a source that keeps that
    // many sockets in TIME_WAIT toward one destination gets EADDRNOTAVAIL.
    let mut gauges = 0;
    for (i, n) in names.iter().enumerate() {
        let tw = container_points(t, n, TIME_WAIT);
        if tw.is_empty() {
            continue;
        }
        gauges += 1;
        let mut series = vec![Series::new("TIME_WAIT sockets", i, tw)];
        let ports = container_points(t, n, PORTS);
        if !ports.is_empty() {
            series
                .push(Series::new("ephemeral ports (the cliff)", 5, ports).stroke(Stroke::Dashed));
        }
        b.push(chart(
            &format!("TIME_WAIT sockets of {n} against its ephemeral-port range"),
            "sockets",
            series,
        ));
    }
    if gauges == 0 {
        let mut c = timeline_chart(
            t,
            "TIME_WAIT sockets against the ephemeral-port range",
            "sockets",
            Vec::new(),
        );
        c.empty = Some(format!(
            "no container's {}",
            TIME_WAIT.1.trim_start_matches("its ")
        ));
        b.push(Block::Chart(c));
    }
    super::waits::charts(b, r);
}
