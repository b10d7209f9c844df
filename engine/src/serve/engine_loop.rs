//! The engine loop: a dedicated OS thread that owns the model, the KV cache and
//! the scheduler, fed by a command channel. Each iteration takes new requests
//! and aborts, drops requests whose client went away, asks the scheduler for a
//! step, runs one batched forward pass on the kernel pool, samples, sends token
//! events back to each request's HTTP task, writes the step receipt and updates
//! the metrics. HTTP handlers never touch the model; this thread never touches
//! sockets.

use super::admission::QueuePermit;
use super::metrics::{FinishedLabel, Metrics};
use super::receipts::{Receipt, ReceiptWriter};
use super::sampling::{Sampler, SamplingParams, TokenLogprob, token_logprob};
use super::stop::StopChecker;
pub use crate::finish::{FinishReason, StopReason};
use crate::model::{LogitsWanted, SeqInput};
use crate::runtime::Engine;
use crate::sched::{ScheduledChunk, Scheduler, SchedulerConfig, SeqId, Sequence, StopRules};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// What the engine tells a request's HTTP task.
#[derive(Debug, Clone)]
pub enum Event {
    /// First admitted; `cached_tokens` of its prompt came from the prefix cache.
    Admitted { cached_tokens: usize },
    /// Log-probabilities of prompt tokens 1.. (position 0 has none).
    PromptLogprobs(Vec<TokenLogprob>),
    /// A generated token and the text it completes (detokenized here, once);
    /// `finish` is set on the request's last token.
    Token { token: u32, text: String, logprob: Option<TokenLogprob>, finish: Option<FinishReason> },
    /// The request ended without a final token (aborted).
    Aborted,
    /// The server failed the request (HTTP 500 / an error event in the stream).
    Failed(String),
}

pub struct NewRequest {
    /// Echoed in responses and receipts.
    pub id: String,
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Stop strings (the loop matches them; see `stop`).
    pub stop: Vec<String>,
    pub seed: u64,
    /// Events go here, tagged with `tag` (the choice index of the HTTP request).
    pub events: UnboundedSender<(usize, Event)>,
    pub tag: usize,
    pub arrived: Instant,
    /// Its place in the admission queue, given back at its first step.
    pub permit: Option<QueuePermit>,
}

pub enum Command {
    Add(Box<NewRequest>),
    /// Abort everything and leave the loop.
    Shutdown,
}

pub struct LoopConfig {
    pub scheduler: SchedulerConfig,
    pub step_delay: Duration,
    /// DEBUG KNOB (`--debug-step-spin-fraction F`): after a step that ran a
    /// forward pass, busy-wait F times that step's own time (`spin_after`).
    pub step_spin_fraction: f64,
    /// With nothing running, a step waits up to this fraction of its expected
    /// prefill time for more requests (`gather`).
    pub idle_gather_factor: f64,
    pub eos_token_ids: Vec<u32>,
    /// DEBUG KNOB (`--debug-fail-forward-after N`): the forward pass after the
    /// first N fails, once, as a real model failure would (tests use it).
    pub debug_fail_forward_after: Option<u64>,
}

/// Busy-waits until `fraction` times the time since `started` has passed
/// again, so the step that began at `started` takes (1 + fraction) times as
/// long and the thread keeps its core busy meanwhile (a sleep would free the
/// core for the HTTP tasks and the client, which is not what a slower engine
/// does). Returns the time spun.
fn spin_after(started: Instant, fraction: f64) -> Duration {
    let spin = started.elapsed().mul_f64(fraction);
    let from = Instant::now();
    while from.elapsed() < spin {
        std::hint::spin_loop();
    }
    from.elapsed()
}

/// The longest `gather` ever waits.
const MAX_GATHER: Duration = Duration::from_millis(20);

struct Active {
    name: String,
    params: SamplingParams,
    sampler: Sampler,
    stop: StopChecker,
    events: UnboundedSender<(usize, Event)>,
    tag: usize,
    arrived: Instant,
    last_token_at: Option<Instant>,
    prompt_logprobs: Vec<TokenLogprob>,
    prompt_logprobs_sent: bool,
    /// Held until the scheduler first admits it (or it ends).
    permit: Option<QueuePermit>,
}

pub struct EngineLoop {
    engine: Engine,
    sched: Scheduler,
    cfg: LoopConfig,
    metrics: Arc<Metrics>,
    receipts: Option<ReceiptWriter>,
    active: HashMap<SeqId, Active>,
    by_name: HashMap<String, SeqId>,
    next_id: SeqId,
    step: u64,
    /// Forward passes run (for `debug_fail_forward_after`).
    forwards: u64,
    started: Instant,
    /// Forward time per prefill token of the last step that admitted fresh
    /// requests (`gather`).
    prefill_per_token: Duration,
}

impl EngineLoop {
    pub fn new(
        engine: Engine,
        cfg: LoopConfig,
        metrics: Arc<Metrics>,
        receipts: Option<ReceiptWriter>,
        started: Instant,
    ) -> Self {
        let sched = Scheduler::new(cfg.scheduler.clone(), engine.cache.allocator().clone());
        metrics.set_inventory(&engine.cache.inventory());
        EngineLoop {
            engine,
            sched,
            cfg,
            metrics,
            receipts,
            active: HashMap::new(),
            by_name: HashMap::new(),
            next_id: 1,
            step: 0,
            forwards: 0,
            started,
            prefill_per_token: Duration::ZERO,
        }
    }

    /// Runs until `Shutdown` or until every command sender is gone.
    pub fn run(mut self, rx: Receiver<Command>) {
        loop {
            // Block while there is nothing to do; otherwise only drain.
            if self.sched.is_idle() {
                match rx.recv() {
                    Ok(cmd) => {
                        if !self.handle(cmd) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let mut stop = false;
            loop {
                match rx.try_recv() {
                    Ok(cmd) => {
                        if !self.handle(cmd) {
                            stop = true;
                            break;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        stop = true;
                        break;
                    }
                }
            }
            if stop {
                self.abort_all();
                break;
            }
            self.drop_disconnected();
            if self.sched.is_idle() {
                self.update_gauges();
                continue;
            }
            if self.sched.num_running() == 0 && !self.gather(&rx) {
                self.abort_all();
                break;
            }
            let worked = self.step_once();
            if !worked {
                // Nothing schedulable right now (cannot happen for requests that
                // passed the fit check, but never spin).
                match rx.recv_timeout(Duration::from_millis(1)) {
                    Ok(cmd) => {
                        if !self.handle(cmd) {
                            self.abort_all();
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        self.abort_all();
                        break;
                    }
                }
            }
        }
        self.update_gauges();
    }

    /// With nothing running (every waiting request would start with a
    /// prefill), waits up to `idle_gather_factor` x the time the next step's
    /// prefill is expected to take (the waiting tokens, up to one step's budget,
    /// at the last admitting step's time per prefill token) for more requests. Requests sent together (the replacements of
    /// a closed-loop client, a burst at a cell start) then share one prefill
    /// step; otherwise the one that arrives a millisecond late is prefilled in
    /// the next step, which stalls the first one's decode for a whole prefill,
    /// and the pair stays out of step for good. The wait costs a waiting request
    /// that fraction of its own prefill time, and never delays a decode.
    /// Returns false when the loop must stop.
    fn gather(&mut self, rx: &Receiver<Command>) -> bool {
        let tokens = self.sched.waiting_tokens().min(self.cfg.scheduler.max_num_batched_tokens);
        let window = (self.prefill_per_token * tokens as u32).mul_f64(self.cfg.idle_gather_factor).min(MAX_GATHER);
        let deadline = Instant::now() + window;
        loop {
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                return true;
            };
            match rx.recv_timeout(left) {
                Ok(cmd) => {
                    if !self.handle(cmd) {
                        return false;
                    }
                }
                Err(RecvTimeoutError::Timeout) => return true,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// Returns false when the loop must stop.
    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Add(req) => {
                let id = self.next_id;
                self.next_id += 1;
                let req = *req;
                let p = &req.params;
                let mut stop_token_ids = p.stop_token_ids.clone();
                if !p.ignore_eos {
                    stop_token_ids.extend(&self.cfg.eos_token_ids);
                }
                let rules = StopRules { max_tokens: p.max_tokens, min_tokens: p.min_tokens, stop_token_ids };
                let reuse_prefix = p.prompt_logprobs.is_none();
                self.by_name.insert(req.id.clone(), id);
                self.active.insert(
                    id,
                    Active {
                        name: req.id,
                        sampler: Sampler::new(req.seed),
                        stop: StopChecker::new(req.stop),
                        params: req.params,
                        events: req.events,
                        tag: req.tag,
                        arrived: req.arrived,
                        last_token_at: None,
                        prompt_logprobs: Vec::new(),
                        prompt_logprobs_sent: false,
                        permit: req.permit,
                    },
                );
                let seq = Sequence::new(id, req.prompt).with_rules(rules).with_prefix_reuse(reuse_prefix);
                self.sched.add(seq);
                true
            }
            Command::Shutdown => false,
        }
    }

    fn abort_all(&mut self) {
        let ids: Vec<SeqId> = self.active.keys().copied().collect();
        for id in ids {
            self.finish(id, FinishReason::Abort, Event::Aborted);
        }
    }

    fn drop_disconnected(&mut self) {
        let gone: Vec<SeqId> = self.active.iter().filter(|(_, a)| a.events.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            self.finish(id, FinishReason::Abort, Event::Aborted);
        }
    }

    /// Ends a sequence for any reason: frees its pages, counts it once under
    /// its finish reason (vLLM's `request_success` family, whose `error` label
    /// counts server failures), then sends its HTTP task the last event (the
    /// final token, `Aborted` or `Failed`), so a client that has seen the end
    /// of its request finds it counted.
    fn finish(&mut self, id: SeqId, reason: FinishReason, last: Event) {
        self.sched.remove(id); // pages return to the pool on drop
        if let Some(a) = self.active.remove(&id) {
            self.by_name.remove(&a.name);
            self.metrics
                .request_success
                .get_or_create(&FinishedLabel { finished_reason: reason.as_str().to_string() })
                .inc();
            self.metrics.e2e_request_latency.observe(a.arrived.elapsed().as_secs_f64());
            let _ = a.events.send((a.tag, last));
        }
    }

    fn update_gauges(&self) {
        self.metrics.num_requests_running.set(self.sched.num_running() as i64);
        self.metrics.num_requests_waiting.set(self.sched.num_waiting() as i64);
        let alloc = self.engine.cache.allocator();
        self.metrics.kv_cache_usage_perc.set(alloc.used_count() as f64 / alloc.total().max(1) as f64);
    }

    /// One scheduler step; false when nothing could be scheduled.
    fn step_once(&mut self) -> bool {
        let step_started = Instant::now();
        let plan = self.sched.schedule();
        let now = Instant::now();
        for id in plan.fresh.iter() {
            if let Some(a) = self.active.get_mut(id) {
                a.permit = None; // its place in the admission queue is free again
                // Its first chunk starts after the prompt tokens found cached.
                let cached_tokens = plan.chunks.iter().find(|c| c.seq == *id).map(|c| c.start).unwrap_or(0);
                let _ = a.events.send((a.tag, Event::Admitted { cached_tokens }));
            }
            if let (Some(a), Some(s)) = (self.active.get(id), self.sched.get(*id)) {
                self.metrics.request_queue_time.observe(now.duration_since(a.arrived).as_secs_f64());
                self.metrics.prompt_tokens.inc_by(s.prompt_len() as u64);
            }
        }
        self.metrics.num_preemptions.inc_by(plan.preempted.len() as u64);
        self.metrics.prefix_cache_queries.inc_by(plan.prefix_query_tokens as u64);
        self.metrics.prefix_cache_hits.inc_by(plan.prefix_hit_tokens as u64);
        if plan.is_empty() {
            self.write_receipt(&plan, &[]);
            return !plan.preempted.is_empty();
        }
        let chunks: HashMap<SeqId, ScheduledChunk> = plan.chunks.iter().map(|c| (c.seq, c.clone())).collect();
        // Which sequences want every row's logits (prompt logprobs, first pass).
        let wants_all: HashMap<SeqId, bool> = plan
            .chunks
            .iter()
            .map(|c| {
                let want = self
                    .active
                    .get(&c.seq)
                    .is_some_and(|a| a.params.prompt_logprobs.is_some() && !a.prompt_logprobs_sent);
                (c.seq, want)
            })
            .collect();
        let (model, cache, pool) = self.engine.parts();
        let mut order: Vec<ScheduledChunk> = Vec::with_capacity(chunks.len());
        let mut inputs: Vec<SeqInput<'_>> = Vec::with_capacity(chunks.len());
        for seq in self.sched.running_mut() {
            let Some(c) = chunks.get(&seq.id()) else {
                continue;
            };
            let (tokens, Some(table)) = seq.forward_parts() else {
                continue;
            };
            let logits = if wants_all.get(&c.seq).copied().unwrap_or(false) {
                LogitsWanted::All
            } else if c.sample {
                LogitsWanted::Last
            } else {
                LogitsWanted::None
            };
            inputs.push(SeqInput { tokens: &tokens[c.start..c.end], table, logits });
            order.push(c.clone());
        }
        let forward_started = Instant::now();
        self.forwards += 1;
        let result = if self.cfg.debug_fail_forward_after.is_some_and(|n| self.forwards == n + 1) {
            Err("injected failure (--debug-fail-forward-after)".to_string())
        } else {
            pool.install(|| model.forward(cache, &mut inputs, None)).map_err(|e| e.to_string())
        };
        if !plan.fresh.is_empty() && plan.prefill_tokens > 0 {
            self.prefill_per_token = forward_started.elapsed() / plan.prefill_tokens as u32;
        }
        drop(inputs);
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("forward pass failed: {e}; failing the step's requests");
                let failed: Vec<(SeqId, FinishReason)> = order.iter().map(|c| (c.seq, FinishReason::Error)).collect();
                self.write_receipt(&plan, &failed);
                for (id, reason) in failed {
                    let msg = format!("the engine failed while computing this request: {e}");
                    self.finish(id, reason, Event::Failed(msg));
                }
                self.update_gauges();
                self.step += 1;
                return true;
            }
        };
        let mut finished = Vec::new();
        let mut last_events = Vec::new();
        for (c, rows) in order.iter().zip(logits) {
            if let Some((done, last)) = self.after_forward(c, rows) {
                finished.push((c.seq, done));
                last_events.push(last);
            }
        }
        self.write_receipt(&plan, &finished);
        for ((id, reason), last) in finished.into_iter().zip(last_events) {
            self.finish(id, reason, last);
        }
        self.update_gauges();
        self.step += 1;
        if self.cfg.step_spin_fraction > 0.0 {
            spin_after(step_started, self.cfg.step_spin_fraction);
        }
        if !self.cfg.step_delay.is_zero() {
            std::thread::sleep(self.cfg.step_delay);
        }
        true
    }

    /// Records a chunk's results and sends its token; when the sequence ends,
    /// returns the finish reason and the final token's event (unsent: `finish`
    /// sends it after counting the request).
    fn after_forward(&mut self, c: &ScheduledChunk, rows: Vec<Vec<f32>>) -> Option<(FinishReason, Event)> {
        self.sched.mark_computed(c.seq, c.end);
        let seq = self.sched.get(c.seq)?;
        let prompt_len = seq.prompt_len();
        let a = self.active.get_mut(&c.seq)?;
        if let Some(k) = a.params.prompt_logprobs
            && !a.prompt_logprobs_sent
            && rows.len() == c.end - c.start
        {
            for (j, row) in rows.iter().enumerate() {
                let pos = c.start + j;
                if pos + 1 < prompt_len && pos + 1 > a.prompt_logprobs.len() {
                    a.prompt_logprobs.push(token_logprob(row, seq.tokens()[pos + 1], k));
                }
            }
            if a.prompt_logprobs.len() + 1 >= prompt_len {
                a.prompt_logprobs_sent = true;
                let _ = a.events.send((a.tag, Event::PromptLogprobs(std::mem::take(&mut a.prompt_logprobs))));
            }
        }
        if !c.sample {
            return None;
        }
        let row = rows.last()?;
        let generated = seq.generated().len() + 1;
        let tok = a.sampler.sample(row, &a.params, seq.banned_tokens());
        let logprob = a.params.logprobs.map(|k| token_logprob(row, tok, k));
        let mut finish = self.sched.on_sampled(c.seq, tok);
        let now = Instant::now();
        match a.last_token_at {
            None => self.metrics.time_to_first_token.observe(now.duration_since(a.arrived).as_secs_f64()),
            Some(t) => self.metrics.time_per_output_token.observe(now.duration_since(t).as_secs_f64()),
        }
        a.last_token_at = Some(now);
        self.metrics.generation_tokens.inc();
        let tokenizer = &self.engine.tokenizer;
        let mut text = a.stop.push(tokenizer, tok);
        if finish.is_some() {
            text.push_str(&a.stop.flush(tokenizer));
        }
        // As vLLM: stop strings count only past min_tokens, and a match wins
        // over a length finish on the same token.
        if let Some(s) = a.stop.check(&text)
            && generated > a.params.min_tokens
        {
            finish = Some(FinishReason::Stop(StopReason::String(s)));
        }
        let event = Event::Token { token: tok, text, logprob, finish: finish.clone() };
        match finish {
            Some(f) => Some((f, event)),
            None => {
                let _ = a.events.send((a.tag, event));
                None
            }
        }
    }

    fn write_receipt(&mut self, plan: &crate::sched::StepPlan, finished: &[(SeqId, FinishReason)]) {
        let Some(w) = self.receipts.as_mut() else {
            return;
        };
        let name = |id: &SeqId| self.active.get(id).map(|a| a.name.clone()).unwrap_or_else(|| format!("#{id}"));
        let alloc = self.engine.cache.allocator();
        let r = Receipt {
            step: self.step,
            t_ns: self.started.elapsed().as_nanos() as u64,
            admitted: plan.fresh.iter().map(name).collect(),
            resumed: plan.resumed.iter().map(name).collect(),
            preempted: plan.preempted.iter().map(name).collect(),
            finished: finished.iter().map(|(id, _)| name(id)).collect(),
            finish_reasons: finished.iter().map(|(_, r)| r.as_str()).collect(),
            scheduled: plan.chunks.len(),
            prefill_tokens: plan.prefill_tokens,
            prefix_hit_tokens: plan.prefix_hit_tokens,
            decode_tokens: plan.decode_tokens,
            running: self.sched.num_running(),
            waiting: self.sched.num_waiting(),
            kv_blocks_used: alloc.used_count(),
            kv_blocks_total: alloc.total(),
        };
        if let Err(e) = w.write(&r) {
            tracing::error!("cannot write step receipt: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_lasts_its_fraction_of_the_step_so_far() {
        let step = Duration::from_millis(40);
        let started = Instant::now().checked_sub(step).expect("the clock is past 40 ms");
        let spun = spin_after(started, 0.25);
        assert!(spun >= Duration::from_millis(10), "spun {spun:?}, want at least a quarter of 40 ms");
    }
}
