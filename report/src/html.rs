//! HTML: one self-contained page per [`Document`] (inline CSS and SVG, no scripts, no
//! network), with the tables of the Markdown page and the timeline's charts.

use std::fmt::Write as _;

use crate::{
    chart::esc,
    doc::{Align, Block, Document, Inline, Row, Table, Text, Value, ValueKind},
};

/// One stylesheet for every page: tables, findings, missing cells, changes for the better
/// or the worse, and the charts.
const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}\
td.l,th.l{text-align:left}th{background:#f3f3f3}th.section{background:#e6e6e6;text-align:left}\
.na{color:#999;border-bottom:1px dotted #999}.better{color:#1a7f37;font-weight:600}.worse{color:#d62728;font-weight:600}\
.finding{border-left:4px solid #d62728;padding:.3em .8em;margin:.6em 0;background:#fff6f6}\
svg .frame{fill:none;stroke:#888}svg .axis{stroke:#888}svg .grid{stroke:#eee}svg .phase{stroke:#999;stroke-dasharray:4 3}\
svg .band{fill:#f4a261;fill-opacity:.28}svg text{font-size:11px}svg .tick,svg .unit,svg .mark{fill:#555}svg .empty{fill:#888;font-size:13px}\
figure{margin:1em 0}figcaption{font-weight:600}.chartnote{margin:.1em 0;color:#666;font-size:12px}";

/// A whole page.
pub fn document(d: &Document) -> String {
    let mut o = format!(
        "<!doctype html><html lang=en><meta charset=utf-8><title>{}</title><style>{STYLE}</style><h1>{}</h1>",
        esc(&d.title),
        esc(&d.title)
    );
    for b in &d.blocks {
        match b {
            Block::Heading(level, title) => {
                let _ = write!(o, "<h{level}>{}</h{level}>", esc(title));
            }
            Block::Para(t) => {
                let _ = write!(o, "<p>{}</p>", text(t));
            }
            Block::List(items) => {
                o.push_str("<ul>");
                for t in items {
                    let _ = write!(o, "<li>{}", text(t));
                }
                o.push_str("</ul>");
            }
            Block::Finding {
                kind,
                title,
                detail,
                evidence,
            } => {
                let _ = write!(
                    o,
                    "<div class=finding><b>{}</b> — {}",
                    esc(kind),
                    with_code(title)
                );
                if !detail.is_empty() {
                    let _ = write!(o, "<br>{}", with_code(detail));
                }
                for e in evidence {
                    let _ = write!(o, "<br><small>evidence: {}</small>", esc(e));
                }
                o.push_str("</div>");
            }
            Block::Table(t) => o.push_str(&table(t)),
            Block::Chart(c) => o.push_str(&c.svg()),
        }
    }
    o.push_str("</html>\n");
    o
}

fn text(t: &Text) -> String {
    t.0.iter()
        .map(|i| match i {
            Inline::Plain(s) => esc(s),
            Inline::Code(s) => format!("<code>{}</code>", esc(s)),
            Inline::Strong(s) => format!("<b>{}</b>", esc(s)),
        })
        .collect()
}

/// A finding's sentence, whose `names` are written as Markdown code: `<code>` here.
fn with_code(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", esc(part));
        } else {
            out.push_str(&esc(part));
        }
    }
    out
}

fn cell(v: &Value, align: Align) -> String {
    let left = if align == Align::Left { " class=l" } else { "" };
    match &v.kind {
        ValueKind::Plain => format!("<td{left}>{}", esc(&v.text)),
        ValueKind::Code => format!("<td{left}><code>{}</code>", esc(&v.text)),
        ValueKind::Missing(why) => format!(
            "<td{left}><span class=na title=\"{}\">{}</span>",
            esc(why),
            esc(&v.text)
        ),
        ValueKind::Better => format!("<td {}>{}", class("better", align), esc(&v.text)),
        ValueKind::Worse | ValueKind::Fail => {
            format!("<td {}>{}", class("worse", align), esc(&v.text))
        }
    }
}

/// `class=NAME`, with `l` beside it for a left-aligned column.
fn class(name: &str, align: Align) -> String {
    match align {
        Align::Left => format!("class=\"{name} l\""),
        Align::Right => format!("class={name}"),
    }
}

/// One table; a group row spans every column.
pub fn table(t: &Table) -> String {
    let mut o = String::from("<table><tr>");
    for c in &t.columns {
        let left = if c.align == Align::Left {
            " class=l"
        } else {
            ""
        };
        let _ = write!(o, "<th{left}>{}", esc(&c.name));
    }
    for r in &t.rows {
        match r {
            Row::Cells(cells) => {
                o.push_str("<tr>");
                for (v, c) in cells.iter().zip(&t.columns) {
                    o.push_str(&cell(v, c.align));
                }
            }
            Row::Group(title) => {
                let _ = write!(
                    o,
                    "<tr><th class=section colspan={}>{}",
                    t.columns.len(),
                    esc(title)
                );
            }
        }
    }
    o.push_str("</table>");
    o
}
