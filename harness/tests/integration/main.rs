//! The harness's integration tests, one binary (each file a module): the crate and its
//! dependencies are linked once, not once per file. Run one file's tests with
//! `cargo test -p harness --test integration <file>::`.

mod common;

mod accept;
mod all_failed;
mod arm_diag;
mod bench_cmd;
mod benchmark_outputs;
mod blocking;
mod bounded_logs;
mod chat;
mod cli_run;
mod compare;
mod cpus;
mod crash;
mod e2e_run;
mod engine_bin;
mod evidence_readers;
mod export_guidellm;
mod fault;
mod fuzz_inputs;
mod gate;
mod gpu_memory;
mod identity;
mod mock;
mod multi_turn;
mod observer;
mod one_number;
mod panels;
mod pilots;
mod plan_power;
mod plans_dir;
mod profile_cmd;
mod quality;
mod replay;
mod replay_compare;
mod report;
mod report_browser;
mod requests_table;
mod resume;
mod run_qualify;
mod sealed_readers;
mod sequential;
mod slurm;
mod trace_lengths;
mod traffic;
mod tuning;
mod vllm_datasets;
mod vllm_sweep;
