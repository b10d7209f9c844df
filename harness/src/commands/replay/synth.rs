//! Synthetic evidence for replay's tests and benchmark: a self-consistent evidence
//! directory without any server. The plan and inputs are real (written through
//! `trace`); the request records and receipts are simulated (closed-loop slots,
//! open-loop arrivals, one token per event plus a usage-only event, occasional
//! preemptions); `results/` comes from the same code `harness run` uses
//! (`metrics::summarize_cell` for the stored summaries, `report::build` for the
//! matrix and evidence.json) and the manifest from `evidence::write_manifest`, so
//! the archived numbers come from the analysis path and replay checks them
//! independently. The layout is what `harness run` writes now: a completion record
//! `unit.json` per unit (the `run::UnitRecord` format), `session` in every
//! `arm_outcome.json`, and `run.json` `harness-run/2` with one finished session. Unlike the rest of `replay`, this module calls the analysis path
//! on purpose. Must not start processes or touch anything outside `dir`.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::evidence::UnitStatus;
use crate::evidence::{self, Evidence, GitInfo, ManifestFile, write_json, write_jsonl};
use crate::evidence::{
    ARM_OUTCOME_FILE, CellOutcome, RunRecord, RunUnit, STARTUP_FILE, Session, StartupRecord, UNIT_FILE, UNIT_FORMAT,
    UnitOutcome, UnitRecord,
};
use crate::plan::{CellKind, ResolvedLoad, freeze};
use crate::record::{Failure, RecordKey, RequestRecord, StreamEvent, Usage};

/// Writes `unit_dir/unit.json` over the unit's files (its flat directory and `owned`).
fn unit_record(
    root: &Path,
    unit_dir: &Path,
    owned: &[PathBuf],
    unit: &str,
    block: u32,
    status: &str,
) -> Result<(), String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(unit_dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != UNIT_FILE))
        .collect();
    paths.extend(owned.iter().filter(|p| p.is_file()).cloned());
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let rel = p.strip_prefix(root).unwrap_or(&p).to_string_lossy().replace('\\', "/");
        files.push(ManifestFile { path: rel, bytes: bytes.len() as u64, sha256: crate::evidence::sha256_hex(&bytes) });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let record = UnitRecord {
        format: UNIT_FORMAT.into(),
        unit: unit.into(),
        block: Some(block),
        session: 0,
        status: status.into(),
        files,
    };
    write_json(&unit_dir.join(UNIT_FILE), &record).map_err(|e| e.to_string())
}

/// The size and shape of a synthetic study.
#[derive(Debug, Clone)]
pub struct SynthSpec {
    pub study: String,
    /// Confirmation blocks (one descriptive block follows).
    pub blocks: u32,
    /// Requests per confirmation cell (three cells).
    pub requests: u64,
    /// Requests of the descriptive cell.
    pub descriptive_requests: u64,
    pub output_tokens: u32,
    /// One timeout in every descriptive cell of the first arm.
    pub failures: bool,
    /// Make this (block, arm index) a server that died before its last cell.
    pub fault: Option<(u32, usize)>,
    /// Step time of each arm (cand, cand2, base) in percent of the control's; all 100
    /// makes an A/A study (the arms differ only in their random draws).
    pub speeds_percent: [u64; 3],
    /// `analysis.blocking` written into the plan (`None`: the key is left out).
    pub blocking: Option<&'static str>,
    /// One timeout (request index 1) in this (block, arm index, confirmation cell).
    pub confirmation_failure: Option<(u32, usize, &'static str)>,
}

impl SynthSpec {
    /// A small study (seconds to write, a few thousand events).
    pub fn small() -> SynthSpec {
        SynthSpec {
            study: "synth-small".into(),
            blocks: 6,
            requests: 12,
            descriptive_requests: 10,
            output_tokens: 8,
            failures: true,
            fault: None,
            speeds_percent: [95, 99, 100],
            blocking: None,
            confirmation_failure: None,
        }
    }

    /// Seed-000 scale: 3 arms x 11 blocks = 33 server invocations, 40,350 requests,
    /// about 5.2 million stream events.
    pub fn seed000() -> SynthSpec {
        SynthSpec {
            study: "synth-seed000".into(),
            blocks: 10,
            requests: 400,
            descriptive_requests: 1450,
            output_tokens: 128,
            failures: true,
            fault: None,
            speeds_percent: [95, 99, 100],
            blocking: None,
            confirmation_failure: None,
        }
    }
}

const ARMS: [(&str, &str, bool); 3] =
    [("cand", "candidate", true), ("cand2", "candidate", true), ("base", "control", false)];

fn plan_text(s: &SynthSpec) -> String {
    let mut t = format!(
        "# Synthetic study written by harness::commands::replay::synth (no server ever ran).\n[study]\nname = \"{}\"\nseed = 7\n\n\
         [request]\nmodel = \"synth\"\noutput_tokens = {}\n\n[prompts]\nsource = \"random\"\nmin_token_id = 0\n\
         max_token_id = 255\nlengths = [32]\ndocuments = 8\n\n[warmup]\nprompts = 2\n\n[timing]\nsettle_s = 0.5\n\
         request_timeout_s = 60.0\ndrain_timeout_s = 60.0\n\n[blocks]\ncount = {}\ndescriptive = 1\n\
         arm_order = \"latin\"\ncell_order = \"alternate\"\n",
        s.study, s.output_tokens, s.blocks
    );
    for (i, (name, role, receipts)) in ARMS.iter().enumerate() {
        t.push_str(&format!(
            "\n[[arms]]\nname = \"{name}\"\nrole = \"{role}\"\nargv = [\"engine\", \"serve\", \"--port\", \"{{port}}\"{}]\nport = {}\n",
            if *receipts { ", \"--receipts\", \"{receipts}\"" } else { "" },
            18500 + i
        ));
        if *receipts {
            t.push_str("receipts = \"{arm_dir}/receipts.jsonl\"\n");
        }
    }
    for (name, load) in [
        ("closed-32", "load = \"closed\"\nconcurrency = 32"),
        ("open-near", "load = \"open\"\nrate = 40.0"),
        ("open-low", "load = \"open\"\nrate = 10.0"),
    ] {
        t.push_str(&format!(
            "\n[[cells]]\nname = \"{name}\"\nkind = \"confirmation\"\n{load}\ncount = {}\n",
            s.requests
        ));
    }
    t.push_str(&format!(
        "\n[[cells]]\nname = \"open-desc\"\nkind = \"descriptive\"\nload = \"open\"\nrate = 20.0\ncount = {}\n",
        s.descriptive_requests
    ));
    t.push_str("\n[analysis]\nalpha = 0.05\n");
    if let Some(b) = s.blocking {
        t.push_str(&format!("blocking = \"{b}\"\n"));
    }
    for (name, metric, cell, cand) in [
        ("closed-throughput", "throughput_rps", "closed-32", "cand"),
        ("near-e2e", "e2e_p95_intended", "open-near", "cand"),
        ("cand2-closed-throughput", "throughput_rps", "closed-32", "cand2"),
    ] {
        t.push_str(&format!(
            "\n[[hypotheses]]\nname = \"{name}\"\nmetric = \"{metric}\"\ncell = \"{cell}\"\ncandidate = \"{cand}\"\n\
             control = \"base\"\nthreshold = 0.01\n"
        ));
    }
    t
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// What one unit's simulated server did.
struct UnitSim {
    records: Vec<(String, Vec<RequestRecord>)>,
    receipts: String,
}

fn simulate(
    spec: &SynthSpec,
    plan: &crate::plan::Plan,
    block: &crate::plan::ScheduledBlock,
    arm_i: usize,
    t0: &mut u64,
) -> UnitSim {
    let (arm, _, _) = ARMS[arm_i];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(block.index) << 8) ^ arm_i as u64);
    let speed = spec.speeds_percent[arm_i]; // percent of the control's step time
    let traces = crate::trace::generate_traces(plan).unwrap_or_default();
    let resolved = plan.resolved_cells().unwrap_or_default();
    let mut receipts = String::new();
    let mut step = 0u64;
    let mut push = |t: u64, adm: &[String], res: &[String], pre: &[String]| {
        let j = |v: &[String]| serde_json::to_string(v).unwrap_or_default();
        receipts.push_str(&format!(
            "{{\"step\":{step},\"t_ns\":{t},\"admitted\":{},\"resumed\":{},\"preempted\":{},\"finished\":[],\"scheduled\":1,\
             \"prefill_tokens\":32,\"prefix_hit_tokens\":0,\"decode_tokens\":0,\"running\":1,\"waiting\":0,\
             \"kv_blocks_used\":2,\"kv_blocks_total\":2048}}\n",
            j(adm), j(res), j(pre)
        ));
        step += 1;
    };
    push(*t0, &["cmpl-1-0".to_string(), "cmpl-1-1".to_string()], &[], &[]);
    let mut next_id = 2u64;
    let mut out = Vec::new();
    for (ci, cell) in block.cells.iter().enumerate() {
        if spec.fault == Some((block.index, arm_i)) && ci + 1 == block.cells.len() {
            break;
        }
        let (Some(rc), Some(tr)) = (resolved.iter().find(|c| &c.name == cell), traces.iter().find(|t| &t.cell == cell))
        else {
            continue;
        };
        let start = *t0 + 500_000_000;
        let mut slots: Vec<u64> = match rc.load {
            ResolvedLoad::Closed { concurrency } => vec![start; concurrency as usize],
            _ => Vec::new(),
        };
        let mut records = Vec::with_capacity(tr.entries.len());
        let mut end = start;
        for e in &tr.entries {
            let intended = start + e.offset_ns;
            let dispatch = intended + rng.between(5_000, 60_000);
            let admitted = match slots.iter_mut().min() {
                Some(slot) => dispatch.max(*slot),
                None => dispatch,
            };
            let send = admitted + rng.between(20_000, 80_000);
            let id = format!("cmpl-{next_id}");
            next_id += 1;
            let mut t = send + rng.between(15_000_000, 25_000_000) * speed / 100;
            let mut events = Vec::with_capacity(spec.output_tokens as usize + 1);
            for k in 0..spec.output_tokens {
                if k > 0 {
                    t += rng.between(1_500_000, 2_500_000) * speed / 100;
                }
                events.push(StreamEvent { t_ns: t, tokens: 1, token_ids: Some(vec![(rng.next() % 256) as u32]) });
            }
            t += 20_000;
            events.push(StreamEvent { t_ns: t, tokens: 0, token_ids: None });
            let done = t + 10_000;
            let injected = spec.confirmation_failure == Some((block.index, arm_i, cell.as_str()));
            let timeout =
                e.index == 1 && (injected || (spec.failures && arm_i == 0 && rc.kind == CellKind::Descriptive));
            let adm = [id.clone()];
            if e.index % 50 == 7 {
                push(send + 100_000, &adm, &[], &[]);
                push(send + 300_000, &[], &[], &adm);
                push(send + 600_000, &[], &adm, &[]);
            } else {
                push(send + 100_000, &adm, &[], &[]);
            }
            let key = RecordKey { cell, block: block.index, arm, index: e.index };
            let mut r = RequestRecord {
                dispatch_ns: Some(dispatch),
                admitted_ns: Some(admitted),
                send_ns: Some(send),
                headers_ns: Some(send + 200_000),
                events,
                done_ns: Some(done),
                status: Some(200),
                failure: None,
                usage: Some(Usage {
                    prompt_tokens: 32,
                    completion_tokens: spec.output_tokens,
                    total_tokens: 32 + spec.output_tokens,
                }),
                finish_reason: Some("length".into()),
                server_request_id: Some(id),
                ..RequestRecord::planned(key, e.prompt, (32, spec.output_tokens), intended)
            };
            if timeout {
                r.events.truncate(2);
                r.done_ns = None;
                r.usage = None;
                r.finish_reason = None;
                r.failure = Some(Failure::Timeout { after_ns: 60_000_000_000 });
            }
            if let Some(slot) = slots.iter_mut().min() {
                *slot = done;
            }
            end = end.max(done);
            records.push(r);
        }
        *t0 = end + 100_000_000;
        out.push((cell.clone(), records));
    }
    UnitSim { records: out, receipts }
}

/// The wall-clock start of a synthetic study's one session (2026-12-04 08:00 UTC).
pub const SYNTH_STARTED_UNIX_MS: u64 = 1_796_371_200_000;

/// Writes a complete synthetic evidence directory at `dir` (which must be empty or
/// absent); returns the number of request records written.
pub fn generate(dir: &Path, spec: &SynthSpec) -> Result<u64, String> {
    let text = plan_text(spec);
    let frozen = freeze(text.clone().into_bytes()).map_err(|e| format!("synthetic plan: {e}"))?;
    let plan = &frozen.plan;
    let ev = Evidence::create(dir, false).map_err(|e| e.to_string())?;
    evidence::write_bytes(&ev.plan_path(), text.as_bytes()).map_err(|e| e.to_string())?;
    let panel = crate::trace::build_panel(plan, dir, None).map_err(|e| e.to_string())?;
    crate::trace::write_inputs(&ev.inputs_dir(), plan, &frozen.sha256, Some(&panel)).map_err(|e| e.to_string())?;
    let mut t0 = 1_000_000_000u64;
    let (mut summaries, mut units, mut units_run, mut total) = (Vec::new(), Vec::new(), Vec::new(), 0u64);
    for block in &plan.schedule().blocks {
        for arm in &block.arms {
            let Some(arm_i) = ARMS.iter().position(|a| a.0 == arm) else { continue };
            let sim = simulate(spec, plan, block, arm_i, &mut t0);
            let unit_dir = ev.unit_dir(block.index, arm);
            let faulted = spec.fault == Some((block.index, arm_i));
            let mut cells = Vec::new();
            for (cell, records) in &sim.records {
                total += records.len() as u64;
                write_jsonl(&ev.requests_path(block.index, arm, cell), records).map_err(|e| e.to_string())?;
                let summary = match crate::metrics::summarize_cell_with_slo(records, plan.slo.as_ref()) {
                    Ok(mut s) => {
                        if ARMS[arm_i].2 {
                            let steps = crate::metrics::parse_receipts(&sim.receipts).map_err(|e| e.to_string())?;
                            s.add_engine_decode(records, &steps);
                        }
                        serde_json::to_value(&s).unwrap_or_default()
                    }
                    Err(e) => json!({"cell": cell, "block": block.index, "arm": arm, "error": e.to_string()}),
                };
                write_json(&ev.cell_summary_path(block.index, arm, cell), &summary).map_err(|e| e.to_string())?;
                summaries.push(summary);
                let failed = records.iter().filter(|r| !r.is_valid()).count();
                cells.push(CellOutcome {
                    cell: cell.clone(),
                    status: "completed".into(),
                    requests: records.len() as u64,
                    completed: (records.len() - failed) as u64,
                    failed: failed as u64,
                    start_ns: None,
                    end_ns: None,
                });
            }
            if ARMS[arm_i].2 {
                evidence::write_bytes(&unit_dir.join("receipts.jsonl"), sim.receipts.as_bytes())
                    .map_err(|e| e.to_string())?;
            }
            let (status, detail) = if faulted {
                (UnitStatus::ServerDied, Some("synthetic: killed by signal 9".to_string()))
            } else {
                (UnitStatus::Completed, None)
            };
            let outcome =
                UnitOutcome { status, detail: detail.clone(), cells, ..UnitOutcome::new(block.index, arm, 0) };
            write_json(&unit_dir.join(ARM_OUTCOME_FILE), &outcome).map_err(|e| e.to_string())?;
            let startup =
                StartupRecord { startup_s: Some(0.5), ok: true, ..StartupRecord::new(block.index, arm, "spawn") };
            write_json(&unit_dir.join(STARTUP_FILE), &startup).map_err(|e| e.to_string())?;
            let owned: Vec<_> = sim.records.iter().map(|(c, _)| ev.cell_summary_path(block.index, arm, c)).collect();
            unit_record(
                ev.root(),
                &unit_dir,
                &owned,
                &format!("b{}/{arm}", block.index),
                block.index,
                status.as_str(),
            )?;
            units.push(RunUnit { block: block.index, arm: arm.clone(), status, detail, session: 0 });
            units_run.push(format!("b{}/{arm}", block.index));
        }
    }
    write_json(&ev.results_dir().join("summaries.json"), &summaries).map_err(|e| e.to_string())?;
    let git = GitInfo { revision: "synthetic".into(), dirty: None };
    let session = Session {
        session: 0,
        state: crate::evidence::SessionState::Finished,
        resumed: false,
        pid: None,
        // A fixed wall-clock start, so the per-request table's wall times are numbers.
        started_unix_ms: Some(SYNTH_STARTED_UNIX_MS),
        finished_unix_ms: None,
        harness_version: env!("CARGO_PKG_VERSION").into(),
        git: Some(git.clone()),
        discarded: Vec::new(),
        qualification_run: false,
        units_run,
        host: None,
        client_cpus: None,
    };
    // The body of every panel entry of each kind the cells send, as `run` records them.
    let body = |k: crate::plan::BodyKind, p| crate::evidence::sha256_hex(&crate::load::stream_body(plan, k, p));
    let bodies: std::collections::BTreeMap<String, Vec<String>> =
        plan.body_kinds().into_iter().map(|k| (k.key(), panel.prompts.iter().map(|p| body(k, p)).collect())).collect();
    let run = RunRecord {
        started_unix_ms: Some(SYNTH_STARTED_UNIX_MS),
        request_body_sha256: crate::evidence::BodyHashes::ByKind(bodies),
        sessions: vec![session],
        units,
        ..RunRecord::new(&plan.study.name, &frozen.sha256, git.clone())
    };
    run.write(ev.root()).map_err(|e| e.to_string())?;
    crate::report::build(ev.root()).map_err(|e| format!("report: {e}"))?;
    evidence::write_manifest(ev.root(), &plan.study.name, &frozen.sha256, git).map_err(|e| e.to_string())?;
    Ok(total)
}
