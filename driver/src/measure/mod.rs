//! Measurement: players send one sample per op to a single aggregator, which owns every
//! histogram. Nothing on a player's path takes a lock or touches a histogram.

pub(crate) mod aggregator;
pub mod health;
pub mod histogram;
