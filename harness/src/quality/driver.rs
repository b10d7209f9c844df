//! Runs the gates of a plan: builds the items once (identical for every arm), gives
//! each arm a fresh server (`crate::arm`), runs its gates, stops it, runs its serial
//! reference, writes the raw answers and scores, then pairs every candidate with
//! every control. Owns the order of work and the evidence layout under
//! `<dir>/` (the `qualification/` directory of a study):
//!
//! ```text
//! inputs/<gate>.items.jsonl              prompts (token IDs), golds, passkeys
//! <arm>/server.log                       the arm's server output
//! <arm>/<gate>.responses.jsonl           one answer per item: token IDs, text, score
//! <arm>/<gate>.scores.json               the arm's own scores for the gate
//! <arm>/parity.reference.jsonl           serial reference outputs, both orders
//! <arm>/parity.scores.json               parity verdict and mismatches
//! <arm>/parity.responses.jsonl           the batched answers parity compares
//! <arm>/stop.json                        how a spawned server stopped (none for a url arm)
//! <arm>/arm.json                         arm, role, startup time, error
//! qualification.json                     `QualifyOutcome`
//! ```
//! Must not time anything that enters a study's cells.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::client::{Completion, GateClient};
use super::common::{Texts, Tok};
use super::gsm::{GsmItem, GsmSet};
use super::nll::NllDoc;
use super::parity::{ParityPrompt, ParityResult};
use super::retrieval::PasskeyItem;
use super::{QualityError, gsm, nll, parity, retrieval};
use crate::arm::Invocation;
use crate::evidence::{
    ARM_FILE, GSM_SET_FILE, INPUTS_DIR, PARITY_REFERENCE_FILE, SERVER_LOG_FILE, STOP_FILE, items_file, responses_file,
    scores_file, write_json, write_jsonl,
};
use crate::load::StudyClock;
use crate::plan::{Arm, ArmRole, Plan, Qualification, Vars, expand};

/// Progress lines on stderr (`qualify: ...`), unless quiet.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub quiet: bool,
}

impl Progress {
    pub fn line(&self, msg: &str) {
        if !self.quiet {
            eprintln!("qualify: {msg}");
        }
    }
}

/// One arm's server, as the gates see it.
pub struct ArmCtx<'a> {
    pub arm: &'a str,
    pub model: &'a str,
    pub client: GateClient,
    pub concurrency: usize,
    pub progress: Progress,
}

impl ArmCtx<'_> {
    pub async fn complete_all(&self, gate: &str, bodies: &[Value]) -> Vec<Completion> {
        self.complete_all_at(gate, bodies, self.concurrency).await
    }

    pub async fn complete_all_at(&self, gate: &str, bodies: &[Value], concurrency: usize) -> Vec<Completion> {
        let n = bodies.len();
        let step = (n / 10).max(1);
        let p = self.progress;
        let arm = self.arm;
        let report = move |done: usize| {
            if done.is_multiple_of(step) || done == n {
                p.line(&format!("{arm}: {gate} {done}/{n}"));
            }
        };
        self.client.complete_all(bodies, concurrency, &report).await
    }
}

/// One gate's results on one arm.
#[derive(Debug, Clone, Serialize)]
pub struct GateRun {
    pub gate: &'static str,
    /// One record per item (the responses file).
    pub records: Vec<Value>,
    /// Right/wrong per item (GSM, retrieval).
    pub correct: Vec<bool>,
    /// Value per item (NLL: mean token NLL; NaN when it failed).
    pub values: Vec<f64>,
    pub failed: u64,
    pub summary: Value,
}

impl GateRun {
    pub fn new(gate: &'static str) -> GateRun {
        GateRun { gate, records: Vec::new(), correct: Vec::new(), values: Vec::new(), failed: 0, summary: Value::Null }
    }

    fn record(&mut self, a: &Completion, extra: Value) {
        self.failed += u64::from(a.error.is_some());
        let mut rec = serde_json::to_value(a).unwrap_or(Value::Null);
        if let (Some(m), Value::Object(e)) = (rec.as_object_mut(), extra) {
            m.extend(e);
        }
        self.records.push(rec);
    }

    /// A right/wrong item; a failed request counts as wrong (and is counted).
    pub fn push(&mut self, a: &Completion, ok: bool, extra: Value) {
        self.correct.push(ok && a.error.is_none());
        self.record(a, extra);
    }

    pub fn push_value(&mut self, a: &Completion, v: f64, extra: Value) {
        self.values.push(if a.error.is_none() { v } else { f64::NAN });
        self.record(a, extra);
    }
}

/// The items of every gate, built once from the frozen plan.
#[derive(Debug, Clone, Default)]
pub struct QualityInputs {
    pub gsm: Option<(Vec<GsmItem>, GsmSet)>,
    pub nll: Option<Vec<NllDoc>>,
    pub retrieval: Option<Vec<PasskeyItem>>,
    pub parity: Option<Vec<ParityPrompt>>,
}

/// Builds every gate's items; relative paths are resolved under `base`.
pub fn build_inputs(q: &Qualification, base: &Path) -> Result<QualityInputs, QualityError> {
    let tok = Tok::load(&base.join(&q.tokenizer))?;
    let needs_texts = q.nll.is_some() || q.retrieval.is_some() || q.parity.is_some();
    let mut texts = if needs_texts { Some(Texts::open(&base.join(&q.texts), &q.pattern)?) } else { None };
    let mut inputs = QualityInputs::default();
    if let Some(g) = &q.gsm {
        inputs.gsm = Some(gsm::items(g, q.seed, &tok, base)?);
    }
    if let (Some(spec), Some(t)) = (&q.nll, texts.as_mut()) {
        inputs.nll = Some(nll::documents(spec, q.seed, &tok, t)?);
    }
    if let (Some(spec), Some(t)) = (&q.retrieval, texts.as_mut()) {
        inputs.retrieval = Some(retrieval::items(spec, q.seed, &tok, t)?);
    }
    if let (Some(spec), Some(t)) = (&q.parity, texts.as_mut()) {
        inputs.parity = Some(parity::prompts(spec, q.seed, &tok, t)?);
    }
    Ok(inputs)
}

pub fn write_inputs(inputs: &QualityInputs, dir: &Path) -> Result<(), QualityError> {
    let d = dir.join(INPUTS_DIR);
    if let Some((items, set)) = &inputs.gsm {
        write_jsonl(&d.join(items_file("gsm")), items)?;
        write_json(&d.join(GSM_SET_FILE), set)?;
    }
    if let Some(docs) = &inputs.nll {
        write_jsonl(&d.join(items_file("nll")), docs)?;
    }
    if let Some(items) = &inputs.retrieval {
        write_jsonl(&d.join(items_file("retrieval")), items)?;
    }
    if let Some(p) = &inputs.parity {
        write_jsonl(&d.join(items_file("parity")), p)?;
    }
    Ok(())
}

/// Everything one arm produced.
#[derive(Debug, Clone)]
pub struct ArmRun {
    pub arm: String,
    pub role: ArmRole,
    pub startup_s: Option<f64>,
    /// The server fault (did not start, not healthy); its gates did not run.
    pub error: Option<String>,
    pub gates: Vec<GateRun>,
    pub parity: Option<ParityResult>,
}

impl ArmRun {
    pub fn gate(&self, name: &str) -> Option<&GateRun> {
        self.gates.iter().find(|g| g.gate == name)
    }
}

/// Starts `arm` fresh, runs its gates over `inputs`, stops it, runs its serial
/// reference (when declared) and writes its evidence under `dir/<arm>/`. A server
/// that does not come up is recorded in `ArmRun::error`, not returned as an error.
pub async fn qualify_arm(
    plan: &Plan,
    arm: &Arm,
    inputs: &QualityInputs,
    dir: &Path,
    progress: Progress,
) -> Result<ArmRun, QualityError> {
    let q = plan.qualification.as_ref().ok_or(QualityError::NotConfigured)?;
    let arm_dir = dir.join(&arm.name);
    std::fs::create_dir_all(&arm_dir).map_err(|error| QualityError::Io { path: arm_dir.clone(), error })?;
    let arm_dir = std::fs::canonicalize(&arm_dir).map_err(|error| QualityError::Io { path: arm_dir.clone(), error })?;
    let mut run =
        ArmRun { arm: arm.name.clone(), role: arm.role, startup_s: None, error: None, gates: Vec::new(), parity: None };
    let base_url = arm.base_url();
    super::client::require_loopback(&base_url)?;
    let cmd = plan.arm_command(arm, 0, &arm_dir)?;
    let spawned = cmd.is_some();
    let mut server = Invocation::new(arm, cmd, arm_dir.join(SERVER_LOG_FILE), StudyClock::start())?;
    if spawned {
        progress.line(&format!("{}: starting a fresh server", arm.name));
    }
    match server.spawn() {
        Ok(()) => {}
        Err(e) if e.is_arm_fault() => {
            run.error = Some(e.to_string());
            return Ok(run);
        }
        Err(e) => return Err(e.into()),
    }
    match server.wait_healthy().await {
        Ok(()) => run.startup_s = server.startup().startup_s,
        Err(e) => run.error = Some(e.to_string()),
    }
    let mut http_parity = None;
    if run.error.is_none() {
        let ctx = ArmCtx {
            arm: &arm.name,
            model: &plan.request.model,
            client: GateClient::new(
                &base_url,
                Duration::from_secs_f64(q.request_timeout_s),
                crate::arm::arm_headers(arm, |v| std::env::var(v).ok())?,
            )?,
            concurrency: q.concurrency as usize,
            progress,
        };
        if let (Some(spec), Some(prompts)) = (&q.parity, &inputs.parity)
            && spec.reference.contains_key(&arm.name)
        {
            http_parity = Some(parity::run_http(&ctx, spec, prompts).await);
        }
        if let Some(docs) = &inputs.nll {
            run.gates.push(nll::run(&ctx, docs).await);
        }
        if let (Some(spec), Some(items)) = (&q.retrieval, &inputs.retrieval) {
            run.gates.push(retrieval::run(&ctx, spec, items).await);
        }
        if let (Some(spec), Some((items, set))) = (&q.gsm, &inputs.gsm) {
            run.gates.push(gsm::run(&ctx, spec, items, set).await);
        }
    }
    if let Some(stop) = server.stop().await?.stop {
        write_json(&arm_dir.join(STOP_FILE), &stop)?;
    }
    for g in &run.gates {
        write_jsonl(&arm_dir.join(responses_file(g.gate)), &g.records)?;
        write_json(&arm_dir.join(scores_file(g.gate)), &g.summary)?;
    }
    if let (Some(spec), Some(prompts), Some(http)) = (&q.parity, &inputs.parity, http_parity) {
        let raw = spec.reference.get(&arm.name).cloned().unwrap_or_default();
        let port = match &arm.server {
            crate::plan::Server::Spawn { port, .. } => Some(*port),
            crate::plan::Server::External { .. } => None,
        };
        let dir_s = arm_dir.to_string_lossy();
        let vars = Vars { port, model: &plan.request.model, arm: &arm.name, block: 0, arm_dir: &dir_s, receipts: None };
        let argv =
            raw.iter().map(|a| expand(a, &vars)).collect::<Result<Vec<_>, _>>().map_err(|m| {
                QualityError::Plan(crate::plan::PlanError::invalid("qualification.parity.reference", m))
            })?;
        progress.line(&format!("{}: serial reference, {} prompts in both orders", arm.name, prompts.len()));
        let name = arm.name.clone();
        let report = move |order: &str, done: usize| {
            if done.is_multiple_of(8) || done == prompts.len() {
                progress.line(&format!("{name}: serial {order} {done}/{}", prompts.len()));
            }
        };
        let timeout = Duration::from_secs_f64(q.request_timeout_s);
        let serial = parity::run_serial(&argv, spec, prompts, timeout, &report).await;
        let result = parity::compare(&arm.name, spec, &argv, &http, &serial);
        write_jsonl(&arm_dir.join(responses_file("parity")), &http)?;
        write_jsonl(&arm_dir.join(PARITY_REFERENCE_FILE), &serial)?;
        write_json(&arm_dir.join(scores_file("parity")), &result)?;
        run.parity = Some(result);
    }
    write_json(
        &arm_dir.join(ARM_FILE),
        &json!({"arm": run.arm, "role": run.role, "startup_s": run.startup_s, "error": run.error}),
    )?;
    Ok(run)
}
