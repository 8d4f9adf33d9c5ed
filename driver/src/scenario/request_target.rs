//! The characters an op's `path` cannot carry in a request line: control characters (CR, LF,
//! tab, …), the space, DEL, and `<`, `>` and `` ` `` — the bytes herd's HTTP client refuses
//! (as the `http` crate's URI parser does), which used to fail every request of the op as
//! `transport_error.protocol` after a connect each, with no cause printed.
//!
//! Written into the scenario they are refused at the path's line, as a header value's are;
//! in a variable's value (a capture, `[vars]`) they are percent-encoded when the request is
//! made, as a browser encodes a URL (docs/scenario.md, "path").

/// True for a byte a request target cannot carry.
pub(crate) fn unsendable(b: u8) -> bool {
    b <= b' ' || b == 0x7F || matches!(b, b'<' | b'>' | b'`')
}

/// Why the path written in the scenario cannot be sent: the first such character, named,
/// with the percent-encoding to write instead.
pub(super) fn refusal(path: &str) -> Option<String> {
    let (i, c) = path
        .char_indices()
        .find(|&(_, c)| c.is_ascii() && unsendable(c as u8))?;
    let name = match c {
        ' ' => "a space".to_owned(),
        '\r' => "a carriage return (\\r)".to_owned(),
        '\n' => "a line feed (\\n)".to_owned(),
        '\t' => "a tab (\\t)".to_owned(),
        '<' | '>' | '`' => format!("`{c}`"),
        c => format!("the control character U+{:04X}", c as u32),
    };
    Some(format!(
        "{name} at character {} cannot be sent in a request line: write it percent-encoded, \
         %{:02X} (a variable's value is encoded when the request is made)",
        path[..i].chars().count() + 1,
        c as u32
    ))
}

/// Percent-encodes, in place, every byte of `path` a request target cannot carry (they come
/// from variables' values; the scenario's own text was checked when it was loaded).
pub(crate) fn encode_unsendable(path: &mut String) {
    if !path.bytes().any(unsendable) {
        return;
    }
    let mut out = String::with_capacity(path.len() + 8);
    for c in path.chars() {
        if c.is_ascii() && unsendable(c as u8) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    *path = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    #[test]
    fn a_path_a_request_line_cannot_carry_is_refused_at_its_line() {
        for (path, says) in [
            (
                "/a b",
                "a space at character 3 cannot be sent in a request line: write it percent-encoded, %20",
            ),
            (
                "/a\\r\\nX-Evil: 1",
                "a carriage return (\\r) at character 3",
            ),
            ("/x?q=<y>", "`<` at character 6"),
            ("/\\u0000", "the control character U+0000"),
        ] {
            let src = format!(
                "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"a\"\npath = \"{path}\"\n\
                 [[step]]\nplayers = 1\nduration = \"1s\"\n"
            );
            let e = Scenario::parse("s.toml", &src, &[])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("s.toml:5:8: op[0].path: "), "{e}");
            assert!(e.contains(says), "{e}");
        }
        // What a request target can carry passes, variables included.
        let src = "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"a\"\n\
                   path = \"/a/{player}/%20x?q=\\\"{account}\\\"&r=[1]|é\"\n\
                   [[step]]\nplayers = 1\nduration = \"1s\"\n";
        Scenario::parse("s.toml", src, &[]).unwrap();
    }

    #[test]
    fn values_are_percent_encoded_where_the_line_cannot_carry_them() {
        let mut p = "/users/John Smith\r\n/<x>`é%20".to_owned();
        encode_unsendable(&mut p);
        assert_eq!(p, "/users/John%20Smith%0D%0A/%3Cx%3E%60é%20");
        assert!(p.parse::<http::Uri>().is_ok(), "{p}");
        let mut clean = "/a?b=c".to_owned();
        encode_unsendable(&mut clean);
        assert_eq!(clean, "/a?b=c");
    }
}
