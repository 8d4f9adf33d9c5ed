//! The driver against real servers on loopback, started by the tests.

mod support;
mod support_stream;

mod counts;
mod flows;
mod groups;
mod hammer;
mod latency;
mod outcomes;
mod player_api;
mod scenarios;
mod shapes;
mod shapes_server;
mod shards;
mod stop;
mod streams;
mod tls;
