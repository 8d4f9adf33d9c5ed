//! Checks of one value that every section's compiler shares.

use std::time::Duration;

pub(super) use herd_seed::spec::is_ident;

use super::{Dur, Invalid, Seg, at};

pub(super) fn positive(
    d: Option<Dur>,
    default: Duration,
    path: &[Seg],
) -> Result<Duration, Invalid> {
    match d {
        None => Ok(default),
        Some(Dur(d)) if d.is_zero() => Err(at(path, "must be longer than 0")),
        Some(Dur(d)) => Ok(d),
    }
}

pub(super) fn pointer(p: &str, path: &[Seg]) -> Result<String, Invalid> {
    if p.is_empty() || p.starts_with('/') {
        Ok(p.to_owned())
    } else {
        Err(at(
            path,
            format!("`{p}` is not a JSON pointer: write `/{p}` (RFC 6901, e.g. `/error/code`)"),
        ))
    }
}
