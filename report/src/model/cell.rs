//! A report cell: a number, or why there is none.

use serde::{Deserialize, Serialize};

/// A number, or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Cell {
    /// The value.
    Value(f64),
    /// Why it is missing.
    Missing(String),
}

impl Cell {
    /// The value, if any.
    pub fn value(&self) -> Option<f64> {
        match self {
            Cell::Value(v) => Some(*v),
            Cell::Missing(_) => None,
        }
    }
}
