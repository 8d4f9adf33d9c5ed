//! logfmt read back, for tests of herd's piped output: `key=value` pairs, bare or `"quoted"`
//! values with `\"` and `\\` escapes.

use std::collections::BTreeMap;

/// `line` as key → value. Panics on anything that is not logfmt (a key with a space or a
/// quote, an unclosed quote, a key twice), so a line that does not parse fails the test.
pub fn parse(line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return out;
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert!(
            !key.is_empty() && !key.contains(' ') && !key.contains('"'),
            "a key in {line:?}"
        );
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next().expect("a closed quote") {
                    '\\' => value.push(chars.next().expect("an escaped character")),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ' ') {
                value.push(c);
            }
        }
        assert!(
            out.insert(key.clone(), value).is_none(),
            "{key} twice: {line}"
        );
    }
}
