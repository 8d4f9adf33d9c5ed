//! Scenario errors that point at the file, line, column and key, or at the `--set` that
//! caused them.

use std::{fmt, ops::Range, path::PathBuf};

use super::overrides::Seg;

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read. (What the OS said is part of this message, not a cause
    /// of its own, so a printed chain does not say it twice.)
    #[error("reading scenario {path}: {error}")]
    Read {
        /// The scenario file.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// The file is larger than [`super::MAX_FILE_BYTES`]: refused before it is read.
    #[error(
        "{path}: the scenario is {bytes} bytes; herd reads scenarios up to {max} bytes (1 MiB): \
         checking one costs about 50 KB of memory per [[op]], so a generated list this long \
         would take gigabytes; use fewer ops with weights, or vars"
    )]
    TooLarge {
        /// The scenario file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// The file is not UTF-8: where the first byte that starts no UTF-8 character is.
    #[error(
        "{path}:{line}:{column}: the scenario is not UTF-8: byte 0x{byte:02X} at byte offset \
         {offset} starts no UTF-8 character; save the file as UTF-8 (e.g. `iconv -f latin1 -t \
         utf-8 FILE`)"
    )]
    NotUtf8 {
        /// The scenario file.
        path: PathBuf,
        /// 1-based line of the byte.
        line: usize,
        /// 1-based column (in characters) of the byte.
        column: usize,
        /// Its offset from the start of the file.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// A `--set KEY=VALUE` argument is malformed or names nothing in the file.
    #[error("--set {arg}: {reason}")]
    Override {
        /// The argument as given.
        arg: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file (or a `--set` value) is not a valid scenario.
    #[error("{0}")]
    Invalid(Box<Diagnostic>),
}

impl ScenarioError {
    /// The diagnostic, for an invalid scenario.
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            Self::Invalid(d) => Some(d),
            _ => None,
        }
    }
}

/// Where a scenario problem is and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The scenario file as the user named it.
    pub file: String,
    /// 1-based line in the file (0 when the problem came from a `--set`).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The dotted key path, e.g. `target.transport` or `op[2].capture.game_id`.
    pub key: String,
    /// What is wrong, with the valid keys or values where there is a fixed set.
    pub message: String,
    /// The `--set` argument the problem came from, if any.
    pub from_override: Option<String>,
    snippet: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_empty() || self.key == "." {
            String::new()
        } else {
            format!("{}: ", self.key)
        };
        match &self.from_override {
            Some(arg) => write!(f, "{}: --set {arg}: {key}{}", self.file, self.message),
            None => {
                write!(
                    f,
                    "{}:{}:{}: {key}{}",
                    self.file, self.line, self.column, self.message
                )?;
                if !self.snippet.is_empty() {
                    write!(f, "\n{}", self.snippet)?;
                }
                Ok(())
            }
        }
    }
}

impl Diagnostic {
    /// The same diagnostic without the quoted source line, for a line that may hold a secret.
    pub(crate) fn without_snippet(mut self) -> Self {
        self.snippet.clear();
        self
    }
}

/// Maps byte spans to lines and columns of one source, and spans past its end to the
/// `--set` arguments that introduced them.
pub(crate) struct Locator<'a> {
    pub file: &'a str,
    pub source: &'a str,
    pub overrides: &'a [String],
}

impl Locator<'_> {
    /// The span given to everything the `n`th override put into the document: one byte each,
    /// past the end of the source, so any span tells which `--set` it came from.
    pub fn override_span(source_len: usize, n: usize) -> Range<usize> {
        let at = source_len + 1 + n;
        at..at + 1
    }

    pub fn diagnostic(
        &self,
        span: Option<Range<usize>>,
        key: String,
        message: String,
    ) -> Diagnostic {
        let len = self.source.len();
        if let Some(s) = &span
            && s.start > len
        {
            let n = s.start - len - 1;
            return Diagnostic {
                file: self.file.to_owned(),
                line: 0,
                column: 0,
                key,
                message,
                from_override: self.overrides.get(n).map(|a| super::userinfo::hide(a)),
                snippet: String::new(),
            };
        }
        let span = span.unwrap_or(0..0);
        let start = span.start.min(len);
        let line_start = self.source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line = self.source[..start].matches('\n').count() + 1;
        let column = self.source[line_start..start].chars().count() + 1;
        let line_end = self.source[start..].find('\n').map_or(len, |i| start + i);
        let text = self.source[line_start..line_end].trim_end_matches('\r');
        let width = self.source[start..span.end.clamp(start, line_end)]
            .chars()
            .count()
            .max(1);
        let gutter = " ".repeat(line.to_string().len());
        // A line holding a URL's password is located, never quoted.
        let snippet = if super::userinfo::holds_userinfo(text) {
            String::new()
        } else {
            format!(
                "{gutter} |\n{line} | {text}\n{gutter} | {}{}",
                " ".repeat(column - 1),
                "^".repeat(width)
            )
        };
        Diagnostic {
            file: self.file.to_owned(),
            line,
            column,
            key,
            message,
            from_override: None,
            snippet,
        }
    }
}

/// Rewords serde's messages in the scenario's vocabulary: a TOML file has keys, not fields.
pub(crate) fn reword(message: &str) -> String {
    // serde says "expected one of" both for a table's keys and for an enum's values.
    let listed = if message.starts_with("unknown variant") {
        "valid values are"
    } else {
        "valid keys are"
    };
    message
        .replace("unknown field", "unknown key")
        .replace("missing field", "missing key")
        .replace("expected one of", listed)
        .replace("unknown variant", "unknown value")
        .replace(", there are no fields", "; this table takes no keys")
}

/// A problem [`compile`](super::compile::compile) found, before it is located in the source.
pub(crate) struct Invalid {
    pub(crate) path: Vec<Seg>,
    pub(crate) message: String,
}

pub(crate) fn at(path: &[Seg], message: impl Into<String>) -> Invalid {
    Invalid {
        path: path.to_vec(),
        message: message.into(),
    }
}

pub(crate) fn key(k: &str) -> Seg {
    Seg::Key(k.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_of_a_span() {
        let src = "[target]\nurl = \"x\"\ntrasnport = \"h2c\"\n";
        let loc = Locator {
            file: "s.toml",
            source: src,
            overrides: &[],
        };
        let at = src.find("trasnport").unwrap();
        let d = loc.diagnostic(
            Some(at..at + 9),
            "target.trasnport".into(),
            "unknown key".into(),
        );
        assert_eq!((d.line, d.column), (3, 1));
        assert_eq!(
            d.to_string(),
            "s.toml:3:1: target.trasnport: unknown key\n  |\n3 | trasnport = \"h2c\"\n  | ^^^^^^^^^"
        );
    }

    #[test]
    fn spans_past_the_end_name_the_override() {
        let src = "a = 1\n";
        let sets = ["x=1".to_owned(), "target.transport=h3".to_owned()];
        let loc = Locator {
            file: "s.toml",
            source: src,
            overrides: &sets,
        };
        let d = loc.diagnostic(
            Some(Locator::override_span(src.len(), 1)),
            "target.transport".into(),
            "bad".into(),
        );
        assert_eq!(d.from_override.as_deref(), Some("target.transport=h3"));
        assert_eq!(
            d.to_string(),
            "s.toml: --set target.transport=h3: target.transport: bad"
        );
    }
}
