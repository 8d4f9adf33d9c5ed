//! `grpc-timeout`: the deadline a call carries to the server, as at most 8 digits and a unit
//! (`H`, `M`, `S`, `m`, `u`, `n`; PROTOCOL-HTTP2.md, "Timeout"). The server cancels the call
//! when it passes; the client ends it as `deadline_exceeded` on its own clock too.

use std::time::Duration;

/// The largest value the header carries: 8 digits.
const MAX_VALUE: u128 = 99_999_999;

/// `timeout` as a `grpc-timeout` value: the finest unit whose value fits in 8 digits,
/// rounded up so the server never sees a shorter deadline than the client keeps (grpc-go's
/// rule). Zero is `0n`, which the server takes as already expired.
pub fn encode(timeout: Duration) -> String {
    let nanos = timeout.as_nanos();
    if nanos == 0 {
        return "0n".to_owned();
    }
    const UNITS: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (per, unit) in UNITS {
        let value = nanos.div_ceil(per);
        if value <= MAX_VALUE {
            return format!("{value}{unit}");
        }
    }
    // Past 99 999 999 hours (11 000 years): the most the header says.
    format!("{MAX_VALUE}H")
}

/// A `grpc-timeout` value read back; `None` if it is not 1–8 digits and a unit.
pub fn decode(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finest_unit_that_fits_in_eight_digits() {
        assert_eq!(encode(Duration::ZERO), "0n");
        assert_eq!(encode(Duration::from_nanos(1)), "1n");
        assert_eq!(encode(Duration::from_millis(50)), "50000000n");
        assert_eq!(encode(Duration::from_millis(100)), "100000u");
        assert_eq!(encode(Duration::from_secs(5)), "5000000u");
        assert_eq!(encode(Duration::from_secs(100)), "100000m");
        assert_eq!(encode(Duration::from_secs(100_000)), "100000S");
        assert_eq!(encode(Duration::from_secs(1_000_000_000)), "16666667M");
        assert_eq!(encode(Duration::from_secs(6_000_000_000)), "1666667H");
        assert_eq!(encode(Duration::MAX), "99999999H");
    }

    #[test]
    fn rounds_up_never_down() {
        // 100 000 000 ns + 1 does not fit in ns; in µs it is 100 000.001, sent as 100 001.
        let t = Duration::from_nanos(100_000_001);
        assert_eq!(encode(t), "100001u");
        assert!(decode(&encode(t)).unwrap() >= t);
    }

    #[test]
    fn every_encoding_is_at_most_eight_digits_and_decodes_to_at_least_the_timeout() {
        let mut t = 1u64;
        while t < u64::MAX / 3 {
            let d = Duration::from_nanos(t);
            let e = encode(d);
            assert!(e.len() <= 9, "{e}");
            assert!(decode(&e).unwrap() >= d, "{e} for {d:?}");
            t = t * 3 + 1;
        }
    }

    #[test]
    fn decode_refuses_what_is_not_a_timeout() {
        for bad in ["", "S", "123456789S", "1s", "-1S", "1.5S", "10x"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        assert_eq!(decode("2M"), Some(Duration::from_secs(120)));
    }
}
