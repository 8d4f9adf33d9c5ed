//! The one model of every human-readable page herd writes: headings, paragraphs, lists,
//! findings, tables of typed cells and charts. A report section is built once as a
//! [`Document`]'s blocks ([`crate::sections`], [`crate::compare`]); Markdown, HTML and CSV
//! each render that model ([`crate::markdown`], [`crate::html`]), the way
//! hyperfine's exporters render one table model.

use crate::chart::Chart;

/// A whole page.
#[derive(Clone, Debug, Default)]
pub struct Document {
    /// The page's title (the Markdown `#` heading, the HTML `<title>` and `<h1>`).
    pub title: String,
    /// Its content, in order.
    pub blocks: Vec<Block>,
}

/// One piece of a page.
#[derive(Clone, Debug)]
pub enum Block {
    /// A section heading: level 2 is a report section, 3 a part of one.
    Heading(u8, String),
    /// A paragraph.
    Para(Text),
    /// A bulleted list.
    List(Vec<Text>),
    /// A finding: its kind, one line with its numbers, what it means and its evidence.
    Finding {
        /// Stable kind, e.g. `churn_cliff`.
        kind: String,
        /// The one line.
        title: String,
        /// What it means and what to do (empty for none).
        detail: String,
        /// The report rows it rests on.
        evidence: Vec<String>,
    },
    /// A table.
    Table(Table),
    /// A chart: drawn in HTML, left out of Markdown and CSV (their tables hold the numbers).
    Chart(Chart),
}

/// Inline text: plain runs, `code` and **strong** ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Text(pub Vec<Inline>);

/// One run of inline text.
#[derive(Clone, Debug, PartialEq)]
pub enum Inline {
    /// As it is.
    Plain(String),
    /// A name, a file, an objective: `monospace`.
    Code(String),
    /// Emphasised: **bold**.
    Strong(String),
}

impl Text {
    /// Plain text.
    pub fn plain(s: impl Into<String>) -> Self {
        Self(vec![Inline::Plain(s.into())])
    }

    /// Appends plain text.
    pub fn then(mut self, s: impl Into<String>) -> Self {
        self.0.push(Inline::Plain(s.into()));
        self
    }

    /// Appends `code`.
    pub fn code(mut self, s: impl Into<String>) -> Self {
        self.0.push(Inline::Code(s.into()));
        self
    }

    /// Appends every run of `other`.
    pub fn then_all(mut self, other: Text) -> Self {
        self.0.extend(other.0);
        self
    }

    /// Appends **strong** text.
    pub fn strong(mut self, s: impl Into<String>) -> Self {
        self.0.push(Inline::Strong(s.into()));
        self
    }
}

/// Which side of its column a cell sits on: names left, numbers right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Names, lists of outcomes.
    Left,
    /// Numbers.
    Right,
}

/// A column's header and alignment.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// The header.
    pub name: String,
    /// Where its cells sit.
    pub align: Align,
}

impl Column {
    /// A left-aligned column.
    pub fn left(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            align: Align::Left,
        }
    }

    /// A right-aligned (numeric) column.
    pub fn right(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            align: Align::Right,
        }
    }
}

/// One table cell: its text, already in the units people read, and what kind of text it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The text (`1.2ms`, `0.0046`, `gateway → backend`).
    pub text: String,
    /// How a renderer marks it.
    pub kind: ValueKind,
}

/// How a cell is marked.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// As it is.
    Plain,
    /// Monospace.
    Code,
    /// No value; the text says `n/a` and this says why.
    Missing(String),
    /// A change for the better (a comparison's delta).
    Better,
    /// A change for the worse.
    Worse,
    /// A failed check: **FAIL**.
    Fail,
}

impl Value {
    /// A plain cell.
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            kind: ValueKind::Plain,
        }
    }

    /// A monospace cell.
    pub fn code(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            kind: ValueKind::Code,
        }
    }

    /// A cell with no value, and why.
    pub fn missing(why: impl Into<String>) -> Self {
        Self {
            text: "n/a".into(),
            kind: ValueKind::Missing(why.into()),
        }
    }

    /// A cell marked `kind`.
    pub fn marked(text: impl Into<String>, kind: ValueKind) -> Self {
        Self {
            text: text.into(),
            kind,
        }
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::plain(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Self::plain(s)
    }
}

/// One row of a table.
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    /// Cells, one per column.
    Cells(Vec<Value>),
    /// A heading row across every column, starting a group of rows.
    Group(String),
}

/// A table: columns and rows of typed cells.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// The columns.
    pub columns: Vec<Column>,
    /// The rows, each as many cells as there are columns.
    pub rows: Vec<Row>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: Vec<Column>) -> Self {
        Self {
            columns,
            rows: Vec::new(),
        }
    }

    /// Appends a row of cells.
    pub fn row(&mut self, cells: Vec<Value>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "a row per column");
        self.rows.push(Row::Cells(cells));
    }

    /// Appends a group heading row.
    pub fn group(&mut self, title: impl Into<String>) {
        self.rows.push(Row::Group(title.into()));
    }
}
