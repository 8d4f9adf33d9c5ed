//! `--set KEY=VALUE`: A/B toggles applied to the parsed TOML document before it is
//! deserialized, so an overridden value is checked exactly like one written in the file.
//!
//! KEY is a dotted path; an array of tables is indexed by position (`step[1].players`) or,
//! for tables with a `name`, by name (`op[game.state].weight`). VALUE is a TOML value
//! (`5`, `true`, `"5"`, `[1, 2]`); anything that does not parse as one is a string, so
//! `--set target.transport=h2c` needs no quotes.

use std::{borrow::Cow, ops::Range};

use toml::{
    Spanned,
    de::{DeArray, DeTable, DeValue},
};

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A table key.
    Key(String),
    /// An array element by position.
    Index(usize),
    /// An array-of-tables element by its `name` key.
    Name(String),
}

/// Renders a path the way errors and `--set` spell it.
pub(crate) fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
            Seg::Name(n) => s.push_str(&format!("[{n}]")),
        }
    }
    s
}

/// Splits `KEY=VALUE` and parses KEY.
pub(crate) fn parse_arg(arg: &str) -> Result<(Vec<Seg>, &str), String> {
    let (key, value) = arg
        .split_once('=')
        .ok_or("expected KEY=VALUE, e.g. target.transport=h2c or step[1].players=500")?;
    Ok((parse_path(key.trim())?, value.trim()))
}

fn parse_path(key: &str) -> Result<Vec<Seg>, String> {
    let mut path = Vec::new();
    let mut rest = key;
    if rest.is_empty() {
        return Err("the key is empty".into());
    }
    loop {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() {
            return Err(format!("empty key segment in `{key}`"));
        }
        path.push(Seg::Key(name.to_owned()));
        rest = &rest[end..];
        while let Some(inner) = rest.strip_prefix('[') {
            let close = inner
                .find(']')
                .ok_or_else(|| format!("`[` without `]` in `{key}`"))?;
            let sel = inner[..close].trim();
            if sel.is_empty() {
                return Err(format!("empty `[]` in `{key}`"));
            }
            path.push(match sel.parse::<usize>() {
                Ok(i) => Seg::Index(i),
                Err(_) => Seg::Name(sel.trim_matches('"').to_owned()),
            });
            rest = &inner[close + 1..];
        }
        if rest.is_empty() {
            break;
        }
        rest = rest
            .strip_prefix('.')
            .ok_or_else(|| format!("expected `.` or `[` after `]` in `{key}`"))?;
    }
    if !matches!(path.last(), Some(Seg::Key(_))) {
        return Err(format!("`{key}` must end in a key, e.g. `{key}.players`"));
    }
    Ok(path)
}

/// Parses VALUE as TOML, falling back to a plain string, with every span set to `span`.
pub(crate) fn parse_value(value: &str, span: Range<usize>) -> Spanned<DeValue<'_>> {
    let v = match DeValue::parse(value) {
        Ok(v) => v.into_inner(),
        Err(_) => DeValue::String(Cow::Borrowed(value)),
    };
    respan(v, &span)
}

fn respan<'a>(v: DeValue<'a>, span: &Range<usize>) -> Spanned<DeValue<'a>> {
    let v = match v {
        DeValue::Array(a) => DeValue::Array(
            a.into_iter()
                .map(|e| respan(e.into_inner(), span))
                .collect::<DeArray<'a>>(),
        ),
        DeValue::Table(t) => {
            let mut out = DeTable::new();
            for (k, e) in t {
                out.insert(
                    Spanned::new(span.clone(), k.into_inner()),
                    respan(e.into_inner(), span),
                );
            }
            DeValue::Table(out)
        }
        other => other,
    };
    Spanned::new(span.clone(), v)
}

/// Sets `path` in `root` to `value`, creating missing tables; `span` marks what it creates.
pub(crate) fn apply<'a>(
    root: &mut DeTable<'a>,
    path: &[Seg],
    value: Spanned<DeValue<'a>>,
    span: &Range<usize>,
) -> Result<(), String> {
    let mut table = root;
    let mut i = 0;
    let mut walked: Vec<Seg> = Vec::new();
    while i + 1 < path.len() {
        let Seg::Key(k) = &path[i] else {
            unreachable!("parse_path puts a key before every selector");
        };
        walked.push(path[i].clone());
        let selector = match path.get(i + 1) {
            Some(s @ (Seg::Index(_) | Seg::Name(_))) => Some(s.clone()),
            _ => None,
        };
        if !table.contains_key(k.as_str()) {
            if selector.is_some() {
                return Err(format!("`{}` is not in the file", path_string(&walked)));
            }
            table.insert(
                Spanned::new(span.clone(), Cow::Owned(k.clone())),
                Spanned::new(span.clone(), DeValue::Table(DeTable::new())),
            );
        }
        let entry = table.get_mut(k.as_str()).expect("inserted above").get_mut();
        table = match (selector, entry) {
            (None, DeValue::Table(t)) => {
                i += 1;
                t
            }
            (Some(sel), DeValue::Array(items)) => {
                let n = items.len();
                let found = match &sel {
                    Seg::Index(ix) => items.get_mut(*ix).ok_or_else(|| {
                        format!("`{}` has {n} entries, indexed from 0", path_string(&walked))
                    })?,
                    Seg::Name(name) => {
                        let names: Vec<String> = items
                            .iter()
                            .filter_map(|e| {
                                e.get_ref()
                                    .get("name")
                                    .and_then(|v| v.get_ref().as_str())
                                    .map(str::to_owned)
                            })
                            .collect();
                        let pos = names.iter().position(|x| x == name).ok_or_else(|| {
                            format!(
                                "no `{}` named `{name}`; names are: {}",
                                path_string(&walked),
                                names.join(", ")
                            )
                        })?;
                        &mut items.as_mut()[pos]
                    }
                    Seg::Key(_) => unreachable!("selector is an index or a name"),
                };
                walked.push(sel);
                i += 2;
                match found.get_mut() {
                    DeValue::Table(t) => t,
                    _ => return Err(format!("`{}` is not a table", path_string(&walked))),
                }
            }
            (None, other) => {
                return Err(format!(
                    "`{}` is a {}, not a table",
                    path_string(&walked),
                    other.type_str()
                ));
            }
            (Some(_), other) => {
                return Err(format!(
                    "`{}` is a {}, not an array",
                    path_string(&walked),
                    other.type_str()
                ));
            }
        };
    }
    let Some(Seg::Key(last)) = path.get(i) else {
        return Err("the key must end in a name".into());
    };
    if let Some(existing) = table.get_mut(last.as_str()) {
        *existing = value;
    } else {
        table.insert(Spanned::new(span.clone(), Cow::Owned(last.clone())), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("op[game.state].weight").unwrap(),
            vec![
                Seg::Key("op".into()),
                Seg::Name("game.state".into()),
                Seg::Key("weight".into())
            ]
        );
        assert_eq!(
            parse_path("step[1].players").unwrap(),
            vec![
                Seg::Key("step".into()),
                Seg::Index(1),
                Seg::Key("players".into())
            ]
        );
        assert!(parse_path("step[1]").is_err());
        assert!(parse_path("a..b").is_err());
        assert!(parse_arg("novalue").is_err());
    }

    #[test]
    fn values_fall_back_to_strings() {
        assert_eq!(
            parse_value("5", 0..1)
                .get_ref()
                .as_integer()
                .map(|i| i.as_str().to_owned()),
            Some("5".into())
        );
        assert_eq!(parse_value("h2c", 0..1).get_ref().as_str(), Some("h2c"));
        assert_eq!(parse_value("\"5\"", 0..1).get_ref().as_str(), Some("5"));
        assert_eq!(parse_value("true", 0..1).get_ref().as_bool(), Some(true));
    }

    #[test]
    fn sets_into_tables_and_named_array_entries() {
        let src =
            "[target]\nurl = \"u\"\n[[op]]\nname = \"a.b\"\nweight = 1\n[[op]]\nname = \"c\"\n";
        let mut doc = DeTable::parse(src).unwrap().into_inner();
        let span = 100..101;
        apply(
            &mut doc,
            &parse_path("op[a.b].weight").unwrap(),
            parse_value("7", span.clone()),
            &span,
        )
        .unwrap();
        apply(
            &mut doc,
            &parse_path("op[1].weight").unwrap(),
            parse_value("0", span.clone()),
            &span,
        )
        .unwrap();
        apply(
            &mut doc,
            &parse_path("player.think").unwrap(),
            parse_value("1s", span.clone()),
            &span,
        )
        .unwrap();
        let ops = doc.get("op").unwrap().get_ref().as_array().unwrap();
        assert_eq!(
            ops[0]
                .get_ref()
                .get("weight")
                .unwrap()
                .get_ref()
                .as_integer()
                .unwrap()
                .as_str(),
            "7"
        );
        assert_eq!(ops[1].get_ref().get("weight").unwrap().span(), span);
        let think = doc.get("player").unwrap().get_ref().get("think").unwrap();
        assert_eq!(think.get_ref().as_str(), Some("1s"));
        let e = apply(
            &mut doc,
            &parse_path("op[zz].weight").unwrap(),
            parse_value("1", span.clone()),
            &span,
        )
        .unwrap_err();
        assert_eq!(e, "no `op` named `zz`; names are: a.b, c");
        let e = apply(
            &mut doc,
            &parse_path("step[0].players").unwrap(),
            parse_value("1", span.clone()),
            &span,
        )
        .unwrap_err();
        assert_eq!(e, "`step` is not in the file");
    }
}
