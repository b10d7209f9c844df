//! Plans: the `plan.toml` schema (documented key by key in `docs/plan.md`), its
//! validation, pilot-derived loads, the counterbalanced schedule and freezing.
//! Owns every setting of a study. Must not run servers, send requests or write
//! evidence: later layers take a `FrozenPlan` and read settings only from it.
//!
//! Flow: `freeze_file` (bytes + SHA-256 + validated `Plan`) -> `Plan::require_derived`
//! -> `Plan::schedule` / `Plan::resolved_cells` -> trace generation and the runner.

pub mod compare;
mod derive;
mod error;
mod executor;
mod freeze;
mod limits;
mod pilots;
mod placeholders;
mod resolve;
mod schedule;
mod schema;
pub mod seed;
mod sequential;
mod summary;
mod sweep;
mod tuning;
mod types;
mod validate;
mod validate_analysis;
mod validate_arms;
mod validate_cells;
mod validate_identity;
mod validate_loads;
mod validate_panel;
mod validate_quality;
mod validate_vllm_panel;
mod warnings;

#[cfg(test)]
mod endpoint_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod validate_tests;

use std::path::{Path, PathBuf};

pub use derive::{
    CountRule, DeriveSpec, DerivedLoads, compute as compute_derived, derived_table_text, rewrite_with_derived,
    tenths_str,
};
pub use error::{Issue, PlanError};
pub use executor::{DEFAULT_MAX_RESUBMITS, DEFAULT_POLL_INTERVAL_S, DEFAULT_START_TIMEOUT_S, Executor, ExecutorKind};
pub use freeze::{FrozenPlan, freeze, freeze_file};
pub use limits::{MAX_RATE_RPS, MAX_SECONDS, MAX_TRACE_NS, MIN_RATE_RPS, check_trace_span};
pub use pilots::PILOT_CELL;
pub use placeholders::{ArmCommand, PLACEHOLDERS, Vars, expand, placeholders_in};
pub use resolve::{ResolvedCell, ResolvedLoad};
pub use schedule::{Schedule, ScheduledBlock, arrange, cycle_len, latin_rows, round_arms, round_range};
pub use sequential::{DEFAULT_MARGIN, Sequential};
pub use sweep::{concurrency_cell_name, rate_cell_name};
pub use tuning::{DEFAULT_TUNING_METRIC, Tuning};
pub use types::Pilots;
pub use types::{
    Arm, ArmRole, Arrival, Blocks, Cell, CellKind, Count, Hypothesis, Load, Metric, MetricKind, Order, PanelSource,
    PanelSpec, Plan, Rate, RequestSpec, Server, Slo, Study, Timing, Warmup,
};
pub use types::{
    Blocking, BodyKind, Endpoint, IdentityPreset, IdentitySpec, MAX_REQUEST_ID_PREFIX, RESERVED_BODY_FIELDS, Recorder,
    SETUP_PAD_ENV,
};
pub use types::{GsmDataset, GsmGateSpec, NllGateSpec, ParityGateSpec, Qualification, RetrievalGateSpec};
pub use types::{
    LengthDist, ShareGptSpec, SharedPrefixSpec, SyntheticSpec, SyntheticTokens, VllmBurstGptSpec,
    VllmPrefixRepetitionSpec, VllmRandomSpec,
};
pub use validate_arms::DEFAULT_STOP_GRACE_S;
pub use validate_panel::{SHAREGPT_MAX_PROMPT_TOKENS, SHAREGPT_MAX_TOTAL_TOKENS, SHAREGPT_MIN_TOKENS};
pub use validate_quality::{DEFAULT_GSM_STOP, DEFAULT_GSM_TEMPLATE};
pub use warnings::{blocks_needed, items_needed, zero_loss_upper};

fn parse_file(text: &str) -> Result<schema::PlanFile, PlanError> {
    toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string().trim_end().to_string()))
}

/// Parses and validates plan text (including the `[derived]` check).
pub fn parse(text: &str) -> Result<Plan, PlanError> {
    validate::validate(parse_file(text)?, true)
}

/// Reads, parses and validates a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanError> {
    Ok(freeze_file(path)?.plan)
}

/// Parses plan text ignoring any `[derived]` table and applies its `[derive]`
/// formula: what `harness plan derive` prints (and `--write` writes).
pub fn derive_text(text: &str) -> Result<(Plan, DerivedLoads), PlanError> {
    let mut file = parse_file(text)?;
    file.derived = None;
    let plan = validate::validate(file, false)?;
    let Some(spec) = &plan.derive else {
        return Err(PlanError::invalid("derive", "the plan has no [derive] table: nothing to derive"));
    };
    if plan.pilots.is_some() {
        return Err(PlanError::invalid(
            "pilots",
            "the plan's [pilots] run inside the study: `harness run` derives its loads (pilots/derived.json), \
             nothing is written into the plan",
        ));
    }
    let loads = derive::compute(spec).map_err(PlanError::Invalid)?;
    Ok((plan, loads))
}

/// Whether an input path names a file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    File,
    Dir,
}

/// What is wrong with an input path of a plan, as `plan check` finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputProblem {
    /// Not there (yet): assets may be fetched after the check; a warning.
    Missing,
    /// There, but not the kind of entry the key needs: an error. What it is and
    /// what the key needs, in words ("a FIFO (named pipe), not a regular file").
    WrongKind(String),
}

impl Plan {
    /// Input files and directories the plan reads (prompt sources, trace files,
    /// the qualification's tokenizer, texts and data), relative to the working
    /// directory, each with the kind of entry its key needs.
    pub fn input_paths(&self) -> Vec<(String, &str, InputKind)> {
        use InputKind::{Dir, File};
        let mut wanted: Vec<(String, &str, InputKind)> = Vec::new();
        match &self.prompts.source {
            PanelSource::Text { dir, tokenizer, .. } => {
                wanted.push(("prompts.texts".into(), dir, Dir));
                wanted.push(("prompts.tokenizer".into(), tokenizer, File));
            }
            PanelSource::Jsonl { path } => wanted.push(("prompts.path".into(), path, File)),
            PanelSource::Random { .. } => {}
            PanelSource::VllmRandom(s) => wanted.push(("prompts.tokenizer".into(), &s.tokenizer, File)),
            PanelSource::VllmPrefixRepetition(s) => wanted.push(("prompts.tokenizer".into(), &s.tokenizer, File)),
            PanelSource::VllmBurstGpt(s) => {
                wanted.push(("prompts.path".into(), &s.path, File));
                wanted.push(("prompts.tokenizer".into(), &s.tokenizer, File));
            }
            PanelSource::ShareGpt(s) => {
                wanted.push(("prompts.path".into(), &s.path, File));
                wanted.push(("prompts.tokenizer".into(), &s.tokenizer, File));
            }
            PanelSource::Requests { path, tokenizer } => {
                wanted.push(("prompts.path".into(), path, File));
                wanted.extend(tokenizer.iter().map(|t| ("prompts.tokenizer".to_string(), t.as_str(), File)));
            }
            PanelSource::Synthetic(s) => {
                if let SyntheticTokens::Text { texts, tokenizer, .. } = &s.tokens {
                    wanted.push(("prompts.texts".into(), texts, Dir));
                    wanted.push(("prompts.tokenizer".into(), tokenizer, File));
                }
            }
            PanelSource::SharedPrefix(s) => {
                wanted.push(("prompts.texts".into(), &s.texts, Dir));
                wanted.push(("prompts.tokenizer".into(), &s.tokenizer, File));
            }
        }
        for cell in &self.cells {
            if let Load::Trace { path, .. } = &cell.load {
                wanted.push((format!("cells.{}.trace", cell.name), path, File));
            }
        }
        if let Some(q) = &self.qualification {
            wanted.push(("qualification.tokenizer".into(), &q.tokenizer, File));
            // The texts feed the NLL, retrieval and parity gates, not GSM.
            if q.nll.is_some() || q.retrieval.is_some() || q.parity.is_some() {
                wanted.push(("qualification.texts".into(), &q.texts, Dir));
            }
            if let Some(g) = &q.gsm {
                wanted.push(("qualification.gsm.path".into(), &g.path, File));
                wanted.extend(
                    g.fewshot_path.iter().map(|f| ("qualification.gsm.fewshot_path".to_string(), f.as_str(), File)),
                );
            }
        }
        wanted
    }

    /// Arms that start this workspace's engine (`argv[0]` named `engine`) on a
    /// GPU (`--device cuda[:N]`) without the `engine` identity preset: nothing
    /// would then prove, before timing, that the server runs on the GPU (the
    /// preset holds the startup line's `device` to the flag), and a binary
    /// built without the CUDA backend, or a machine without a GPU, refuses to
    /// start anyway. Not a validation error; `plan check` and `run` refuse it
    /// with this message.
    pub fn engine_device_problems(&self) -> Vec<Issue> {
        let mut out = Vec::new();
        for (i, a) in self.arms.iter().enumerate() {
            let Server::Spawn { argv, .. } = &a.server else { continue };
            let is_engine = argv.first().is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == "engine"));
            let cuda = argv.windows(2).any(|w| w[0] == "--device" && w[1].starts_with("cuda"))
                || argv.iter().any(|x| x.starts_with("--device=cuda"));
            let proven = a.identity.as_ref().is_some_and(|s| s.preset == Some(IdentityPreset::Engine));
            if is_engine && cuda && !proven {
                out.push(Issue::new(
                    format!("arms[{i}].identity"),
                    format!(
                        "arm {:?} starts this engine with --device cuda but has no `identity = {{ preset = \"engine\" }}`: \
                         nothing would check, before timing, that the server runs on the GPU it names (the preset \
                         holds the startup line's device to --device)",
                        a.name
                    ),
                ));
            }
        }
        out
    }

    /// The CPU sets (`client.cpus`, `arms[i].cpus`) that name a CPU outside
    /// `allowed` (the harness's own set on this machine, read by the caller): the
    /// kernel would refuse the pin, or the study would run elsewhere than planned.
    pub fn cpu_problems(&self, allowed: &[u32]) -> Vec<Issue> {
        let sets = std::iter::once(("client.cpus".to_string(), self.client.cpus.as_ref()))
            .chain(self.arms.iter().enumerate().map(|(i, a)| (format!("arms[{i}].cpus"), a.cpus.as_ref())));
        let mut out = Vec::new();
        for (key, set) in sets {
            let missing: Vec<u32> = set.into_iter().flatten().copied().filter(|c| !allowed.contains(c)).collect();
            if !missing.is_empty() {
                out.push(Issue::new(
                    key,
                    format!(
                        "CPU(s) {} are not among the CPUs this harness may use here ({})",
                        crate::host::cpu_list(&missing),
                        crate::host::cpu_list(allowed)
                    ),
                ));
            }
        }
        out
    }

    /// The input paths (under `base`) that are missing or of the wrong kind (a
    /// texts directory that is a file, a tokenizer that is a directory or a FIFO).
    /// Advisory as far as missing files go: validation does not touch the
    /// filesystem.
    pub fn input_problems(&self, base: &Path) -> Vec<(String, PathBuf, InputProblem)> {
        let mut out = Vec::new();
        for (key, path, kind) in self.input_paths() {
            let full = base.join(path);
            let is = |m: &std::fs::Metadata| crate::evidence::kind_in_words(&m.file_type());
            let problem = match (std::fs::metadata(&full), kind) {
                (Err(_), _) => InputProblem::Missing,
                (Ok(m), InputKind::Dir) if !m.is_dir() => {
                    InputProblem::WrongKind(format!("{}, not a directory of texts", is(&m)))
                }
                (Ok(m), InputKind::File) if !m.is_file() => {
                    InputProblem::WrongKind(format!("{}, not a regular file", is(&m)))
                }
                (Ok(_), _) => continue,
            };
            out.push((key, full, problem));
        }
        out
    }
}

#[cfg(test)]
mod plans_dir_tests {
    use super::*;

    fn plans() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plans");
        let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        out.sort();
        out
    }

    /// Gate rules files (`format = "harness-gate-rules/1"`) live beside the plans.
    fn is_gate_rules(path: &Path) -> bool {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().any(|l| l.trim_start().starts_with("format") && l.contains(crate::commands::gate::RULES_FORMAT))
    }

    #[test]
    fn every_example_gate_rules_file_parses() {
        let rules: Vec<PathBuf> = plans().into_iter().filter(|p| is_gate_rules(p)).collect();
        assert!(rules.len() >= 2, "expected plans/gate-ci*.toml, found {rules:?}");
        for path in rules {
            crate::commands::gate::load_rules(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }

    #[test]
    fn every_example_plan_validates_and_is_derived() {
        let all: Vec<PathBuf> = plans().into_iter().filter(|p| !is_gate_rules(p)).collect();
        assert!(all.len() >= 4, "expected the example plans, found {all:?}");
        for path in all {
            let frozen = freeze_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let plan = &frozen.plan;
            if plan.pilots.is_some() {
                // Derived by its in-study pilots when it runs: check it with stand-in rates.
                let (with, _) = plan.with_pilot_rates(&[2.0]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(with.resolved_cells().is_ok() && plan.pilot_plan().is_some(), "{}", path.display());
                continue;
            }
            plan.require_derived().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let cells = plan.resolved_cells().unwrap();
            assert_eq!(cells.len(), plan.cells.len());
            let text = plan.render_check(&frozen.sha256);
            assert!(text.contains("schedule:"), "{}", path.display());
            if plan.derive.is_some() {
                let (_, loads) = derive_text(std::str::from_utf8(&frozen.bytes).unwrap()).unwrap();
                assert_eq!(plan.derived.as_ref(), Some(&loads), "{}", path.display());
            }
        }
    }
}
