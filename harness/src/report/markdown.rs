//! `results/report.md`: what was run (plan hash, arms with argv, cells, blocks and
//! their orders, engine version lines, git revision, sessions with every interruption,
//! resumption and discarded unit), qualification when present, the
//! claims table with every failed rule named, the per-cell summary tables (medians
//! across blocks, vLLM layout; a session cell's per-turn rows, `turns`), every
//! failure on its own line, the figures, and the exact definitions used.
//! Deterministic: no timestamps, fixed number formats, plan and schedule order.
//! Must not compute anything the analysis does not hand it.

use std::fmt::Write;

use serde_json::Value;

use super::text::{cell_table, claims_markdown_with, decision, pval};
use crate::analysis::claims::Analysis;
use crate::analysis::study::Loaded;
use crate::evidence::Session;
use crate::plan::{Arrival, ResolvedLoad, Server};

fn code(s: &str) -> String {
    format!("`{}`", s.replace('`', "'"))
}

fn load_text(load: ResolvedLoad) -> String {
    match load {
        ResolvedLoad::Closed { concurrency } => format!("closed loop, concurrency {concurrency}"),
        ResolvedLoad::Open { rate_rps, arrival: Arrival::Poisson } => {
            format!("open loop, {rate_rps} req/s offered, Poisson arrivals")
        }
        ResolvedLoad::Open { rate_rps, arrival: Arrival::Constant } => {
            format!("open loop, {rate_rps} req/s offered, constant (evenly spaced) arrivals")
        }
        ResolvedLoad::Open { rate_rps, arrival: Arrival::Gamma { burstiness } } => {
            format!("open loop, {rate_rps} req/s offered, gamma arrivals (burstiness {burstiness})")
        }
        ResolvedLoad::Isolated { spacing_ns } => format!("isolated, one request every {} s", spacing_ns as f64 / 1e9),
        ResolvedLoad::Trace { time_scale, .. } => {
            format!("arrivals replayed from a trace file, time scale {time_scale}")
        }
    }
}

fn what_was_run(o: &mut String, l: &Loaded) {
    let plan = &l.frozen.plan;
    let _ = writeln!(o, "## What was run\n");
    let _ = writeln!(o, "- Plan: `plan.toml`, SHA-256 `{}`.", l.frozen.sha256);
    if let Some(d) = &plan.study.description {
        let _ = writeln!(o, "- Study: {} (seed {}): {d}", plan.study.name, plan.study.seed);
    }
    match &l.git {
        Some(g) => {
            let dirty = match g.dirty {
                Some(true) => " (uncommitted changes)",
                Some(false) => " (clean)",
                None => "",
            };
            let _ = writeln!(o, "- Git revision: `{}`{dirty}.", g.revision);
        }
        None => {
            let _ = writeln!(o, "- Git revision: not recorded.");
        }
    }
    let r = &plan.request;
    if plan.prompts.source.is_dataset() {
        let mode = if r.forced() { "forced (ignore_eos)" } else { "natural (EOS may end a request)" };
        let cap = r.max_output_tokens.map_or_else(String::new, |c| format!(", capped at {c}"));
        let _ = writeln!(
            o,
            "- Requests: model `{}`, output {mode}, max_tokens per request from the dataset{cap}, temperature {}{}; \
             prompts: a dataset panel of {} entries{} (lengths per cell in the tables).",
            r.model,
            r.temperature,
            r.extra_body_note(),
            plan.prompts.documents,
            match &plan.prompts.source {
                crate::plan::PanelSource::ShareGpt(g) => format!(" from {}, {}", g.path, g.label()),
                _ => String::new(),
            }
        );
    } else {
        let _ = writeln!(
            o,
            "- Requests: model `{}`, {} output tokens (ignore_eos = {}), temperature {}{}; prompts: {} per length {:?}.",
            r.model,
            r.output_tokens,
            r.ignore_eos,
            r.temperature,
            r.extra_body_note(),
            plan.prompts.documents,
            plan.prompts.lengths
        );
    }
    let _ = writeln!(o, "\n### Arms\n");
    for a in &plan.arms {
        let how = match &a.server {
            Server::Spawn { argv, port } => format!("fresh server per block on port {port}: {}", code(&argv.join(" "))),
            Server::External { url } => format!("external server {url} (never started or stopped by the harness)"),
        };
        let _ = writeln!(o, "- **{}** ({}): {how}", a.name, a.role.as_str());
        let external = matches!(a.server, Server::External { .. });
        let first = l.units.iter().find(|u| u.status.arm == a.name);
        if let Some(u) = first {
            if let Some(sha) = &u.program_sha256 {
                let _ = writeln!(o, "  - program SHA-256 (block {}): `{sha}`", u.status.block);
            }
            if u.identity_recorded {
                let version = u.server_version.as_deref().map_or("no answer".to_string(), code);
                let models =
                    if u.served_models.is_empty() { "no answer".to_string() } else { u.served_models.join(", ") };
                let _ =
                    writeln!(o, "  - server says (block {}): /version {version}; /v1/models {models}", u.status.block);
            }
            let checked: Vec<_> =
                l.units.iter().filter(|u| u.status.arm == a.name).filter_map(|u| u.identity_checks.as_ref()).collect();
            if let Some(first) = checked.first() {
                let failed = checked.iter().flat_map(|c| c.iter()).filter(|c| !c.ok).count();
                let kinds: Vec<&str> = first.iter().map(|c| c.expected.as_str()).collect();
                let _ = writeln!(
                    o,
                    "  - identity checks in {} server start(s): {} ({}): {}",
                    checked.len(),
                    if failed == 0 { "all passed".to_string() } else { format!("{failed} FAILED") },
                    first.len(),
                    kinds.join("; ")
                );
            }
            for m in l.units.iter().filter(|u| u.status.arm == a.name) {
                if let Some(line) = m.memory.line() {
                    let _ = writeln!(o, "  - memory (block {}): {line}", m.status.block);
                }
            }
            // An external server's log and start are its owner's: the harness saw neither.
            if !external {
                for v in &u.version_lines {
                    let _ = writeln!(o, "  - version line (block {} server.log): {}", u.status.block, code(v));
                }
                if u.version_lines.is_empty() {
                    let _ = writeln!(o, "  - no version line in server.log (block {})", u.status.block);
                }
            }
        }
        let starts: Vec<String> = l
            .units
            .iter()
            .filter(|u| u.status.arm == a.name)
            .map(|u| u.startup_s.map_or("n/a".into(), |s| format!("{s:.2}")))
            .collect();
        if external {
            let _ = writeln!(
                o,
                "  - health answered after (s), per block: {} (first poll to the first 200; the server was already \
                 running, so this is no cold start, and its log is not in the evidence)",
                starts.join(", ")
            );
        } else {
            let _ = writeln!(o, "  - cold start to healthy (s), per block: {}", starts.join(", "));
        }
    }
    let _ = writeln!(o, "\n### Cells\n");
    let _ =
        writeln!(o, "| cell | kind | load | route | requests | input tokens |\n| --- | --- | --- | --- | --- | --- |");
    for c in &l.resolved {
        let _ = writeln!(
            o,
            "| {} | {} | {}{} | {} | {} | {} |",
            c.name,
            c.kind.as_str(),
            load_text(c.load),
            c.cap_note(),
            c.body.endpoint.route(),
            c.count,
            c.input_tokens.map_or_else(|| "dataset lengths".to_string(), |l| l.to_string())
        );
    }
    let _ = writeln!(o, "\n### Blocks and their orders\n");
    for b in &l.schedule.blocks {
        let status: Vec<String> = l
            .units
            .iter()
            .filter(|u| u.status.block == b.index && !u.status.status.is_completed())
            .map(|u| {
                format!(
                    "{} {}{}",
                    u.status.arm,
                    u.status.status,
                    u.status.detail.as_deref().map_or(String::new(), |d| format!(" ({d})"))
                )
            })
            .collect();
        let faults = if status.is_empty() { String::new() } else { format!("; arm faults: {}", status.join(", ")) };
        let _ = writeln!(
            o,
            "- block {} ({}): arms {}; cells {}{faults}",
            b.index,
            b.kind.as_str(),
            b.arms.join(" -> "),
            b.cells.join(" -> ")
        );
    }
}

/// Every session of the study: interruptions, resumptions and what each discarded.
fn sessions(o: &mut String, sessions: &[Session], executor: Option<&crate::evidence::ExecutorRecord>) {
    let _ = writeln!(o, "\n### Sessions\n");
    if let Some(e) = executor {
        let _ = writeln!(
            o,
            "The blocks ran as Slurm array tasks: {} coordinator session(s) (pilots, inputs, qualification, the \
             dispatch and the merge) and {} worker session(s), one per task that started, each on its own clock; \
             timestamps are compared only within a server invocation. Files of a task that failed were moved \
             aside to `discarded/` (not evidence: never read by the analysis) before its block ran again.\n",
            sessions.len() - e.tasks.len(),
            e.tasks.len()
        );
    } else if sessions.len() > 1 {
        let _ = writeln!(
            o,
            "The study was interrupted and resumed (`harness run PLAN --resume DIR`): {} sessions. Completed server \
             invocations were verified by hash (`unit.json`) and kept; partial ones were moved aside to \
             `discarded/` (not evidence: never read by the analysis) and run again with fresh servers. Each \
             session has its own clock; timestamps are compared only within a server invocation.\n",
            sessions.len()
        );
    }
    for s in sessions {
        let task = executor.and_then(|e| e.tasks.iter().find(|t| t.session == s.session));
        let resumed = match task {
            Some(t) => format!(
                " (worker of block {}, task {}_{} on {}{})",
                t.block,
                t.array_job_id,
                t.array_task,
                t.hostname,
                if t.kept { "" } else { ", not kept" }
            ),
            None if s.resumed => " (resumed)".into(),
            None => String::new(),
        };
        let units = &s.units_run;
        let qualified = if s.qualification_run { "qualification, " } else { "" };
        let _ = writeln!(
            o,
            "- session {}{resumed}: {}; ran {qualified}{} server invocation(s){}",
            s.session,
            s.state,
            units.len(),
            if units.is_empty() { String::new() } else { format!(": {}", units.join(", ")) }
        );
        for d in &s.discarded {
            let _ = writeln!(o, "  - discarded {} ({} files) to `{}/`: {}", d.unit, d.files.len(), d.dir, d.reason);
        }
    }
}

fn qualification(o: &mut String, q: &Value) {
    let _ = writeln!(o, "## Qualification\n");
    let _ = writeln!(o, "`results/qualification.json` is present; evidence.json includes it verbatim.\n");
    if let Some(arms) = q.get("arms").and_then(Value::as_array) {
        for a in arms {
            let name = a.get("arm").and_then(Value::as_str).unwrap_or("?");
            let verdict = match a.get("qualified").and_then(Value::as_bool) {
                Some(true) => "qualified",
                Some(false) => "NOT qualified: its timing claims are blocked",
                None => "no verdict",
            };
            let _ = writeln!(o, "- arm **{name}**: {verdict}");
            for r in a.get("reasons").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                let _ = writeln!(o, "  - {r}");
            }
        }
    }
    for c in q.get("comparisons").and_then(Value::as_array).into_iter().flatten() {
        let get = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("?");
        let pass = if c.get("pass").and_then(Value::as_bool) == Some(true) { "pass" } else { "fail" };
        let _ = writeln!(o, "- {} {} vs {}: {pass}; {}", get("gate"), get("candidate"), get("control"), get("detail"));
    }
    for p in q.get("parity").and_then(Value::as_array).into_iter().flatten() {
        let arm = p.get("arm").and_then(Value::as_str).unwrap_or("?");
        let pass = if p.get("pass").and_then(Value::as_bool) == Some(true) { "pass" } else { "fail" };
        let rule = p.get("rule").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(o, "- parity {arm}: {pass}; {rule}");
    }
    for n in q.get("notes").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        let _ = writeln!(o, "- note: {n}");
    }
    o.push('\n');
}

/// Which validity rule blocked claims (`analysis.blocking`).
fn blocking_text(b: crate::plan::Blocking) -> &'static str {
    match b {
        crate::plan::Blocking::Study => {
            "Blocking: study level (`analysis.blocking = \"study\"`, the reference method): a failed request in \
             any confirmation cell of any confirmation block blocks every claim."
        }
        crate::plan::Blocking::Cell => {
            "Blocking: cell level (`analysis.blocking = \"cell\"`): a failed request blocks only the claims of its \
             own cell and arms; other claims stand."
        }
    }
}

fn claims(o: &mut String, l: &Loaded, a: &Analysis) {
    let _ = writeln!(o, "## Claims\n");
    if a.hypotheses.is_empty() {
        let _ = writeln!(o, "The plan has no hypotheses: nothing is tested.\n");
        return;
    }
    let _ = writeln!(
        o,
        "One row per hypothesis of the plan's family ({} hypotheses, Holm at alpha {}). Effects are per \
         confirmation block (blocks 0 to {}), positive = candidate better. A failed rule means \"not \
         supported\" only: it is never evidence that the arms perform alike.\n",
        a.hypotheses.len(),
        a.alpha.map_or("n/a".into(), |x| x.to_string()),
        a.confirmation_blocks.saturating_sub(1)
    );
    let _ = writeln!(o, "{}\n", blocking_text(a.blocking));
    let power = super::power::claims_column(l, a);
    if power.is_some() {
        let _ = writeln!(
            o,
            "The last column is this study's power for that claim (see Power of this study): the smallest true \
             effect its rule supports with 80% probability at these blocks, given the pilots' noise; a claim not \
             supported reads against it.\n"
        );
    }
    o.push_str(&claims_markdown_with(a, power.as_ref()));
    let _ = writeln!(o, "\nPaired values per block (control -> candidate):\n");
    for h in &a.hypotheses {
        let pairs: Vec<String> = h
            .blocks
            .iter()
            .map(|b| {
                let v = |x: Option<f64>| x.map_or("n/a".into(), |x| format!("{x:.4}"));
                format!("b{} {} -> {}", b.block, v(b.control), v(b.candidate))
            })
            .collect();
        let _ = writeln!(o, "- {} ({}): {}", h.name, h.metric.as_str(), pairs.join("; "));
        let _ = writeln!(o, "  - decision: {}", decision(h));
        if !h.tested {
            let _ = writeln!(o, "  - not testable as planned: entered Holm with p = 1");
        }
    }
    o.push('\n');
}

fn cells(o: &mut String, l: &Loaded, a: &Analysis) {
    let _ = writeln!(o, "## Per-cell summary\n");
    let _ = writeln!(
        o,
        "Each value is the median across the blocks of that arm (sample median; requests are never pooled \
         across blocks); failed requests are summed. Descriptive cells are reported here and never tested. \
         Every unpooled value is in [matrix.csv](matrix.csv) (and matrix.parquet): one row per (block, arm, \
         cell).\n"
    );
    for c in &l.resolved {
        let arms: Vec<_> = a.cells.iter().filter(|m| m.cell == c.name && !m.blocks.is_empty()).collect();
        let _ = writeln!(o, "### {} ({}, {}{})\n", c.name, c.kind.as_str(), load_text(c.load), c.cap_note());
        if arms.is_empty() {
            let _ = writeln!(o, "No summary: the cell never ran.\n");
            continue;
        }
        let _ = writeln!(o, "```\n{}```\n", cell_table(&arms));
        super::turns::markdown(o, &l.cells, &c.name);
    }
}

/// Each unit's cells as its server's own `/metrics` saw them (a receipt, never a
/// measure: the claims use the client's records only).
fn server_metrics(o: &mut String, l: &Loaded) {
    let rows: Vec<String> = l
        .units
        .iter()
        .flat_map(|u| {
            u.server_metrics.iter().map(move |m| {
                let n = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x}"));
                let kv = m.kv_usage_max.map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0));
                format!(
                    "{:>5}  {:<20} {:<20} {:>7}  {:>11}  {:>11}  {:>11}  {:>11}",
                    u.status.block,
                    u.status.arm,
                    m.cell,
                    m.scrapes,
                    n(m.preemptions),
                    kv,
                    n(m.running_max),
                    n(m.waiting_max)
                )
            })
        })
        .collect();
    let _ = writeln!(
        o,
        "## Server metrics per cell
"
    );
    if rows.is_empty() {
        let _ = writeln!(
            o,
            "No scrape of any server's /metrics during a cell.
"
        );
        return;
    }
    let _ = writeln!(
        o,
        "From each server's own /metrics, scraped once a second during the cell (scrapes.jsonl): the increase \
         of its preemption counter over the cell, and the highest KV-cache usage and running and waiting \
         request counts seen (vLLM's names; this engine uses the same). A receipt beside the client's \
         measures, never part of a claim; `-` where the server has no such metric.\n"
    );
    let _ = writeln!(
        o,
        "```\n{:>5}  {:<20} {:<20} {:>7}  {:>11}  {:>11}  {:>11}  {:>11}\n{}\n```\n",
        "block",
        "arm",
        "cell",
        "scrapes",
        "preemptions",
        "KV use max",
        "running max",
        "waiting max",
        rows.join("\n")
    );
}

fn failures(o: &mut String, l: &Loaded) {
    let _ = writeln!(o, "## Failures\n");
    let faults: Vec<_> = l.units.iter().filter(|u| !u.status.status.is_completed()).collect();
    for u in &faults {
        let detail = u.status.detail.as_deref().unwrap_or("");
        let _ = writeln!(o, "- server: block {}, arm {}: {} {}", u.status.block, u.status.arm, u.status.status, detail);
    }
    for f in &l.failures {
        let _ = writeln!(
            o,
            "- request: block {}, arm {}, cell {}, request index {}: {} ({})",
            f.block, f.arm, f.cell, f.index, f.class, f.detail
        );
    }
    if faults.is_empty() && l.failures.is_empty() {
        let _ = writeln!(o, "None: every server invocation completed and every request completed validly.");
    }
    o.push('\n');
    let _ = writeln!(o, "## Summary check\n");
    if l.summary_mismatches.is_empty() {
        let _ = writeln!(
            o,
            "All {} stored per-cell summaries equal their recomputation from the raw request records.\n",
            l.summaries_checked
        );
    } else {
        for m in &l.summary_mismatches {
            let _ = writeln!(o, "- WARNING: {m}");
        }
        o.push('\n');
    }
}

const DEFINITIONS: &str = "## Definitions\n\n\
- Clock: one monotonic client clock, nanoseconds since the study start; server times are never subtracted from client times.\n\
- Token-bearing event: an SSE event carrying at least one token; role-only, empty and usage-only events are not tokens.\n\
- TTFT: first token-bearing event minus HTTP send; and, separately, minus intended arrival.\n\
- TPOT: per request, (last token-bearing event - first) / (output tokens - 1); p50/p95/p99 across requests, not a percentile of individual gaps.\n\
- E2E latency: end of stream ([DONE]) minus HTTP send; and, separately, minus intended arrival (closed-loop requests are all intended at the cell start, so this includes the wait for the client semaphore).\n\
- ITL: intervals between consecutive token-bearing events of a request, pooled over the cell's valid requests.\n\
- Engine TPOT (`engine_tpot_ms`, arms with receipts): from the server's step receipts, not the client's clock: the cell's decode-only steps, each timed from the step before, summed and divided by their decode tokens.\n\
- Throughput: valid completed requests (or their output tokens) divided by the whole observation interval, from the first intended arrival to the last completion, drain included.\n\
- Percentiles: nearest rank, over valid completed requests only; failures are counted beside them, never dropped.\n\
- Unit of replication: the block (a fresh server per arm per block). Requests and tokens are never replicates.\n\
- Effect per block, paired: throughput e = candidate / control - 1; latency e = 1 - candidate / control (the p95, or the mean for `e2e_mean` / `ttft_mean`). Positive means better.\n\
- Sign test: exact and one-sided; wins are blocks with e > 0, ties are non-wins; p = P(Binomial(n, 1/2) >= wins).\n\
- Holm: step-down over the plan's whole hypothesis family at its alpha; adjusted p = max over i <= j of min(1, (m - i + 1) p_(i)). A hypothesis that cannot be tested as planned enters with p = 1.\n\
- Median screen: the sample median of the block effects must reach the hypothesis's threshold, in addition to the Holm test.\n\
- Median interval: distribution-free, [x_(k), x_(n-k+1)] of the ordered effects with the largest k whose exact coverage 1 - 2 P(Binomial(n, 1/2) <= k - 1) reaches the target; the coverage printed is exact (with 10 blocks, the 2nd and 9th effects give 97.8516%).\n\
- Decision: supported (no failure, Holm p <= alpha and median >= threshold); not supported, naming each failed rule; or blocked by failed requests, arm faults or a failed qualification, with the numbers kept beside it.\n";

/// Where peers' metric names differ from ours (after the definitions).
const PEER_NAMES: &str = "\n### Names in other tools\n\n\
- vLLM `bench serve`: TTFT, TPOT, ITL and E2EL are defined as here (its median interpolates; ours is the nearest-rank p50).\n\
- guidellm: its \"time per output token\" is the time from send to the last token, TTFT included, divided by the output tokens; our TPOT excludes the first token (guidellm's \"inter-token latency\", (latency - TTFT) / (output tokens - 1), is the closest match).\n\
- AIPerf: its \"inter token latency\" is our TPOT (per request, first token excluded); our ITL (gaps between token-bearing events, pooled) is its \"inter chunk latency\".\n";

/// What `harness plan check` warns about this plan (`Plan::warnings`), when anything.
fn plan_warnings(o: &mut String, l: &Loaded) {
    let warnings = l.frozen.plan.warnings();
    if warnings.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Plan warnings\n");
    let _ = writeln!(o, "`harness plan check` warns that this plan cannot deliver everything it asks for:\n");
    for w in warnings {
        let _ = writeln!(o, "- warning: {w}");
    }
    o.push('\n');
}

/// The whole of `report.md`.
pub fn render(l: &Loaded, a: &Analysis, figures: &[String]) -> String {
    let hash: String = l.frozen.sha256.chars().take(12).collect();
    let mut o = format!("# {}: study report (plan {hash})\n\n", l.frozen.plan.study.name);
    let _ = writeln!(
        o,
        "Generated from the raw evidence of this directory by `harness report` (byte-identical when rerun). \
         Every number below is recomputed from `raw/`; the full derivation is in [evidence.json](evidence.json).\n"
    );
    super::sequential::section(&mut o, l);
    super::power::section(&mut o, l);
    super::noise::section(&mut o, l);
    super::tuning::markdown(&mut o, &l.frozen.plan, a, &l.resolved);
    what_was_run(&mut o, l);
    if !l.sessions.is_empty() {
        sessions(&mut o, &l.sessions, l.executor.as_ref());
    }
    super::machines::section(&mut o, l, a);
    o.push('\n');
    plan_warnings(&mut o, l);
    if let Some(q) = &l.qualification {
        qualification(&mut o, q);
    }
    claims(&mut o, l, a);
    super::floor::markdown(&mut o, l);
    cells(&mut o, l, a);
    server_metrics(&mut o, l);
    super::observer::markdown(&mut o, l, a);
    failures(&mut o, l);
    let _ = writeln!(o, "## Figures\n");
    if figures.is_empty() {
        let _ = writeln!(o, "No figures: no cell has measurements.\n");
    }
    for f in figures.iter().filter(|f| f.ends_with(".svg")) {
        let stem = f.trim_end_matches(".svg");
        let _ = writeln!(o, "![{stem}](figures/{f})\n\n(PNG: [figures/{stem}.png](figures/{stem}.png))\n");
    }
    o.push_str(DEFINITIONS);
    let n = a.confirmation_blocks;
    let smallest = 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    let _ = writeln!(
        o,
        "- With n = {n} confirmation blocks the smallest one-sided sign-test p is 2^-n = {}.",
        pval(smallest)
    );
    o.push_str(PEER_NAMES);
    o
}
