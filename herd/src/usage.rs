//! What herd says about a command line it cannot parse: clap's message, with a "similar
//! argument" tip only when the typed word is a real near-miss of one herd has.
//!
//! clap suggests by Jaro similarity, which calls `--steps` close to `--set` (they share `s`,
//! `e`, `t`): a user who meant the demo's `--steps` on `herd run` is sent to an option that
//! does something else. herd keeps a suggestion only within a small edit distance.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory as _, Parser as _};

use crate::Cli;

/// Parses the process's arguments; on an error prints it (with a tip only for a near-miss)
/// and exits 2, on `--help`/`--version` prints them and exits 0.
pub fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => tighten(e).exit(),
    }
}

/// `e` without the suggestions that are not near-misses of the word typed.
pub fn tighten(e: clap::Error) -> clap::Error {
    let suggestion = match e.kind() {
        ErrorKind::UnknownArgument => ContextKind::SuggestedArg,
        ErrorKind::InvalidSubcommand => ContextKind::SuggestedSubcommand,
        _ => return e,
    };
    let typed = match e
        .get(ContextKind::InvalidArg)
        .or(e.get(ContextKind::InvalidSubcommand))
    {
        Some(ContextValue::String(s)) => s.clone(),
        _ => return e,
    };
    let keep = match e.get(suggestion) {
        None => return e,
        Some(ContextValue::String(s)) => near_miss(&typed, s),
        Some(ContextValue::Strings(v)) => v.iter().any(|s| near_miss(&typed, s)),
        Some(_) => true,
    };
    if keep {
        return e;
    }
    let mut cli = Cli::command();
    cli.build();
    let mut out = clap::Error::new(e.kind()).with_cmd(&cli);
    for (kind, value) in e.context() {
        if kind == ContextKind::Usage {
            // clap's usage line names the suggested option; show the command's own.
            let usage = match value {
                ContextValue::StyledStr(s) => subcommand_usage(&cli, &s.to_string()),
                _ => None,
            };
            out.insert(kind, usage.unwrap_or_else(|| value.clone()));
        } else if kind != suggestion && kind != ContextKind::Suggested {
            out.insert(kind, value.clone());
        }
    }
    out
}

/// The usage of the subcommand a clap usage line (`Usage: herd run --set …`) is about.
fn subcommand_usage(cli: &clap::Command, usage: &str) -> Option<ContextValue> {
    let name = usage
        .split_whitespace()
        .skip_while(|w| *w != "herd")
        .nth(1)?;
    let sub = cli.find_subcommand(name)?;
    Some(ContextValue::StyledStr(sub.clone().render_usage()))
}

/// Whether `suggested` is what a user typing `typed` most likely meant: within one edit
/// (insert, delete, substitute or swap two neighbours) for words of up to 5 letters, two
/// for longer ones. Leading dashes and any `=value` are not part of the word.
pub fn near_miss(typed: &str, suggested: &str) -> bool {
    let word = |s: &str| {
        s.split('=')
            .next()
            .unwrap_or(s)
            .trim_start_matches('-')
            .to_ascii_lowercase()
    };
    let (a, b) = (word(typed), word(suggested));
    let limit = if a.chars().count().min(b.chars().count()) <= 5 {
        1
    } else {
        2
    };
    edit_distance(&a, &b) <= limit
}

/// Optimal-string-alignment distance: Levenshtein plus adjacent swaps (`--intreval`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_are_typos_and_not_words_that_share_letters() {
        assert!(near_miss("--intreval", "--interval"));
        assert!(near_miss("--duratoin=5s", "--duration"));
        assert!(near_miss("--no-prob", "--no-probe"));
        assert!(near_miss("--sett", "--set"));
        assert!(near_miss("reprot", "report"));
        assert!(!near_miss("--steps", "--set"));
        assert!(!near_miss("--verbose", "--version"));
        assert!(!near_miss("--threads", "--grace"));
    }

    fn parse_error(args: &[&str]) -> String {
        let e = Cli::try_parse_from(args).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{args:?}");
        tighten(e).render().to_string()
    }

    #[test]
    fn a_far_word_gets_no_tip_and_a_typo_keeps_clap_s() {
        let steps = parse_error(&["herd", "run", "s.toml", "--steps", "10"]);
        assert!(steps.contains("unexpected argument '--steps'"), "{steps}");
        assert!(!steps.contains("--set"), "{steps}");
        assert!(steps.contains("Usage: herd run"), "{steps}");
        let typo = parse_error(&["herd", "probe", "--duratoin", "5s"]);
        assert!(
            typo.contains("similar argument exists: '--duration'"),
            "{typo}"
        );
        let sub = parse_error(&["herd", "reprot"]);
        assert!(sub.contains("'report'"), "{sub}");
    }
}
