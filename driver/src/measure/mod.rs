//! Measurement: players send one sample per op to a single aggregator, which owns every
//! histogram. Nothing on a player's request path takes a lock or touches a histogram;
//! streams and groups count into [`play`], one short lock per event.

pub(crate) mod aggregator;
pub(crate) mod gate;
pub mod health;
pub mod play;
