//! The commands: each one `harness` subcommand that drives the layers beneath to a
//! result (`run`, `compare`, `gate`, `accept`, `replay`, `export`, `bench`, `benchmark`,
//! `profile`, `bench-loadgen`, `mock`, `plan` check/derive/power and `trace`, `qualify`, `noise`);
//! `main.rs` parses arguments, prints what a command returns and maps its error
//! to an exit code. Owns nothing the layers
//! need: a command imports layers, never the other way (`scripts/import-graph`
//! checks it). Must not hold shared machinery another command needs (it goes to a
//! layer).

pub mod accept;
pub mod bench;
pub mod bench_loadgen;
pub mod benchmark;
pub mod compare;
pub mod export;
pub mod gate;
pub mod mock;
pub mod noise;
pub mod plan;
pub mod profile;
pub mod qualify;
pub mod readers;
pub mod replay;
pub mod run;
