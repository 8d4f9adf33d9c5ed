//! Markdown, what a user pastes into a pull request: every [`Document`] block but charts
//! (their numbers are in the tables).

use crate::doc::{Align, Block, Document, Inline, Row, Table, Text, Value, ValueKind};

/// A whole page.
pub fn document(d: &Document) -> String {
    let mut parts: Vec<String> = vec![format!("# {}", d.title)];
    for (i, b) in d.blocks.iter().enumerate() {
        let part = match b {
            // A heading over nothing but charts (the timeline) has nothing to head here.
            Block::Heading(level, title) => {
                let rest = &d.blocks[i + 1..];
                let empty = rest
                    .iter()
                    .take_while(|b| !matches!(b, Block::Heading(l, _) if l <= level))
                    .all(|b| matches!(b, Block::Chart(_)));
                if empty {
                    continue;
                }
                format!("{} {title}", "#".repeat(usize::from(*level)))
            }
            Block::Para(t) => text(t),
            Block::List(items) => items
                .iter()
                .map(|t| format!("- {}", text(t)))
                .collect::<Vec<_>>()
                .join("\n"),
            Block::Finding {
                kind,
                title,
                detail,
                evidence,
            } => {
                let mut s = format!("- **{kind}** — {title}");
                if !detail.is_empty() {
                    s.push_str(&format!("\n  {detail}"));
                }
                for e in evidence {
                    s.push_str(&format!("\n  - evidence: {e}"));
                }
                // Findings in a row are one list.
                if matches!(d.blocks.get(i.wrapping_sub(1)), Some(Block::Finding { .. })) {
                    let last = parts.last_mut().expect("a finding before this one");
                    last.push('\n');
                    last.push_str(&s);
                    continue;
                }
                s
            }
            Block::Table(t) => table(t).trim_end().to_owned(),
            Block::Chart(_) => continue,
        };
        parts.push(part);
    }
    parts.join("\n\n") + "\n"
}

fn text(t: &Text) -> String {
    t.0.iter()
        .map(|i| match i {
            Inline::Plain(s) => s.clone(),
            Inline::Code(s) => format!("`{s}`"),
            Inline::Strong(s) => format!("**{s}**"),
        })
        .collect()
}

/// A cell's Markdown: a missing value says why, in the cell.
fn cell(v: &Value) -> String {
    // A `|` inside a cell would split it; a newline would end the row.
    let s = match &v.kind {
        ValueKind::Missing(why) => format!("n/a ({why})"),
        ValueKind::Code => format!("`{}`", v.text),
        ValueKind::Fail => format!("**{}**", v.text),
        ValueKind::Plain | ValueKind::Better | ValueKind::Worse => v.text.clone(),
    };
    s.replace('|', "\\|").replace('\n', " ")
}

/// One table. Group rows are left out: a Markdown table has no row spanning every column.
pub fn table(t: &Table) -> String {
    let mut o = String::new();
    let head: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    o.push_str(&format!("| {} |\n", head.join(" | ")));
    let rule: Vec<&str> = t
        .columns
        .iter()
        .map(|c| match c.align {
            Align::Left => "---",
            Align::Right => "---:",
        })
        .collect();
    o.push_str(&format!("|{}|\n", rule.join("|")));
    for r in &t.rows {
        if let Row::Cells(cells) = r {
            let cells: Vec<String> = cells.iter().map(cell).collect();
            o.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
    }
    o
}
