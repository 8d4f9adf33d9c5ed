//! A user name or password in the target's URL (`http://alice:S3cret@host/`): refused, since
//! herd would otherwise print it, record it and send it as a malformed `host` header, and
//! never repeated in the refusal. Credentials go in a header the ops send (docs/scenario.md,
//! "Credentials").

use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

use super::{ScenarioError, error::Locator};

/// What a refused URL says to do instead.
pub const USE_A_HEADER: &str = "herd sends no credentials from a URL; send them in a header \
     of each op that needs them, e.g. headers = { authorization = \"Basic BASE64\" } with \
     BASE64 from `printf %s 'USER:PASSWORD' | base64` (or a bearer token), and keep the URL \
     to scheme://HOST[:PORT][/PATH]";

/// Where the userinfo of `url` ends (the byte index of its `@`), if it has one. The userinfo
/// starts after `scheme://` and ends at the last `@` whose user name (the text before the
/// first `:`) holds no `/`, `?` or `#`: a password's own unencoded `/`, `?`, `#`, `:` or `@`
/// do not hide it, and an `@` in a path (`http://host/@me`) is not taken for one.
pub fn userinfo_end(url: &str) -> Option<usize> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    rest.char_indices()
        .filter(|&(_, c)| c == '@')
        .map(|(i, _)| i)
        .rfind(|&at| {
            let before = &rest[..at];
            let user = before.split(':').next().unwrap_or(before);
            !user.contains(['/', '?', '#'])
        })
        .map(|at| start + at)
}

/// `url` with its userinfo, if any, replaced by `***`: `http://***@127.0.0.1:8080/`.
pub fn hide(url: &str) -> String {
    match userinfo_end(url) {
        Some(at) => {
            let start = url.find("://").map_or(0, |i| i + 3);
            format!("{}***{}", &url[..start], &url[at..])
        }
        None => url.to_owned(),
    }
}

/// True when some word of `line` is a URL with a userinfo (for a quoted source line).
pub fn holds_userinfo(line: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .any(|w| userinfo_end(w).is_some())
}

/// Refuses `target.url` when it carries a user name or password — before serde and the
/// checks of `compile`, whose messages quote the value and its line — pointing at its line
/// and column without quoting the line, and at a `--set` without repeating its value.
pub(super) fn refuse(doc: &DeTable<'_>, loc: &Locator<'_>) -> Result<(), ScenarioError> {
    let Some(url) = doc
        .get("target")
        .and_then(|t| t.get_ref().as_table())
        .and_then(|t| t.get("url"))
    else {
        return Ok(());
    };
    let DeValue::String(text) = url.get_ref() else {
        return Ok(());
    };
    if userinfo_end(text).is_none() {
        return Ok(());
    }
    let message = format!(
        "the URL carries a user name or password (`{}`); {USE_A_HEADER}",
        hide(text)
    );
    Err(located(url, loc, message))
}

fn located(value: &Spanned<DeValue<'_>>, loc: &Locator<'_>, message: String) -> ScenarioError {
    let span = value.span();
    let len = loc.source.len();
    if span.start > len {
        return ScenarioError::Override {
            arg: "target.url=***".to_owned(),
            reason: format!("target.url: {message}"),
        };
    }
    let d = loc.diagnostic(Some(span), "target.url".to_owned(), message);
    ScenarioError::Invalid(Box::new(d.without_snippet()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    #[test]
    fn a_userinfo_is_found_however_the_password_is_written() {
        for url in [
            "http://alice:S3cret@127.0.0.1:8080/pre",
            "http://alice:S3%23cret@127.0.0.1:8080/",
            "http://alice:S3#c/r?e@t@127.0.0.1:8080/",
            "https://alice@host",
            "http://:pw@host/",
        ] {
            let at = userinfo_end(url).unwrap_or_else(|| panic!("{url}"));
            assert_eq!(
                hide(url),
                format!("{}***{}", &url[..url.find("://").unwrap() + 3], &url[at..])
            );
            assert!(
                !hide(url).contains("S3") && !hide(url).contains("alice"),
                "{url}"
            );
            assert!(holds_userinfo(&format!("url = \"{url}\"")));
        }
        for url in [
            "http://127.0.0.1:8080/",
            "http://host/users/@me",
            "http://host/x?mail=a@b.c",
            "http://host#a@b",
        ] {
            assert_eq!(userinfo_end(url), None, "{url}");
            assert_eq!(hide(url), url);
        }
    }

    const OPS: &str =
        "[[op]]\nname = \"a\"\npath = \"/\"\n[[step]]\nplayers = 1\nduration = \"1s\"\n";

    #[test]
    fn target_url_with_a_password_is_refused_at_its_line_without_it() {
        for pw in ["S3cret", "S3%23cr%2Fet", "S3#cr/et?x"] {
            let src = format!("[target]\nurl = \"http://alice:{pw}@127.0.0.1:8080/pre\"\n{OPS}");
            let e = Scenario::parse("s.toml", &src, &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("s.toml:2:7: target.url: the URL carries"),
                "{e}"
            );
            assert!(e.contains("authorization = \"Basic BASE64\""), "{e}");
            assert!(!e.contains("S3") && !e.contains("alice"), "{e}");
            // The same URL from --set: the argument is not repeated either.
            let src = format!("[target]\nurl = \"http://127.0.0.1:8080/\"\n{OPS}");
            let set = [format!("target.url=http://alice:{pw}@127.0.0.1:8080/")];
            let e = Scenario::parse("s.toml", &src, &set).unwrap_err();
            assert!(matches!(e, ScenarioError::Override { .. }), "{e}");
            let e = e.to_string();
            assert!(
                e.contains("--set target.url=***: target.url: the URL carries"),
                "{e}"
            );
            assert!(!e.contains("S3") && !e.contains("alice"), "{e}");
        }
    }

    #[test]
    fn no_quoted_line_repeats_a_password_in_a_url() {
        // A syntax error on the line of such a URL: the position, not the line.
        let src = "[target]\nurl = \"http://alice:S3cret@127.0.0.1:8080/\" x\n";
        let e = Scenario::parse("s.toml", src, &[]).unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2:"), "{e}");
        assert!(!e.contains("S3cret"), "{e}");
    }
}
