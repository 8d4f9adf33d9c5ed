//! Templates for paths, headers and bodies: `{player}`, `{account}` and player variables.
//!
//! A template is compiled once when the scenario loads, so a player's hot loop only copies
//! literal pieces and variable values into one reused buffer.

use std::fmt::Write as _;

/// The variables a template may name besides the scenario's own: the player's id and account.
pub const BUILTINS: [&str; 3] = ["player", "account", "now_us"];

/// The prefix of a group variable, `{group.game_id}`: captured by the group's create op and
/// shared with every member (see `docs/scenario.md`, `[group]`).
pub const GROUP_PREFIX: &str = "group.";

/// A compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    Player,
    Account,
    /// The wall clock when the request is built, microseconds since the Unix epoch: a send
    /// timestamp a message carries, so its receiver can tell how long delivery took.
    NowUs,
    Var(usize),
}

/// Names of the scenario's variables; a variable's index is its slot in [`Vars`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VarNames {
    names: Vec<String>,
}

impl VarNames {
    /// The slot of `name`, adding it if new.
    pub fn intern(&mut self, name: &str) -> usize {
        match self.slot(name) {
            Some(i) => i,
            None => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
        }
    }

    /// The slot of `name`, if the scenario knows it.
    pub fn slot(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The name in `slot`.
    pub fn name(&self, slot: usize) -> &str {
        &self.names[slot]
    }

    /// How many variables the scenario has.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True if the scenario has no variables.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// One player's variable values, by slot.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    /// The player's id, `{player}`.
    pub player: u64,
    /// The player's account, `{account}`.
    pub account: u64,
    values: Vec<Option<String>>,
}

impl Vars {
    /// Variables for one player, starting from the scenario's `[vars]` defaults.
    pub fn new(player: u64, account: u64, defaults: &[Option<String>]) -> Self {
        Self {
            player,
            account,
            values: defaults.to_vec(),
        }
    }

    /// The value in `slot`, if set.
    pub fn get(&self, slot: usize) -> Option<&str> {
        self.values.get(slot).and_then(|v| v.as_deref())
    }

    /// Sets `slot` to `value`.
    pub fn set(&mut self, slot: usize, value: String) {
        if slot >= self.values.len() {
            self.values.resize(slot + 1, None);
        }
        self.values[slot] = Some(value);
    }
}

/// Why a template string does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` that starts a variable name is never closed.
    #[error("`{{{0}` is not closed with `}}` (write `{{{{` for a literal `{{`)")]
    Unclosed(String),
}

impl Template {
    /// Compiles `src`. `{name}` is a variable when `name` is an identifier
    /// (`[A-Za-z_][A-Za-z0-9_]*`); any other `{`, as in a JSON body, is literal text, and `{{`
    /// is a literal `{` for the rare literal `{identifier}`.
    pub fn parse(src: &str, names: &mut VarNames) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = src;
        while let Some(i) = rest.find('{') {
            lit.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(tail) = after.strip_prefix('{') {
                lit.push('{');
                rest = tail;
                continue;
            }
            let ident_len = after
                .char_indices()
                .take_while(|&(j, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (j > 0 && c.is_ascii_digit())
                })
                .count();
            if ident_len == 0 {
                lit.push('{');
                rest = after;
                continue;
            }
            // `{group.name}`: a variable the player's group shares (see `groups`).
            let ident_len = match after[ident_len..].strip_prefix('.') {
                Some(tail) if &after[..ident_len] == GROUP_PREFIX.trim_end_matches('.') => {
                    let more = tail
                        .char_indices()
                        .take_while(|&(j, c)| {
                            c == '_' || c.is_ascii_alphabetic() || (j > 0 && c.is_ascii_digit())
                        })
                        .count();
                    if more > 0 {
                        ident_len + 1 + more
                    } else {
                        ident_len
                    }
                }
                _ => ident_len,
            };
            let name = &after[..ident_len];
            if !after[ident_len..].starts_with('}') {
                if after[ident_len..].is_empty() {
                    return Err(TemplateError::Unclosed(name.to_owned()));
                }
                lit.push('{');
                rest = after;
                continue;
            }
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(match name {
                "player" => Part::Player,
                "account" => Part::Account,
                "now_us" => Part::NowUs,
                _ => Part::Var(names.intern(name)),
            });
            rest = &after[ident_len + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Self { parts })
    }

    /// A template of literal text only.
    pub fn literal(text: &str) -> Self {
        let parts = if text.is_empty() {
            Vec::new()
        } else {
            vec![Part::Lit(text.to_owned())]
        };
        Self { parts }
    }

    /// True when it renders the same for every player at every moment (no variable, no
    /// builtin): what it renders can be worked out once.
    pub fn is_constant(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Lit(_)))
    }

    /// The variable slots this template reads.
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(s) => Some(*s),
            _ => None,
        })
    }

    /// Appends the rendered template to `out`; on a variable with no value, returns its slot.
    pub fn render_into(&self, vars: &Vars, out: &mut String) -> Result<(), usize> {
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Player => {
                    let _ = write!(out, "{}", vars.player);
                }
                Part::Account => {
                    let _ = write!(out, "{}", vars.account);
                }
                Part::NowUs => {
                    let _ = write!(out, "{}", unix_us());
                }
                Part::Var(slot) => out.push_str(vars.get(*slot).ok_or(*slot)?),
            }
        }
        Ok(())
    }

    /// The rendered template as a new string.
    pub fn render(&self, vars: &Vars) -> Result<String, usize> {
        let mut s = String::new();
        self.render_into(vars, &mut s)?;
        Ok(s)
    }
}

/// Microseconds since the Unix epoch by the wall clock (0 before 1970).
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, set: &[(&str, &str)]) -> Result<String, String> {
        let mut names = VarNames::default();
        let t = Template::parse(src, &mut names).map_err(|e| e.to_string())?;
        let mut vars = Vars::new(7, 42, &[]);
        for (k, v) in set {
            vars.set(names.intern(k), (*v).to_owned());
        }
        t.render(&vars).map_err(|slot| names.name(slot).to_owned())
    }

    #[test]
    fn builtins_and_variables() {
        assert_eq!(
            render("/games/{game_id}/p{player}", &[("game_id", "g9")]).unwrap(),
            "/games/g9/p7"
        );
        assert_eq!(
            render("Bearer tok-{account}", &[]).unwrap(),
            "Bearer tok-42"
        );
    }

    #[test]
    fn json_braces_stay_literal() {
        let body = r#"{"player": {player}, "move": {"x": 1}}"#;
        assert_eq!(
            render(body, &[]).unwrap(),
            r#"{"player": 7, "move": {"x": 1}}"#
        );
        assert_eq!(render("{{player}", &[]).unwrap(), "{player}");
        assert_eq!(render("{ player }", &[]).unwrap(), "{ player }");
    }

    #[test]
    fn missing_variable_names_its_slot() {
        assert_eq!(render("/g/{game_id}", &[]), Err("game_id".to_owned()));
    }

    #[test]
    fn group_variables_are_one_name() {
        let mut names = VarNames::default();
        let t = Template::parse("/games/{group.game_id}/x{group.}", &mut names).unwrap();
        assert_eq!(names.slot("group.game_id"), Some(0));
        assert_eq!(names.len(), 1);
        let mut vars = Vars::new(1, 1, &[]);
        vars.set(0, "g7".into());
        assert_eq!(t.render(&vars).unwrap(), "/games/g7/x{group.}");
    }

    #[test]
    fn unclosed_variable_is_an_error() {
        let e = render("/g/{game_id", &[]).unwrap_err();
        assert!(e.contains("`{game_id` is not closed"), "{e}");
    }
}
