//! Per source container → destination rows over the whole run: new connections, churn on
//! the request path, TIME_WAIT entries and gauges, port headroom, srtt, connect latency and
//! lifetimes (log2 histograms merged exactly).

use std::collections::BTreeMap;

use herd_model::{Log2Hist, PairStats};
use serde::{Deserialize, Serialize};

use super::{Cell, secs};
use herd_model::Log2Summary;
use herd_model::RunData;

/// One source container → destination row.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairRow {
    /// Source container.
    pub container: String,
    /// Destination address:port.
    pub remote: String,
    /// The destination's container, or `-` when the address is not a known container's.
    pub remote_container: String,
    /// New connections over the run.
    pub connects: u64,
    /// New connections per second.
    pub connects_per_s: f64,
    /// TIME_WAIT entries over the run.
    pub time_wait_entries: u64,
    /// Implied TIME_WAIT gauge at the peak second's entry rate: entries/s × 60 s (Linux keeps
    /// a socket in TIME_WAIT for 60 s, `TCP_TIMEWAIT_LEN`).
    pub time_wait_implied_peak: u64,
    /// Connections per request served (see [`findings`]); missing when no request count
    /// applies.
    pub churn_ratio: Cell,
    /// Highest TIME_WAIT gauge toward the destination (source netns, as `ss` counts).
    pub time_wait_peak: Cell,
    /// Highest ESTABLISHED gauge toward it.
    pub established_peak: Cell,
    /// Median srtt of established connections at the last sample, µs.
    pub srtt_p50_us: Cell,
    /// Upper bound of the log2 bucket holding their 99th percentile srtt, µs.
    pub srtt_p99_le_us: Cell,
    /// Fewest free ephemeral ports toward it.
    pub headroom_min: Cell,
    /// Connect latency, log2-bucket upper bounds in µs.
    pub connect_latency_us: Log2Row,
    /// Connection lifetime, log2-bucket upper bounds in ms.
    pub lifetime_ms: Log2Row,
}

/// Percentiles of a log2 histogram as bucket upper bounds (`u64::MAX`: the open last bucket).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Log2Row {
    /// Samples.
    pub count: u64,
    /// Median is at most this.
    pub p50_le: u64,
    /// 99th percentile is at most this.
    pub p99_le: u64,
    /// Largest is at most this.
    pub max_le: u64,
}

impl From<Log2Summary> for Log2Row {
    fn from(s: Log2Summary) -> Self {
        Self {
            count: s.count,
            p50_le: s.p50_le,
            p99_le: s.p99_le,
            max_le: s.max_le,
        }
    }
}

/// Per pair over the run: peaks of the gauges, the last srtt sample, the fewest free ports.
#[derive(Clone, Default)]
struct GaugePeaks {
    time_wait: u64,
    established: u64,
    srtt_p50: Option<u32>,
    srtt_log2: Log2Hist,
    headroom: Option<u64>,
}

/// The pairs of the run; `requests` is what the driver sent (for the churn ratio).
pub(crate) fn rows(d: &RunData, duration_s: f64, requests: u64) -> Vec<PairRow> {
    let mut pair_acc: BTreeMap<(String, String), (String, PairStats, f64)> = BTreeMap::new();
    let mut pair_gauges: BTreeMap<(String, String), GaugePeaks> = BTreeMap::new();
    for iv in &d.probe {
        for p in &iv.pairs {
            let e = pair_acc
                .entry((p.container.clone(), p.remote.to_string()))
                .or_insert_with(|| (String::new(), PairStats::default(), 0.0));
            if let Some(rc) = &p.remote_container {
                e.0 = rc.clone();
            }
            e.1.add(&p.stats());
            if let Some(g) = &p.gauges {
                let e = pair_gauges
                    .entry((p.container.clone(), p.remote.to_string()))
                    .or_default();
                // This run's TIME_WAIT only: sockets left by an earlier run are its baseline.
                e.time_wait = e.time_wait.max(g.time_wait_run());
                e.established = e.established.max(g.established);
                if g.srtt_p50_us.is_some() {
                    e.srtt_p50 = g.srtt_p50_us;
                    e.srtt_log2 = g.srtt_log2;
                }
                e.headroom = Some(e.headroom.map_or(g.headroom, |h| h.min(g.headroom)));
            }
            e.2 = e.2.max(p.time_wait_entries as f64 / secs(iv));
        }
    }
    // The request path: the driver's target, then every hop whose source is a
    // destination already on the path (a gateway's calls to its backend). Each driver
    // request crosses each hop once, so connections per driver request is their churn.
    let target = d.final_report.as_ref().map(|r| r.target.clone());
    let mut on_path: Vec<String> = Vec::new();
    let mut path_sources: Vec<String> = Vec::new();
    if let Some(t) = &target {
        let port = t.rsplit(':').next().unwrap_or("");
        let names = [
            t.clone(),
            t.replace("localhost:", "127.0.0.1:"),
            format!("[::1]:{port}"),
        ];
        for (c, r) in pair_acc.keys() {
            if names.contains(r) && (r == t || t.starts_with("localhost:") || r == &names[0]) {
                on_path.push(format!("{c}|{r}"));
            }
        }
        // A target that a container serves through a published port (docker-proxy or DNAT in
        // between) or a Docker DNS name: the path starts at the pairs toward that container's
        // own address and port, as the probe recorded them (`ProbeInterval::services`).
        let served: Vec<String> = d
            .probe
            .iter()
            .rev()
            .find(|iv| !iv.services.is_empty())
            .into_iter()
            .flat_map(|iv| &iv.services)
            .filter_map(|svc| Some((svc, svc.serves(t)?)))
            .flat_map(|(svc, port)| {
                svc.addrs
                    .iter()
                    .map(move |a| std::net::SocketAddr::new(*a, port).to_string())
            })
            .collect();
        for (c, r) in pair_acc.keys() {
            let key = format!("{c}|{r}");
            if served.contains(r) && !on_path.contains(&key) {
                on_path.push(key);
            }
        }
        loop {
            let sources: Vec<String> = pair_acc
                .iter()
                .filter(|((c, r), _)| on_path.contains(&format!("{c}|{r}")))
                .map(|(_, (rc, _, _))| rc.clone())
                .filter(|rc| !rc.is_empty() && !path_sources.contains(rc))
                .collect();
            if sources.is_empty() {
                break;
            }
            path_sources.extend(sources);
            for (c, r) in pair_acc.keys() {
                let key = format!("{c}|{r}");
                if path_sources.contains(c) && !on_path.contains(&key) {
                    on_path.push(key);
                }
            }
        }
    }
    pair_acc
        .into_iter()
        .map(|((c, r), (rc, st, tw_peak_rate))| {
            let g = pair_gauges.get(&(c.clone(), r.clone())).cloned();
            let gauge = |v: Option<f64>, what: &str| match (&g, v) {
                (_, Some(v)) => Cell::Value(v),
                (Some(_), None) => Cell::Missing(format!("no {what}")),
                (None, None) => {
                    Cell::Missing("the source's network namespace was not sampled".into())
                }
            };
            PairRow {
                time_wait_peak: gauge(g.as_ref().map(|g| g.time_wait as f64), "TIME_WAIT"),
                established_peak: gauge(g.as_ref().map(|g| g.established as f64), "connections"),
                srtt_p50_us: gauge(
                    g.as_ref().and_then(|g| g.srtt_p50).map(f64::from),
                    "established connection",
                ),
                srtt_p99_le_us: gauge(
                    g.as_ref()
                        .and_then(|g| g.srtt_log2.quantile_le(990))
                        .map(|v| v as f64),
                    "established connection",
                ),
                headroom_min: gauge(
                    g.as_ref().and_then(|g| g.headroom).map(|h| h as f64),
                    "headroom",
                ),
                churn_ratio: if target.is_none() {
                    Cell::Missing("the run did not finish: no driver target recorded".into())
                } else if !on_path.contains(&format!("{c}|{r}")) {
                    Cell::Missing("not on the request path".into())
                } else if requests == 0 {
                    Cell::Missing(NO_REQUESTS.into())
                } else {
                    Cell::Value(st.connects as f64 / requests as f64)
                },
                container: c,
                remote: r,
                remote_container: if rc.is_empty() { "-".into() } else { rc },
                connects: st.connects,
                connects_per_s: st.connects as f64 / duration_s.max(1e-9),
                time_wait_entries: st.time_wait_entries,
                time_wait_implied_peak: (tw_peak_rate * 60.0).round() as u64,
                connect_latency_us: Log2Summary::of(&st.connect_latency_us).into(),
                lifetime_ms: Log2Summary::of(&st.lifetime_ms).into(),
            }
        })
        .collect()
}

pub(crate) const NO_REQUESTS: &str = "no requests recorded by the driver";

/// How many pair rows a report shows by default; the rest are one `other` row.
pub const DEFAULT_PAIR_ROWS: usize = 50;

/// The report's name for the row summing the pairs beyond the limit.
pub const OTHER: &str = "other";

/// Keeps the `limit` most active pairs (connects + TIME_WAIT entries) and every pair on the
/// request path, and sums the rest into one `other` row: a host with thousands of
/// destinations stays readable. The other row's counters and histograms are exact sums over
/// those pairs (re-read from the stored intervals); its gauges and churn ratio are missing,
/// since peaks of different pairs taken at different times do not add up.
pub(crate) fn bound(
    d: &RunData,
    mut rows: Vec<PairRow>,
    limit: usize,
    duration_s: f64,
) -> Vec<PairRow> {
    if rows.len() <= limit {
        return rows;
    }
    // On the request path: the rows `rows` gave a churn ratio, or would have with requests.
    let on_path = |r: &PairRow| match &r.churn_ratio {
        Cell::Value(_) => true,
        Cell::Missing(m) => m == NO_REQUESTS,
    };
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(rows[i].connects + rows[i].time_wait_entries));
    let mut keep = vec![false; rows.len()];
    for &i in order.iter().take(limit) {
        keep[i] = true;
    }
    for (i, r) in rows.iter().enumerate() {
        keep[i] |= on_path(r);
    }
    let rest: std::collections::BTreeSet<(String, String)> = rows
        .iter()
        .zip(&keep)
        .filter(|(_, k)| !**k)
        .map(|(r, _)| (r.container.clone(), r.remote.clone()))
        .collect();
    if rest.is_empty() {
        return rows;
    }
    let mut st = PairStats::default();
    let mut tw_peak_rate = 0.0f64;
    for iv in &d.probe {
        let mut entries = 0;
        for p in &iv.pairs {
            if rest.contains(&(p.container.clone(), p.remote.to_string())) {
                st.add(&p.stats());
                entries += p.time_wait_entries;
            }
        }
        tw_peak_rate = tw_peak_rate.max(entries as f64 / secs(iv));
    }
    let n = rest.len();
    let why = || Cell::Missing(format!("the sum of {n} pairs: peaks do not add up"));
    let other = PairRow {
        container: OTHER.into(),
        remote: format!("{n} more pairs"),
        remote_container: "-".into(),
        connects: st.connects,
        connects_per_s: st.connects as f64 / duration_s.max(1e-9),
        time_wait_entries: st.time_wait_entries,
        time_wait_implied_peak: (tw_peak_rate * 60.0).round() as u64,
        churn_ratio: Cell::Missing("not on the request path".into()),
        time_wait_peak: why(),
        established_peak: why(),
        srtt_p50_us: why(),
        srtt_p99_le_us: why(),
        headroom_min: why(),
        connect_latency_us: Log2Summary::of(&st.connect_latency_us).into(),
        lifetime_ms: Log2Summary::of(&st.lifetime_ms).into(),
    };
    let mut i = 0;
    rows.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    rows.push(other);
    rows
}
