//! Checks of one value that every section's compiler shares.

use std::time::Duration;

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

pub(super) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}
