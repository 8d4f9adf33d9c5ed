//! The gateway's per-session token bucket: what the seeds' hammer proved. Bounded: at most
//! `max_keys` buckets are tracked, and a bucket that has refilled is the same as no bucket,
//! so those are the ones evicted.

use std::{
    collections::HashMap,
    str::FromStr,
    sync::Mutex,
    time::{Duration, Instant},
};

/// A rate written `R/s` or `R/m` (R may be fractional), or `off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens per second; 0 means no limit.
    pub per_sec: f64,
}

impl Rate {
    /// No limit.
    pub const OFF: Rate = Rate { per_sec: 0.0 };

    /// True if the rate limits anything.
    pub fn is_on(self) -> bool {
        self.per_sec > 0.0
    }
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rate, String> {
        let t = s.trim();
        if t == "off" || t == "0" {
            return Ok(Rate::OFF);
        }
        let usage = || format!("`{s}` is not a rate (write e.g. 20/s, 600/m or off)");
        let (n, unit) = t.split_once('/').ok_or_else(usage)?;
        let n: f64 = n.trim().parse().map_err(|_| usage())?;
        let per_sec = match unit.trim() {
            "s" => n,
            "m" => n / 60.0,
            _ => return Err(usage()),
        };
        if !per_sec.is_finite() || per_sec < 0.0 {
            return Err(usage());
        }
        Ok(Rate { per_sec })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_on() {
            write!(f, "{}/s", self.per_sec)
        } else {
            f.write_str("off")
        }
    }
}

/// A limiter's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Go ahead.
    Allow,
    /// Refused; a token is back after this long.
    Deny {
        /// Until the next token.
        retry_after: Duration,
    },
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets keyed by a string (the gateway uses the session token).
#[derive(Debug)]
pub struct Limiter {
    rate: f64,
    burst: f64,
    max_keys: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    buckets: HashMap<String, Bucket>,
    last_sweep: Option<Instant>,
}

impl Limiter {
    /// `rate` tokens per second, `burst` at most (at least 1), tracking at most `max_keys`.
    pub fn new(rate: Rate, burst: u32, max_keys: usize) -> Limiter {
        Limiter {
            rate: rate.per_sec,
            burst: f64::from(burst.max(1)),
            max_keys: max_keys.max(1),
            state: Mutex::new(State {
                buckets: HashMap::new(),
                last_sweep: None,
            }),
        }
    }

    /// Takes a token from `key`'s bucket at `now`.
    pub fn check(&self, key: &str, now: Instant) -> Verdict {
        if self.rate <= 0.0 {
            return Verdict::Allow;
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !st.buckets.contains_key(key) && st.buckets.len() >= self.max_keys {
            self.sweep(&mut st, now);
            if st.buckets.len() >= self.max_keys {
                // Every tracked key is still draining: refusing the newcomer keeps memory
                // bounded; it retries once the sweep may have freed a slot.
                return Verdict::Deny {
                    retry_after: Duration::from_secs(1),
                };
            }
        }
        let burst = self.burst;
        let rate = self.rate;
        let b = st.buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Verdict::Allow
        } else {
            let wait = (1.0 - b.tokens) / rate;
            Verdict::Deny {
                retry_after: Duration::from_secs_f64(wait),
            }
        }
    }

    /// Drops buckets that have refilled (indistinguishable from a new one), at most once a
    /// second so a flood of new keys at the cap does not rescan the map on every call.
    fn sweep(&self, st: &mut State, now: Instant) {
        if st
            .last_sweep
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        st.last_sweep = Some(now);
        let (rate, burst) = (self.rate, self.burst);
        st.buckets.retain(|_, b| {
            b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst
        });
    }

    /// Buckets tracked now.
    pub fn keys(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .buckets
            .len()
    }
}

/// `Retry-After` in whole seconds, rounded up and at least 1 (the header has no fractions,
/// and 0 would invite an immediate retry that is refused again).
pub fn retry_after_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("20/s".parse::<Rate>().unwrap().per_sec, 20.0);
        assert_eq!("120/m".parse::<Rate>().unwrap().per_sec, 2.0);
        assert_eq!("0.5/s".parse::<Rate>().unwrap().per_sec, 0.5);
        assert!(!"off".parse::<Rate>().unwrap().is_on());
        assert!("20".parse::<Rate>().is_err());
        assert!("20/h".parse::<Rate>().is_err());
        assert!("-1/s".parse::<Rate>().is_err());
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_the_rate() {
        let l = Limiter::new(Rate { per_sec: 2.0 }, 3, 10);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check("a", t0), Verdict::Allow);
        }
        let Verdict::Deny { retry_after } = l.check("a", t0) else {
            panic!("the fourth call within the burst must be refused");
        };
        assert_eq!(retry_after, Duration::from_millis(500));
        // Another key has its own bucket.
        assert_eq!(l.check("b", t0), Verdict::Allow);
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(l.check("a", t1), Verdict::Allow);
        assert!(matches!(l.check("a", t1), Verdict::Deny { .. }));
    }

    #[test]
    fn the_key_count_is_bounded_and_refilled_buckets_are_evicted() {
        let l = Limiter::new(Rate { per_sec: 1.0 }, 1, 2);
        let t0 = Instant::now();
        assert_eq!(l.check("a", t0), Verdict::Allow);
        assert_eq!(l.check("b", t0), Verdict::Allow);
        // Both still draining: a third key is refused rather than tracked.
        assert!(matches!(l.check("c", t0), Verdict::Deny { .. }));
        assert_eq!(l.keys(), 2);
        // Two seconds on, both refilled: the sweep frees their slots.
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(l.check("c", t1), Verdict::Allow);
        assert_eq!(l.keys(), 1);
    }

    #[test]
    fn off_allows_everything() {
        let l = Limiter::new(Rate::OFF, 1, 1);
        let t0 = Instant::now();
        for i in 0..100 {
            assert_eq!(l.check(&i.to_string(), t0), Verdict::Allow);
        }
        assert_eq!(l.keys(), 0);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
