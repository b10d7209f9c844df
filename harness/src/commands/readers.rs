//! Every path argument of the command line, by what the command does with it: the
//! evidence directories it reads (each opened through `evidence::Sealed`, the one
//! door: refused, exit 2, unless finished and as sealed), and every other path
//! (plans, inputs, outputs, stores). `main.rs`'s tests hold these lists to the
//! command-line definition (every `PathBuf` argument of every subcommand is in
//! exactly one, so a new one cannot be forgotten), and
//! `tests/integration/evidence_readers.rs` runs every reader on damaged evidence of
//! each kind. Owns the lists only.

/// A path argument: the subcommand (`gate`, `plan power`) and clap's argument id.
pub type PathArg = (&'static str, &'static str);

/// Arguments naming a finished evidence directory the command reads.
pub const EVIDENCE_READERS: &[PathArg] = &[
    ("replay", "dir"),
    ("report", "dir"),
    ("export", "dir"),
    ("noise", "dir"),
    ("gate", "baseline"),
    ("gate", "candidate"),
    ("gate", "export_baseline"),
    ("gate", "qualification"),
    ("gate", "paired"),
    ("gate", "simulate"),
    ("plan power", "noise"),
    ("plan check", "pilots_from"),
];

/// Every other path argument, and why it is not a finished evidence directory read.
pub const OTHER_PATHS: &[(&str, &str, &str)] = &[
    ("run", "plan", "a plan"),
    ("run", "out", "the evidence directory written"),
    (
        "run",
        "resume",
        "an unfinished study by definition (no manifest): `run::resume` verifies each completed unit by its \
         completion record and moves partial ones aside",
    ),
    ("trace", "plan", "a plan"),
    ("trace", "out", "the inputs written"),
    ("plan check", "plan", "a plan"),
    ("plan derive", "plan", "a plan"),
    ("plan power", "plan", "a plan"),
    ("plan power", "json", "the report written"),
    ("accept", "plan", "a plan"),
    ("accept", "json", "the report written"),
    ("accept", "md", "the report written"),
    ("accept", "log_dir", "where server logs are written"),
    ("qualify", "plan", "a plan"),
    ("qualify", "out", "the evidence directory written"),
    ("bench-loadgen", "records_dir", "where records are written"),
    ("bench-loadgen", "out", "the report written"),
    ("bench-loadgen", "sharegpt", "an input dataset"),
    ("bench-loadgen", "tokenizer", "an input tokenizer"),
    ("gate", "rules", "a rules file"),
    ("gate", "json_out", "the verdict written"),
    ("gate", "out", "the baseline file written"),
    ("gate", "record_history", "a history store (Parquet files, no manifest), appended to"),
    ("gate", "history", "a history store (Parquet files, no manifest), read file by file, regular files only"),
    ("gate", "plan", "a plan"),
    ("gate", "summary_md", "the summary written"),
    ("compare", "plan", "a plan"),
    ("compare", "out", "the evidence directory written"),
    ("export", "out", "the export written"),
    ("noise", "json", "the report written"),
    ("bench", "out", "the evidence directory written (its own, read back after it is sealed)"),
    ("bench", "result_dir", "where result files are written"),
    ("benchmark", "out", "the evidence directory written (its own, read back after it is sealed)"),
    ("profile", "out", "the evidence directory written (its own, read back after it is sealed)"),
    ("profile", "input_file", "an input dataset"),
    ("profile", "texts", "the input texts synthetic prompts are cut from"),
    ("profile", "artifact_dir", "where AIPerf's export files are written"),
    ("mock", "spec", "a mock spec"),
    ("mock", "ground_truth", "the ground truth written"),
    ("mock", "summary", "the lateness summary written"),
    (
        "run",
        "study",
        "a dispatched study's directory, unfinished by definition (a worker writes one block of it); the worker \
         checks the plan, derived loads and inputs against the hashes in slurm/dispatch.json",
    ),
    ("run", "shared_root", "the directory every node sees, which the study must be under"),
];

/// Whether `(command, arg)` names an evidence directory the command reads.
pub fn reads_evidence(command: &str, arg: &str) -> bool {
    EVIDENCE_READERS.contains(&(command, arg))
}
