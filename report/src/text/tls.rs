//! What to do about a TLS outcome: a line under a run's tables per TLS outcome it had (the
//! outcome counts say what failed, this says how to get past it).

use herd_model::{Outcome, RunResult, TlsProblem, TransportErrorKind};

/// What to do about a TLS outcome, for a line under a run's tables: the outcome counts say
/// what failed, this says how to get past it.
pub fn hint(problem: TlsProblem) -> &'static str {
    match problem {
        TlsProblem::UnknownCa => {
            "the server's certificate chains to no CA herd trusts (self-signed or a private \
             CA): set target.ca = \"ca.pem\" to trust its CA, or pass --insecure"
        }
        TlsProblem::NameMismatch => {
            "the server's certificate is for another name than the URL's host: use a host \
             it names in target.url, or pass --insecure"
        }
        TlsProblem::Expired => {
            "the server's certificate is out of its validity period (check the clocks), or \
             pass --insecure"
        }
        TlsProblem::Handshake => {
            "the TLS handshake failed (an alert from the server, or the port does not serve \
             TLS: is it an http:// target?)"
        }
    }
}

/// `outcome: hint` for every TLS outcome the run had, in a fixed order.
pub fn hints(report: &RunResult) -> Vec<String> {
    [
        TlsProblem::UnknownCa,
        TlsProblem::NameMismatch,
        TlsProblem::Expired,
        TlsProblem::Handshake,
    ]
    .into_iter()
    .filter_map(|p| {
        let outcome = Outcome::TransportError(TransportErrorKind::Tls(p));
        let seen = report
            .phases
            .iter()
            .flat_map(|s| &s.ops)
            .flat_map(|o| &o.outcomes)
            .any(|o| o.outcome == outcome && o.count > 0);
        seen.then(|| format!("{}: {}", outcome.name(), hint(p)))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use herd_model::{Latency, OpStats, OutcomeStats, PhaseResult};

    use super::*;

    #[test]
    fn a_run_with_an_expired_certificate_gets_that_hint_alone() {
        let outcome = |name: &str, count| OutcomeStats {
            outcome: name.into(),
            count,
            latency: Latency::default(),
            histogram: None,
        };
        let mut report: RunResult = serde_json::from_value(serde_json::json!({
            "scenario": "s.toml", "target": "127.0.0.1:1", "transport": "h1",
            "connections": "per_player", "started_unix_ms": 0, "duration_ms": 1000,
            "stopped_early": false, "requests": 2, "connects": 0, "reconnects": 0,
            "connect_errors": 2, "saturated_intervals": 0, "phases": [], "intervals": []
        }))
        .unwrap();
        let mut phase: PhaseResult = serde_json::from_value(serde_json::json!({
            "phase": "step 1", "index": 0, "players": 1, "start_ms": 0, "duration_ms": 1000,
            "ops": [], "connects": 0, "reconnects": 0, "connect_errors": 2
        }))
        .unwrap();
        phase.ops.push(OpStats {
            op: "a".into(),
            count: 2,
            rate: 2.0,
            latency: Latency::default(),
            outcomes: vec![
                outcome("transport_error.tls_expired", 2),
                outcome("transport_error.tls_unknown_ca", 0),
            ],
        });
        report.phases.push(phase);
        let hints = hints(&report);
        assert_eq!(hints.len(), 1, "{hints:?}");
        assert!(
            hints[0].starts_with("transport_error.tls_expired: "),
            "{hints:?}"
        );
        assert!(hints[0].contains("--insecure"), "{hints:?}");
    }
}
