//! The human-readable account `harness plan check` prints: settings, cells, the
//! hypothesis family, derived loads, the full block-by-block schedule and a duration
//! estimate. Must not validate (the plan is already valid) or run anything; an
//! underived reference is shown as such, never guessed.

use std::fmt::Write;

use super::derive::tenths_str;
use super::resolve::ResolvedCell;
use super::types::{Arrival, Count, Load, PanelSource, Plan, Rate, Server};

fn secs(s: f64) -> String {
    if s >= 120.0 { format!("{:.1} min", s / 60.0) } else { format!("{s:.1} s") }
}

impl Plan {
    /// Estimated seconds of one cell run on one arm, settle included: open and
    /// isolated cells by their arrival span, closed-loop cells at the slower pilot
    /// rate from `[derive]` (`None` without pilots or when underived).
    pub fn cell_estimate_s(&self, cell: &ResolvedCell) -> Option<f64> {
        Some(self.timing.settle_s + self.load_estimate_s(cell)?)
    }

    /// Estimated seconds of one cell's load alone (see `cell_estimate_s`).
    fn load_estimate_s(&self, cell: &ResolvedCell) -> Option<f64> {
        match cell.arrival_span_s() {
            Some(s) => Some(s),
            None => Some(cell.count as f64 / self.slower_pilot_rate()?),
        }
    }

    /// The slower of `[derive]`'s pilot rates (req/s), when it has any.
    fn slower_pilot_rate(&self) -> Option<f64> {
        let slower = self.derive.as_ref()?.pilot_rates.iter().copied().fold(f64::INFINITY, f64::min);
        Some(slower).filter(|s| s.is_finite() && *s > 0.0)
    }

    /// The text `harness plan check` prints.
    pub fn render_check(&self, sha256: &str) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "study {} (seed {}), plan sha256 {sha256}", self.study.name, self.study.seed);
        if let Some(d) = &self.study.description {
            let _ = writeln!(o, "  {d}");
        }
        self.render_request(&mut o);
        self.render_slo(&mut o);
        self.render_prompts(&mut o);
        self.render_warmup_and_timing(&mut o);
        self.render_arms(&mut o);
        self.render_cells(&mut o);
        self.render_hypotheses(&mut o);
        self.render_tuning(&mut o);
        self.render_derive(&mut o);
        self.render_schedule(&mut o);
        o
    }

    /// The request every cell sends, and the endpoint of each cell.
    fn render_request(&self, o: &mut String) {
        let r = &self.request;
        let _ = writeln!(
            o,
            "request: model {:?}, {} output tokens (ignore_eos = {}), temperature {}{}",
            r.model,
            r.output_tokens,
            r.ignore_eos,
            r.temperature,
            r.extra_body_note()
        );
        if let Some(cap) = r.max_output_tokens {
            let mode = if r.forced() { "forced" } else { "natural" };
            let _ = writeln!(o, "  output: {mode}, max_tokens per request capped at {cap}");
        }
        let endpoints = self.endpoints();
        if endpoints.len() > 1 {
            let on = |e: super::Endpoint| {
                self.cells.iter().filter(|c| c.endpoint == e).map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            };
            let _ = writeln!(
                o,
                "  endpoint per cell: /v1/completions (token IDs): {}; /v1/chat/completions (chat messages): {}",
                on(super::Endpoint::Completions),
                on(super::Endpoint::Chat)
            );
        } else if endpoints == [super::Endpoint::Chat] {
            let _ = writeln!(o, "  endpoint: /v1/chat/completions with each entry's chat messages");
        }
    }

    /// The service-level objectives goodput counts against.
    fn render_slo(&self, o: &mut String) {
        if let Some(slo) = &self.slo {
            let t: Vec<String> = [("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms)]
                .iter()
                .filter_map(|(n, v)| v.map(|v| format!("{n} <= {v} ms")))
                .collect();
            let _ = writeln!(o, "slo: goodput counts valid requests with {} (vLLM --goodput)", t.join(", "));
        }
    }

    /// The prompt panel and where it comes from.
    fn render_prompts(&self, o: &mut String) {
        let p = &self.prompts;
        let src = source_words(&p.source);
        if let Some(turns) = p.max_turns {
            let _ = writeln!(
                o,
                "prompts: {} multi-turn chat sessions of up to {turns} user turns (each turn sent when the one \
                 before it completes, with the reply in its history), {src}",
                p.documents
            );
        } else if p.source.is_dataset() {
            let _ = writeln!(o, "prompts: {} requests, {src}", p.documents);
        } else {
            let _ = writeln!(o, "prompts: {} per length {:?}, {src}", p.documents, p.lengths);
        }
    }

    /// The warmup call and the settle and timeout times.
    fn render_warmup_and_timing(&self, o: &mut String) {
        let w = &self.warmup;
        let _ = writeln!(
            o,
            "warmup: one non-streaming call of {} prompts x {} tokens, {} output tokens each",
            w.prompts,
            tokens(w.input_tokens),
            w.output_tokens
        );
        let t = &self.timing;
        let _ = writeln!(
            o,
            "timing: settle {} s, request timeout {} s, drain timeout {} s",
            t.settle_s, t.request_timeout_s, t.drain_timeout_s
        );
    }

    /// Each arm's server.
    fn render_arms(&self, o: &mut String) {
        let _ = writeln!(o, "arms:");
        for a in &self.arms {
            let how = match &a.server {
                Server::Spawn { argv, port } => {
                    format!("starts {argv:?} on port {port}, stop grace {} s", a.stop_grace_s)
                }
                Server::External { url } => format!("external server {url} (never restarted)"),
            };
            let _ = writeln!(o, "  {} ({}): {how}, health {}", a.name, a.role.as_str(), a.health);
        }
    }

    /// Each cell's load, count and lengths.
    fn render_cells(&self, o: &mut String) {
        let _ = writeln!(o, "cells:");
        for c in &self.cells {
            let load = match &c.load {
                Load::Closed { concurrency } => format!("closed-loop concurrency {concurrency}"),
                Load::Isolated { spacing_s } => format!("isolated, {spacing_s} s apart"),
                Load::Trace { path, time_scale, lengths } => format!(
                    "arrivals replayed from {path} (time scale {time_scale}{})",
                    if *lengths { ", prompt and output lengths from the file" } else { "" }
                ),
                Load::Open { rate, arrival } => {
                    let rate = match (rate, self.rate_of(rate)) {
                        (Rate::Fixed(x), _) => format!("{x} req/s"),
                        (Rate::Derived(n), Some(x)) => format!("{x} req/s (derived:{n})"),
                        (Rate::Derived(n), None) => format!("derived:{n} (NOT DERIVED YET)"),
                    };
                    match arrival {
                        Arrival::Poisson => format!("open-loop Poisson at {rate}"),
                        Arrival::Constant => format!("constant (evenly spaced) at {rate}"),
                        Arrival::Gamma { burstiness } => {
                            format!("open-loop gamma (burstiness {burstiness}) at {rate}")
                        }
                    }
                }
            };
            let count = match (c.count, self.count_of(c.count)) {
                (Count::Derived, None) => "derived:count (NOT DERIVED YET)".to_string(),
                (Count::Derived, Some(n)) => format!("{n} (derived:count)"),
                (Count::Fixed(n), _) => n.to_string(),
            };
            let length = match &c.load {
                Load::Trace { lengths: true, .. } => "the panel length nearest each row's".to_string(),
                _ => tokens(c.input_tokens),
            };
            let _ = writeln!(
                o,
                "  {} [{}]: {load}{}; {count} requests of {length} tokens; retries {}",
                c.name,
                c.kind.as_str(),
                c.max_concurrency.map_or(String::new(), |m| format!(", at most {m} in flight")),
                c.retries
            );
        }
    }

    /// The confirmation hypotheses and their test.
    fn render_hypotheses(&self, o: &mut String) {
        if !self.hypotheses.is_empty() {
            let alpha = self.alpha.unwrap_or(f64::NAN);
            let _ = writeln!(
                o,
                "hypotheses (exact sign test, Holm across all {} at alpha {alpha}):",
                self.hypotheses.len()
            );
            for h in &self.hypotheses {
                let _ = writeln!(
                    o,
                    "  {}: {} ({}) in {}, {} vs {}, median effect >= {}%",
                    h.name,
                    h.metric.as_str(),
                    h.metric.kind().as_str(),
                    h.cell,
                    h.candidate,
                    h.control,
                    h.threshold * 100.0
                );
            }
        }
    }

    /// The tuning study's shape.
    fn render_tuning(&self, o: &mut String) {
        if let Some(t) = &self.tuning {
            let metrics: Vec<&str> = t.metrics.iter().map(|m| m.as_str()).collect();
            let _ = writeln!(
                o,
                "tuning: baseline {} vs {} configurations ({}) over {} cells, metrics {} (primary {}); {} of the \
                 hypotheses above; blocking {}\n  selection: {}",
                t.baseline,
                t.candidates.len(),
                t.candidates.join(", "),
                t.cells.len(),
                metrics.join(", "),
                t.primary().as_str(),
                t.metrics.len() * t.cells.len() * t.candidates.len(),
                self.blocking.as_str(),
                t.selection
            );
        }
    }

    /// Derived rates and counts: from in-study pilots, or given pilot rates.
    fn render_derive(&self, o: &mut String) {
        if let (Some(d), Some(p), None) = (&self.derive, &self.pilots, &self.derived) {
            let _ = writeln!(
                o,
                "derive: in-study pilots ([pilots]: arms {:?}, closed-loop {} clients, {} requests, {} run(s) \
                 each, fresh servers, excluded from every test), near = floor(10 * {} * slower) / 10; derived \
                 when `harness run` runs them (pilots/derived.json)",
                p.arms, p.concurrency, p.count, p.runs, d.near_fraction
            );
        } else if let Some(d) = &self.derive {
            let _ =
                write!(o, "derive: pilots {:?}, near = floor(10 * {} * slower) / 10", d.pilot_rates, d.near_fraction);
            match &self.derived {
                Some(v) => {
                    let loads: Vec<String> =
                        v.rates_tenths.iter().map(|(k, &t)| format!("{k} {}", tenths_str(t))).collect();
                    let _ = write!(o, " -> {}", loads.join(", "));
                    if let Some(c) = v.count {
                        let _ = write!(o, ", count {c}");
                    }
                    let _ = writeln!(o);
                }
                None => {
                    let _ = writeln!(o, "; NOT DERIVED YET: `harness run` will refuse this plan");
                }
            }
        }
    }

    /// The time estimate: settling, the load of every cell run whose duration is
    /// known, the pilots', and why the rest is not known.
    fn render_estimate(&self, o: &mut String, runs: usize, settle: f64, load: f64, unknown: usize) {
        let known = runs - unknown.min(runs);
        let what = match (known, unknown) {
            (_, 0) => format!("about {} ({} settling, {} load)", secs(settle + load), secs(settle), secs(load)),
            (0, _) => format!("{} of settling; the load of the {unknown} cell runs is not estimated", secs(settle)),
            _ => format!(
                "about {} ({} settling, {} load of {known} cell runs; {unknown} more not estimated)",
                secs(settle + load),
                secs(settle),
                secs(load)
            ),
        };
        let _ = writeln!(o, "estimate: {what}; plus server startups, warmups and drains");
        let rate = self.slower_pilot_rate();
        if let Some(p) = &self.pilots {
            let runs = u64::from(p.runs) * p.arms.len() as u64;
            match rate {
                Some(r) => {
                    let each = self.timing.settle_s + p.count as f64 / r;
                    let _ = writeln!(
                        o,
                        "  pilots first: {runs} run(s) of {} requests at concurrency {}, about {} at {r:.2} req/s",
                        p.count,
                        p.concurrency,
                        secs(each * runs as f64)
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "  pilots first: {runs} run(s) of {} requests at concurrency {}, at a rate they measure",
                        p.count, p.concurrency
                    );
                }
            }
        }
        if unknown > 0 {
            let why = if self.pilots.is_some() && rate.is_none() {
                "closed loops and pilot-derived loads run at the rate the study's own pilots measure; \
                 `harness plan check PLAN --pilots-from DIR` estimates them from the pilots of an earlier run of \
                 this plan"
            } else {
                "a closed loop lasts its count over the server's rate, which the plan does not know before it runs \
                 (`[derive] pilot_rates` or `[pilots]` would give one)"
            };
            let _ = writeln!(o, "  not estimated: {why}");
        }
    }

    fn render_schedule(&self, o: &mut String) {
        let schedule = self.schedule();
        let starts: usize = schedule.blocks.iter().map(|b| b.arms.len()).sum();
        let _ = writeln!(
            o,
            "schedule: {} confirmation + {} descriptive blocks, {starts} server starts",
            self.blocks.count, self.blocks.descriptive
        );
        if let Some(line) = self.executor_text() {
            let _ = writeln!(o, "  {line}");
        }
        if self.blocks.rounds > 0 {
            let _ = writeln!(
                o,
                "  interleaved (blocks.rounds = {r}): each block starts its servers together, then each cell runs in \
                 {r} round(s) that alternate the arms (the order below, reversed every other round)",
                r = self.blocks.rounds
            );
        }
        if self.blocks.randomize_setup {
            let _ = writeln!(
                o,
                "  setup randomized (blocks.randomize_setup): each server gets a {} pad of 0-4095 bytes drawn per block \
                 and arm from the seed",
                super::types::SETUP_PAD_ENV
            );
        }
        if let Some(c) = &self.client.cpus {
            let unpinned =
                self.arms.iter().any(|a| a.cpus.is_none() && matches!(a.server, super::Server::Spawn { .. }));
            let _ = writeln!(
                o,
                "  client pinned to CPUs {} (client.cpus){}",
                crate::host::cpu_list(c),
                if unpinned { "; arms without cpus run on every CPU the machine allows" } else { "" }
            );
        }
        for a in self.arms.iter().filter(|a| a.cpus.is_some()) {
            let cpus = a.cpus.as_deref().map(crate::host::cpu_list).unwrap_or_default();
            let _ = writeln!(
                o,
                "  arm {} pinned to CPUs {cpus} (checked after health: a server that leaves them fails)",
                a.name
            );
        }
        if let Some(seq) = &self.sequential {
            let margins: Vec<String> = self
                .hypotheses
                .iter()
                .map(|h| format!("{} +-{:.0}%", h.name, seq.margin_of(&h.name) * 100.0))
                .collect();
            let _ = writeln!(
                o,
                "  sequential: looks after {:?} blocks, stops at the first decided look (the count is the cap); \
                 alpha {} over every hypothesis and look, beta {} per hypothesis; margins {}{}",
                seq.looks,
                seq.alpha,
                seq.beta,
                margins.join(", "),
                seq.max_minutes.map_or(String::new(), |m| format!("; last look after {m} minutes of blocks"))
            );
        }
        let (mut requests, mut settle, mut load, mut unknown, mut runs) = (0u64, 0.0, 0.0, 0usize, 0usize);
        for b in &schedule.blocks {
            let _ = writeln!(o, "  block {} ({}):", b.index, b.kind.as_str());
            for arm in &b.arms {
                let mut parts = Vec::new();
                for name in &b.cells {
                    let resolved = self.cell(name).and_then(|c| self.try_resolve(c));
                    settle += self.timing.settle_s;
                    runs += 1;
                    match resolved {
                        Some(rc) => {
                            requests += rc.count;
                            match self.load_estimate_s(&rc) {
                                Some(s) => load += s,
                                None => unknown += 1,
                            }
                            parts.push(format!("{name} ({})", rc.count));
                        }
                        None => {
                            unknown += 1;
                            parts.push(format!("{name} (underived)"));
                        }
                    }
                }
                let _ = writeln!(o, "    {arm}: {}", parts.join(" -> "));
            }
        }
        let _ = writeln!(
            o,
            "total: {requests} timed requests, {} warmup calls",
            if self.warmup.prompts > 0 { starts } else { 0 }
        );
        self.render_estimate(o, runs, settle, load, unknown);
        for note in self.balance_notes() {
            let _ = writeln!(o, "note: {note}");
        }
    }
}

/// Where a prompt panel's prompts come from, in words.
fn source_words(source: &PanelSource) -> String {
    match source {
        PanelSource::Text { dir, pattern, tokenizer } => {
            format!("cut from {dir}/{pattern} with tokenizer {tokenizer}")
        }
        PanelSource::Jsonl { path } => format!("cut from token IDs in {path}"),
        PanelSource::Random { min_token_id, max_token_id } => {
            format!("seeded random token IDs in {min_token_id}..={max_token_id} (not natural text)")
        }
        PanelSource::ShareGpt(g) => format!(
            "sampled from {} ({}{}) with tokenizer {} (prompts and outputs of at least {} tokens, prompts of \
             at most {}, prompt + output at most {})",
            g.path,
            if g.shuffle { "" } else { "in file order, " },
            g.label(),
            g.tokenizer,
            g.min_tokens,
            opt(g.max_prompt_tokens),
            opt(g.max_total_tokens)
        ),
        PanelSource::Requests { path, tokenizer } => match tokenizer {
            Some(t) => format!("one per line of {path} (text encoded with tokenizer {t})"),
            None => format!("one per line of {path} (token IDs only: no tokenizer)"),
        },
        PanelSource::VllmRandom(v) => format!(
            "vLLM's random dataset: token IDs from the whole vocabulary of {} decoded to text and re-encoded, \
             {} input tokens after a {}-token shared prefix, {} output tokens (range ratios {} and {})",
            v.tokenizer, v.input_len, v.prefix_len, v.output_len, v.input_range_ratio, v.output_range_ratio
        ),
        PanelSource::VllmBurstGpt(b) => format!(
            "vLLM's burstgpt dataset: GPT-4 rows of {} sampled with NumPy's legacy generator, synthetic token IDs \
             of each row's request length decoded and re-encoded with {}, its response length as output",
            b.path, b.tokenizer
        ),
        PanelSource::VllmPrefixRepetition(v) => format!(
            "vLLM's prefix_repetition dataset: {} prefixes of {} random tokens, each with its own {}-token \
             suffixes, from the vocabulary of {}, {} output tokens{}",
            v.num_prefixes,
            v.prefix_len,
            v.suffix_len,
            v.tokenizer,
            v.output_len,
            if v.shuffle { ", shuffled" } else { ", prefix-major (not shuffled)" }
        ),
        PanelSource::SharedPrefix(s) => format!(
            "{} groups x {} prompts: a shared {}-token prefix + {} own tokens, cut from {}/{} with tokenizer {}",
            s.groups, s.prompts_per_group, s.prefix_tokens, s.suffix_tokens, s.texts, s.pattern, s.tokenizer
        ),
        PanelSource::Synthetic(y) => format!(
            "input lengths {}, output lengths {}, {}",
            dist(&y.input),
            dist(&y.output),
            match &y.tokens {
                super::SyntheticTokens::Text { texts, pattern, tokenizer } => {
                    format!("cut from {texts}/{pattern} with tokenizer {tokenizer}")
                }
                super::SyntheticTokens::Random { min_token_id, max_token_id, prefix: 0 } => {
                    format!("seeded random token IDs in {min_token_id}..={max_token_id} (not natural text)")
                }
                super::SyntheticTokens::Random { min_token_id, max_token_id, prefix } => format!(
                    "after a {prefix}-token prefix shared by every entry, seeded random token IDs in \
                     {min_token_id}..={max_token_id} (not natural text; the prefix counts in the input length)"
                ),
            }
        ),
    }
}

/// A prompt length, or what a dataset panel sends instead.
fn tokens(length: Option<u32>) -> String {
    length.map_or_else(|| "dataset-length".to_string(), |l| l.to_string())
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "unbounded".to_string(), |v| v.to_string())
}

fn dist(d: &crate::plan::LengthDist) -> String {
    use crate::plan::LengthDist as D;
    match *d {
        D::Fixed(v) => format!("fixed {v}"),
        D::Uniform { min, max } => format!("uniform in {min}..={max}"),
        D::Normal { mean, sd, min, max } => format!("normal(mean {mean}, sd {sd}) clipped to {min}..={max}"),
        D::LogNormal { mu, sigma, min, max } => format!("lognormal(mu {mu}, sigma {sigma}) clipped to {min}..={max}"),
    }
}
