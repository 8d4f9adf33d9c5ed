//! Each seed's stress pass (examples/seeds/) in a shortened form against the real server it
//! names, started on a free loopback port by the test: herd's counts against the server's
//! own log, and the seed's finding in the report.

mod chat;
mod game;
mod registry;
mod support;
