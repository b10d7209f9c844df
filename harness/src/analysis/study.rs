//! Reading an evidence directory for the report: the frozen plan, the git revision
//! (`manifest.json`, else `run.json`), every server invocation's outcome and startup
//! record, and every raw `<cell>.requests.jsonl`, from which the per-cell summaries
//! are recomputed through `metrics` and compared with the stored ones. Owns what the
//! report reads; reads nothing under `results/` except the stored summaries (only to
//! compare) and `results/qualification.json` (kept verbatim); `run.json` only for
//! its sessions (interruptions, resumptions, discarded units). Must not write.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::AnalysisError;
use super::claims::{FailedRequest, UnitRow};
use crate::evidence::request_record::{Failure, RequestRecord};
use crate::evidence::{
    ARM_OUTCOME_FILE, Evidence, GitInfo, RUN_FILE, RunRecord, STARTUP_FILE, Session, StartupRecord, UnitOutcome,
    UnitState,
};
use crate::metrics::{
    CellSummary, INCOMPLETE_CLASS, TurnSummary, measure_request, summarize_cell_with_slo, summarize_turns,
};
use crate::plan::{FrozenPlan, ResolvedCell, Schedule, freeze};

/// One server invocation as the report shows it.
#[derive(Debug, Clone)]
pub struct UnitInfo {
    pub status: UnitRow,
    /// The expanded argv from `startup.json`, when spawned.
    pub argv: Option<Vec<String>>,
    pub program_sha256: Option<String>,
    /// Whether `startup.json` records what the server said it is (studies before
    /// that was asked do not).
    pub identity_recorded: bool,
    /// `/version`'s `version` as the server answered it after startup.
    pub server_version: Option<String>,
    /// `/v1/models`: each served name with its `max_model_len` when given.
    pub served_models: Vec<String>,
    /// The verdicts of the arm's identity checks (`[arms.identity]`), when it has any.
    pub identity_checks: Option<Vec<crate::evidence::CheckResult>>,
    pub startup_s: Option<f64>,
    /// Lines of `server.log` that mention a version (at most a few).
    pub version_lines: Vec<String>,
    /// What the server's own `/metrics` said per cell (`scrapes.jsonl`).
    pub server_metrics: Vec<super::server_metrics::CellServerMetrics>,
    /// The peaks of `memory.jsonl` (process-group RSS, GPU).
    pub memory: super::memory::MemoryPeaks,
    /// The session that ran the unit (`arm_outcome.json` `session`; none before
    /// sessions were recorded).
    pub session: Option<u32>,
}

/// One (block, arm, cell) with a raw requests file.
#[derive(Debug, Clone)]
pub struct CellData {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    /// Recomputed from the raw records (`Err`: why no summary exists).
    pub summary: Result<CellSummary, String>,
    /// Per valid request, in trace order: TTFT from HTTP send and TPOT, in ms.
    pub ttft_ms: Vec<f64>,
    pub tpot_ms: Vec<f64>,
    /// The matrix's spread columns (`spread`), from the same valid requests.
    pub spread: super::spread::Spread,
    /// A session cell's per-turn-index rows (`metrics::summarize_turns`; empty for a
    /// cell without sessions), stored in its summary as `turns`.
    pub turns: Vec<TurnSummary>,
}

/// Everything the report is built from.
pub struct Loaded {
    pub frozen: FrozenPlan,
    pub git: Option<GitInfo>,
    pub schedule: Schedule,
    pub resolved: Vec<ResolvedCell>,
    /// Schedule order (block, then start order).
    pub units: Vec<UnitInfo>,
    /// Schedule order (block, start order, cell order).
    pub cells: Vec<CellData>,
    pub failures: Vec<FailedRequest>,
    /// Differences between stored and recomputed summaries (empty: all match).
    pub summary_mismatches: Vec<String>,
    pub summaries_checked: usize,
    pub qualification: Option<Value>,
    /// `run.json` `sessions` (every interruption and resumption; empty when absent).
    pub sessions: Vec<Session>,
    /// The power summary from the study's own pilots (`None`: no `[pilots]`, or not
    /// computed; set by `report::build`).
    pub power: Option<Result<crate::analysis::power::PowerReport, String>>,
    /// A sequential study's looks and stop (`sequential.json`; `None` without).
    pub sequential: Option<crate::analysis::sequential::SequentialRecord>,
    /// The decomposition of `analysis.noise`'s measures (`None`: the plan asks for
    /// none; `Err`: why it could not be made); set by `report::build`.
    pub noise: Option<Result<crate::analysis::noise::NoiseReport, String>>,
    /// Where the blocks ran when they ran as Slurm array tasks (`run.json` `executor`).
    pub executor: Option<crate::evidence::ExecutorRecord>,
}

impl Loaded {
    /// The analysis of these records (effects, tests, claims), with the arms in
    /// `unqualified` marked so: what the report and `plan power` both read.
    pub fn analyse(&self, unqualified: &[String]) -> Result<super::Analysis, crate::stats::StatsError> {
        let summaries: Vec<CellSummary> = self.cells.iter().filter_map(|c| c.summary.as_ref().ok().cloned()).collect();
        let statuses: Vec<UnitRow> = self.units.iter().map(|u| u.status.clone()).collect();
        let input = super::AnalysisInput {
            plan: &self.frozen.plan,
            summaries: &summaries,
            units: &statuses,
            failures: &self.failures,
            unqualified,
        };
        super::analyse(&input)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, AnalysisError> {
    crate::evidence::read_input(path).map_err(|error| AnalysisError::Io { path: path.to_path_buf(), error })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, AnalysisError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = read(path)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| AnalysisError::Json { path: path.to_path_buf(), message: e.to_string() })
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let flat = flat.trim();
    if flat.chars().count() > max { format!("{}...", flat.chars().take(max).collect::<String>()) } else { flat.into() }
}

fn failure_detail(f: &Failure) -> String {
    let text = match f {
        Failure::Connect { detail }
        | Failure::BeforeHeaders { detail }
        | Failure::AfterHeaders { detail }
        | Failure::MalformedStream { detail }
        | Failure::ServerDied { detail } => detail.clone(),
        Failure::HttpStatus { status, body } => format!("HTTP {status}: {body}"),
        Failure::Timeout { after_ns } => format!("after {:.3} s", *after_ns as f64 / 1e9),
        Failure::ShortOutput { expected, got } => format!("expected {expected} output tokens, got {got}"),
        Failure::PromptLengthMismatch { expected, got } => format!("expected {expected} prompt tokens, got {got}"),
        Failure::SessionEnded { failed_turn } => format!("not sent: turn {failed_turn} of its session failed"),
    };
    one_line(&text, 160)
}

fn git_of(root: &Path, run: Option<&RunRecord>) -> Result<Option<GitInfo>, AnalysisError> {
    let manifest: Option<Value> = read_json(&root.join(crate::evidence::MANIFEST_FILE))?;
    if let Some(git) = manifest.and_then(|v| serde_json::from_value::<GitInfo>(v.get("git")?.clone()).ok()) {
        return Ok(Some(git));
    }
    Ok(run.map(|r| r.git.clone()))
}

fn unit_info(dir: &Path, block: u32, arm: &str) -> Result<UnitInfo, AnalysisError> {
    let outcome: Option<UnitOutcome> = read_json(&dir.join(ARM_OUTCOME_FILE))?;
    let status = UnitRow {
        block,
        arm: arm.to_string(),
        status: UnitState::of(outcome.as_ref().map(|o| o.status)),
        detail: outcome.as_ref().and_then(|o| o.detail.clone()),
    };
    let startup: Option<StartupRecord> = read_json(&dir.join(STARTUP_FILE))?;
    let argv = startup.as_ref().and_then(|s| s.argv.clone());
    let program_sha256 = startup.as_ref().and_then(|s| s.program_sha256.clone());
    let startup_s = startup.as_ref().and_then(|s| s.startup_s);
    let mut version_lines = Vec::new();
    if let Ok(file) = crate::evidence::open_input(&dir.join(crate::evidence::SERVER_LOG_FILE)) {
        use std::io::BufRead;
        // Streamed: a server log can be large (the evidence keeps up to 16 MiB).
        let mut r = std::io::BufReader::new(file);
        let mut raw = Vec::new();
        while version_lines.len() < 3 && r.read_until(b'\n', &mut raw).is_ok_and(|n| n > 0) {
            let l = one_line(&String::from_utf8_lossy(&raw), 200);
            if l.to_lowercase().contains("version") && !version_lines.contains(&l) {
                version_lines.push(l);
            }
            raw.clear();
        }
    }
    let identity = startup.as_ref().and_then(|s| s.identity.as_ref());
    let identity_recorded = identity.is_some();
    let server_version = identity
        .and_then(|i| i.version.as_ref())
        .and_then(|v| v.get("version").and_then(Value::as_str).map(str::to_string).or_else(|| Some(v.to_string())))
        .filter(|v| v != "null");
    let served_models = identity
        .and_then(|i| i.models.as_ref())
        .and_then(|m| m.get("data"))
        .and_then(Value::as_array)
        .map(|data| {
            data.iter()
                .filter_map(|d| {
                    let id = d.get("id").and_then(Value::as_str)?;
                    Some(match d.get("max_model_len").and_then(Value::as_u64) {
                        Some(len) => format!("{id} (max_model_len {len})"),
                        None => id.to_string(),
                    })
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let identity_checks = startup.as_ref().and_then(|s| s.identity_checks.clone());
    let scrapes = crate::evidence::read_input(&dir.join(crate::evidence::SCRAPES_FILE)).unwrap_or_default();
    let server_metrics = super::server_metrics::per_cell(&String::from_utf8_lossy(&scrapes));
    let memory = super::memory::peaks(&String::from_utf8_lossy(
        &crate::evidence::read_input(&dir.join(crate::evidence::MEMORY_FILE)).unwrap_or_default(),
    ));
    Ok(UnitInfo {
        status,
        argv,
        program_sha256,
        startup_s,
        version_lines,
        identity_recorded,
        server_version,
        served_models,
        identity_checks,
        server_metrics,
        memory,
        session: outcome.as_ref().map(|o| o.session),
    })
}

pub fn read_records(path: &Path) -> Result<Vec<RequestRecord>, AnalysisError> {
    let bytes = read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| AnalysisError::Json { path: path.to_path_buf(), message: format!("line {}: {e}", i + 1) })
        })
        .collect()
}

fn cell_data(
    records: &[RequestRecord],
    slo: Option<&crate::plan::Slo>,
    steps: Option<&[crate::metrics::EngineStep]>,
    block: u32,
    arm: &str,
    cell: &str,
) -> (CellData, Vec<FailedRequest>) {
    let mut failures = Vec::new();
    let (mut ttft_ms, mut tpot_ms) = (Vec::new(), Vec::new());
    let mut valid = Vec::new();
    for r in records {
        if r.is_valid() {
            if let Ok(m) = measure_request(r) {
                ttft_ms.extend(m.ttft_ns.map(|v| v as f64 / 1e6));
                tpot_ms.extend(m.tpot_ns.map(|v| v / 1e6));
                valid.push(m);
            }
            continue;
        }
        let (class, detail) = match &r.failure {
            Some(f) => (f.class().to_string(), failure_detail(f)),
            None => (INCOMPLETE_CLASS.to_string(), "no failure recorded and no [DONE]".to_string()),
        };
        failures.push(FailedRequest {
            block,
            arm: arm.to_string(),
            cell: cell.to_string(),
            index: r.index,
            id: r.id.clone(),
            class,
            detail,
        });
    }
    let summary = summarize_cell_with_slo(records, slo).map_err(|e| e.to_string()).map(|mut s| {
        if let Some(steps) = steps {
            s.add_engine_decode(records, steps);
        }
        s
    });
    let spread = super::spread::spread(&valid);
    // As `harness run` stores them: no rows when they cannot be formed.
    let turns = summarize_turns(records).unwrap_or_default();
    (CellData { block, arm: arm.into(), cell: cell.into(), summary, ttft_ms, tpot_ms, spread, turns }, failures)
}

/// The stored summary exactly as `harness run` writes it for this recomputation.
fn expected_text(c: &CellData) -> String {
    let value = match &c.summary {
        Ok(s) => {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            // A session cell's summary also holds its per-turn-index rows.
            if let (false, Some(obj)) = (c.turns.is_empty(), v.as_object_mut()) {
                obj.insert("turns".into(), serde_json::to_value(&c.turns).unwrap_or_default());
            }
            v
        }
        Err(e) => serde_json::json!({"cell": c.cell, "block": c.block, "arm": c.arm, "error": e}),
    };
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// Names the fields whose stored value differs from the recomputed one.
fn differing_fields(stored: &str, expected: &str) -> String {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::from_str::<Value>(stored), serde_json::from_str::<Value>(expected))
    else {
        return "not a JSON object".into();
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let diff: Vec<&str> = keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).map(|k| k.as_str()).collect();
    if diff.is_empty() { "formatting only".into() } else { diff.join(", ") }
}

fn check_summaries(ev: &Evidence, cells: &[CellData]) -> Result<Vec<String>, AnalysisError> {
    let mut problems = Vec::new();
    for c in cells {
        let path = ev.cell_summary_path(c.block, &c.arm, &c.cell);
        let rel = crate::evidence::cell_summary_path(c.block, &c.arm, &c.cell);
        if !path.is_file() {
            problems.push(format!("{rel}: missing (recomputed from raw records)"));
            continue;
        }
        let stored = String::from_utf8_lossy(&read(&path)?).into_owned();
        let expected = expected_text(c);
        if stored != expected {
            problems.push(format!("{rel}: differs from the recomputation ({})", differing_fields(&stored, &expected)));
        }
    }
    match read_json(&ev.root().join(crate::evidence::SUMMARIES_FILE))? {
        Some(Value::Array(items)) if items.len() == cells.len() => {}
        Some(Value::Array(items)) => problems.push(format!(
            "results/summaries.json: {} entries, but {} cells have raw records",
            items.len(),
            cells.len()
        )),
        Some(_) => problems.push("results/summaries.json: not an array".into()),
        None => problems.push("results/summaries.json: missing".into()),
    }
    Ok(problems)
}

/// Reads the evidence directory `root`.
pub fn load(root: &Path) -> Result<Loaded, AnalysisError> {
    let ev = Evidence::open(root);
    let frozen = freeze(read(&ev.plan_path())?)?;
    // A plan with [pilots]: the loads its pilots derived (pilots/derived.json); a
    // sequential study: the blocks it ran (sequential.json).
    let frozen = crate::analysis::pilot::evidence_plan(root, frozen)
        .map_err(|message| AnalysisError::Json { path: root.join(crate::evidence::DERIVED_PATH), message })?;
    let plan = &frozen.plan;
    let resolved = plan.resolved_cells()?;
    let schedule = plan.schedule();
    let mut units = Vec::new();
    let mut cells = Vec::new();
    let mut failures = Vec::new();
    let run: Option<RunRecord> = read_json(&root.join(RUN_FILE))?;
    let engine_measures = run.as_ref().is_some_and(RunRecord::engine_measures);
    for block in &schedule.blocks {
        for arm in &block.arms {
            let dir = ev.unit_dir(block.index, arm);
            units.push(unit_info(&dir, block.index, arm)?);
            // The kept receipts, as `harness run` read them for the cell summaries
            // (since `harness-run/3`).
            let steps = crate::evidence::read_input_text(&dir.join(crate::evidence::RECEIPTS_FILE))
                .ok()
                .filter(|_| engine_measures)
                .and_then(|t| crate::metrics::parse_receipts(&t).ok());
            for cell in &block.cells {
                let path = ev.requests_path(block.index, arm, cell);
                if !path.is_file() {
                    continue;
                }
                let records = read_records(&path)?;
                let (data, failed) = cell_data(&records, plan.slo.as_ref(), steps.as_deref(), block.index, arm, cell);
                cells.push(data);
                failures.extend(failed);
            }
        }
    }
    let summary_mismatches = check_summaries(&ev, &cells)?;
    let qualification = read_json(&ev.root().join(crate::evidence::QUALIFICATION_RESULT_FILE))?;
    let sessions = run.as_ref().map(|r| r.sessions.clone()).unwrap_or_default();
    let executor = run.as_ref().and_then(|r| r.executor.clone());
    Ok(Loaded {
        git: git_of(root, run.as_ref())?,
        frozen,
        schedule,
        resolved,
        units,
        summaries_checked: cells.len(),
        cells,
        failures,
        summary_mismatches,
        qualification,
        sessions,
        power: None,
        noise: None,
        executor,
        sequential: crate::analysis::sequential::read(root)
            .map_err(|message| AnalysisError::Json { path: root.join(crate::analysis::sequential::NAME), message })?,
    })
}

/// Arms that a qualification outcome marks as not qualified (`arms[].qualified`).
pub fn unqualified_arms(qualification: Option<&Value>) -> Vec<String> {
    let Some(arms) = qualification.and_then(|q| q.get("arms")).and_then(Value::as_array) else {
        return Vec::new();
    };
    arms.iter()
        .filter(|a| a.get("qualified").and_then(Value::as_bool) == Some(false))
        .filter_map(|a| a.get("arm").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// `results/` of the evidence directory `root`.
pub fn results_dir(root: &Path) -> PathBuf {
    Evidence::open(root).results_dir()
}
