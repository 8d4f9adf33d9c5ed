//! `then` and `for_each`: an op that runs after another one in the same turn, once, or once
//! per item of the other's response (`for_each = "/layers/*/digest"`, binding `{item}`).
//! Seed 004's validation (list a repository's tags, fetch each tag's manifest, check its
//! config and every layer by digest) is three such links, so a file can say it without a
//! Rust player.

use super::{Invalid, Op, Seg, at, key};
use crate::template::VarNames;

/// Items taken from one response when the file sets no `max_items`: enough for an image's
/// layers or a page of tags, small enough that one turn stays one turn.
pub(super) const DEFAULT_MAX_ITEMS: usize = 100;

/// Iterates an op over the items a pointer with `*` selects in the previous op's response.
#[derive(Debug, Clone)]
pub struct ForEach {
    /// The pointer as written, e.g. `/layers/*/digest`.
    pub pointer: String,
    /// Its tokens, unescaped; `None` is a `*`.
    tokens: Vec<Option<String>>,
    /// Items used at most; more are cut off and counted as the outcome `truncated`.
    pub max_items: usize,
    /// Pick this many items at random instead of all of them (a random repository).
    pub sample: Option<usize>,
    /// The variable slot of `{item}`.
    pub item: usize,
}

impl ForEach {
    /// The items the pointer selects in `json`: strings as they are, numbers and booleans as
    /// written, anything else as JSON text.
    pub fn items(&self, json: &serde_json::Value) -> Vec<String> {
        let mut at = vec![json];
        for t in &self.tokens {
            at = at
                .into_iter()
                .flat_map(|v| -> Vec<&serde_json::Value> {
                    match (t, v) {
                        (None, serde_json::Value::Array(a)) => a.iter().collect(),
                        (None, serde_json::Value::Object(o)) => o.values().collect(),
                        (Some(k), serde_json::Value::Object(o)) => o.get(k).into_iter().collect(),
                        (Some(k), serde_json::Value::Array(a)) => k
                            .parse::<usize>()
                            .ok()
                            .and_then(|i| a.get(i))
                            .into_iter()
                            .collect(),
                        _ => Vec::new(),
                    }
                })
                .collect();
        }
        at.into_iter()
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect()
    }
}

/// One link of a chain: after its op ends `ok`, `op` runs (once per item with `for_each`).
#[derive(Debug, Clone)]
pub struct Then {
    /// The op that follows, an index into the scenario's ops.
    pub op: usize,
    /// Copied from that op: over which items of this op's response it runs.
    pub for_each: Option<ForEach>,
}

/// Parses an op's `for_each`, `max_items` and `sample`.
pub(super) fn compile_for_each(
    i: usize,
    pointer: Option<&str>,
    max_items: Option<usize>,
    sample: Option<usize>,
    names: &mut VarNames,
) -> Result<Option<ForEach>, Invalid> {
    let here = |k: &str| vec![key("op"), Seg::Index(i), key(k)];
    let Some(p) = pointer else {
        for (v, k) in [(max_items, "max_items"), (sample, "sample")] {
            if v.is_some() {
                return Err(at(&here(k), "only an op with a for_each takes items"));
            }
        }
        return Ok(None);
    };
    if !p.starts_with('/') {
        return Err(at(
            &here("for_each"),
            format!("`{p}` is not a JSON pointer: write `/{p}` (e.g. `/layers/*/digest`)"),
        ));
    }
    let tokens: Vec<Option<String>> = p[1..]
        .split('/')
        .map(|t| (t != "*").then(|| t.replace("~1", "/").replace("~0", "~")))
        .collect();
    if tokens.iter().all(Option::is_some) {
        return Err(at(
            &here("for_each"),
            format!("`{p}` names one value; put a `*` where the list is, e.g. `/layers/*/digest`"),
        ));
    }
    for (v, k) in [(max_items, "max_items"), (sample, "sample")] {
        if v == Some(0) {
            return Err(at(&here(k), "must be at least 1"));
        }
    }
    Ok(Some(ForEach {
        pointer: p.to_owned(),
        tokens,
        max_items: max_items.unwrap_or(DEFAULT_MAX_ITEMS),
        sample,
        item: names.intern("item"),
    }))
}

/// Resolves every op's `then` names, and checks the chains: each names a request op, none
/// loops back on itself, and every `for_each` op follows some op (it iterates that op's
/// response). An op a `then` names runs in its chain, so without a `weight` of its own
/// (`weighted[i]`) it stays out of the players' loop.
pub(super) fn resolve(
    ops: &mut [Op],
    then_names: Vec<Vec<String>>,
    weighted: &[bool],
) -> Result<(), Invalid> {
    let mut followed = vec![false; ops.len()];
    for (i, names) in then_names.into_iter().enumerate() {
        let mut then = Vec::new();
        for (k, name) in names.iter().enumerate() {
            let path = [key("op"), Seg::Index(i), key("then"), Seg::Index(k)];
            let o = super::find_op(ops, name, &path)?;
            if ops[o].kind.is_background() {
                return Err(at(
                    &path,
                    format!(
                        "`{name}` is a {} op, which every player keeps open by itself; then names request ops",
                        ops[o].kind.name()
                    ),
                ));
            }
            followed[o] = true;
            then.push(Then {
                op: o,
                for_each: ops[o].for_each.clone(),
            });
        }
        ops[i].then = then;
    }
    for (i, op) in ops.iter_mut().enumerate() {
        if followed[i] && !weighted[i] {
            op.weight = 0;
        }
        if op.for_each.is_some() && !followed[i] {
            return Err(at(
                &[key("op"), Seg::Index(i), key("for_each")],
                format!(
                    "`{}` iterates the response of the op before it, but no op names it in `then`; add then = [\"{}\"] to the op whose response lists the items",
                    op.name, op.name
                ),
            ));
        }
    }
    // A chain that comes back to an op would run for ever within one turn.
    fn visit(ops: &[Op], i: usize, state: &mut [u8]) -> Option<usize> {
        match state[i] {
            1 => return Some(i),
            2 => return None,
            _ => {}
        }
        state[i] = 1;
        for t in &ops[i].then {
            if let Some(c) = visit(ops, t.op, state) {
                return Some(c);
            }
        }
        state[i] = 2;
        None
    }
    let mut state = vec![0u8; ops.len()];
    for i in 0..ops.len() {
        if let Some(c) = visit(ops, i, &mut state) {
            return Err(at(
                &[key("op"), Seg::Index(c), key("then")],
                format!(
                    "`{}` comes back to itself through `then`; a chain must end",
                    ops[c].name
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that every op a chain runs after op `i` has its variables: what `known` holds,
/// what the ops before it in the chain capture, and `{item}` under a `for_each`.
pub(super) fn check_reads(
    ops: &[Op],
    i: usize,
    known: &[bool],
    names: &VarNames,
) -> Result<(), Invalid> {
    let mut known = known.to_vec();
    for (s, _) in &ops[i].captures {
        known[*s] = true;
    }
    for t in &ops[i].then {
        let mut k = known.clone();
        if let Some(f) = &t.for_each {
            k[f.item] = true;
        }
        if let Some(s) = super::reads(&ops[t.op]).into_iter().find(|s| !k[*s]) {
            return Err(at(
                &[key("op"), Seg::Index(t.op)],
                format!(
                    "op `{}` runs after `{}` (its then) but reads `{{{}}}`, which nothing before it in the chain captures; capture it in an earlier op, or give it a default in [vars]",
                    ops[t.op].name,
                    ops[i].name,
                    names.name(s)
                ),
            ));
        }
        check_reads(ops, t.op, &k, names)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn each(p: &str) -> ForEach {
        let mut names = VarNames::default();
        match compile_for_each(0, Some(p), None, None, &mut names) {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => panic!("`{p}` is a for_each pointer"),
        }
    }

    #[test]
    fn a_star_selects_every_element_and_a_miss_selects_nothing() {
        let j: serde_json::Value = serde_json::from_str(
            r#"{"layers":[{"digest":"sha256:a","size":1},{"digest":"sha256:b"},{"size":3}],"tags":["v1",2,true],"a/b":{"x":[{"y":1}]}}"#,
        )
        .unwrap();
        assert_eq!(each("/layers/*/digest").items(&j), ["sha256:a", "sha256:b"]);
        assert_eq!(each("/tags/*").items(&j), ["v1", "2", "true"]);
        assert_eq!(each("/a~1b/x/*/y").items(&j), ["1"]);
        assert!(each("/nothing/*").items(&j).is_empty());
        assert!(each("/layers/*/digest/*").items(&j).is_empty());
        assert_eq!(each("/layers/1/*").items(&j), ["sha256:b"]);
    }
}
