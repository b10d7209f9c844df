//! Non-streamed load cases: single-request latency after discarded warmup rounds;
//! 2/4/8 simultaneous requests against the serial sum of the same payloads; request
//! isolation (each concurrent greedy answer equals the answer to the same payload
//! sent alone); a long request with a short one 0.5 s behind it. Owns these cases'
//! measures and findings. Must not judge a response itself (`check` does).

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;

use super::check::{self, Answer, Api};
use super::outcome::CaseResult;
use super::suite::{Sent, Suite};

/// One concurrency level's answers, for the isolation case.
pub struct LevelData {
    pub n: u32,
    pub serial: Vec<Option<Answer>>,
    pub concurrent: Vec<Option<Answer>>,
}

/// Gap between the long and the short request of `long_short`.
const SHORT_DELAY: Duration = Duration::from_millis(500);

fn tok_per_s(tokens: u64, d: Duration) -> String {
    let s = d.as_secs_f64();
    if s > 0.0 { format!("{:.2}", tokens as f64 / s) } else { "inf".into() }
}

/// Case 1: single-request latency, after `warmup_rounds` discarded rounds.
pub async fn single(s: &Suite) -> CaseResult {
    let mut c = CaseResult::new("single", "single request after a discarded warmup round");
    let prompt = s.prompts.prompt("single", 0, s.prompt_len);
    let body = s.completion_body("single", &prompt, s.budget, false);
    let mut warm: Option<Answer> = None;
    for r in 0..s.warmup_rounds {
        let sent = s.send(Api::Completions, &body, s.budget).await;
        let key = if s.warmup_rounds == 1 { "warmup".to_string() } else { format!("warmup_{r}") };
        if let Some(d) = sent.latency() {
            c.time(&key, d);
        }
        sent.fail_into(&mut c, &format!("warmup round {r}"));
        warm = sent.answer.ok().or(warm);
    }
    let sent = s.send(Api::Completions, &body, s.budget).await;
    if let Some(d) = sent.latency() {
        c.time("measured", d);
        c.finding(format!("measured {} output tok/s", tok_per_s(u64::from(s.budget), d)));
    }
    if !sent.fail_into(&mut c, "measured request")
        && let (Ok(a), Some(w)) = (&sent.answer, &warm)
    {
        c.count("completion_tokens", a.completion_tokens);
        if let Err(e) = check::same_answer(a, w) {
            c.finding(format!("the measured answer differs from the warmup answer to the same payload: {e}"));
        }
    }
    c.count("warmup_rounds", u64::from(s.warmup_rounds));
    c
}

/// Case 2 (one level): `n` requests sent one by one, then the same `n` at once.
pub async fn concurrent(s: &Suite, n: u32) -> (CaseResult, LevelData) {
    let name = format!("concurrent_{n}");
    let mut c = CaseResult::new(&name, &format!("{n} simultaneous non-streaming requests vs the serial sum"));
    let prompts = s.prompts.distinct(&name, n as usize, s.prompt_len);
    let bodies: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| s.completion_body(&format!("{name}/{i}"), p, s.budget, false))
        .collect();
    let mut serial_sum = Duration::ZERO;
    let mut serial = Vec::with_capacity(bodies.len());
    for (i, b) in bodies.iter().enumerate() {
        let sent = s.send(Api::Completions, b, s.budget).await;
        serial_sum += sent.latency().unwrap_or_default();
        sent.fail_into(&mut c, &format!("serial request {i}"));
        serial.push(sent.answer.ok());
    }
    let t0 = Instant::now();
    let sent: Vec<Sent> = join_all(bodies.iter().map(|b| s.send(Api::Completions, b, s.budget))).await;
    let wall = t0.elapsed();
    let latencies: Vec<Duration> = sent.iter().filter_map(Sent::latency).collect();
    let mut tokens = 0u64;
    for (i, x) in sent.iter().enumerate() {
        x.fail_into(&mut c, &format!("concurrent request {i} of {n}"));
        tokens += x.answer.as_ref().map_or(0, |a| a.completion_tokens);
    }
    let valid = sent.iter().filter(|x| x.answer.is_ok()).count();
    c.count("requests", u64::from(n));
    c.count("valid_serial", serial.iter().filter(|a| a.is_some()).count() as u64);
    c.count("valid_concurrent", valid as u64);
    c.count("completion_tokens", tokens);
    c.time("serial_sum", serial_sum);
    c.time("wall", wall);
    if let Some(max) = latencies.iter().max() {
        c.time("max_latency", *max);
        c.time("mean_latency", latencies.iter().sum::<Duration>() / latencies.len() as u32);
    }
    if wall > Duration::ZERO {
        let speedup = serial_sum.as_secs_f64() / wall.as_secs_f64();
        c.secs("speedup_x", speedup);
        c.finding(format!(
            "wall-time speedup {speedup:.2}x over the serial sum; {} output tok/s concurrent vs {} serial",
            tok_per_s(tokens, wall),
            tok_per_s(u64::from(n) * u64::from(s.budget), serial_sum)
        ));
    }
    let concurrent = sent.into_iter().map(|x| x.answer.ok()).collect();
    (c, LevelData { n, serial, concurrent })
}

/// Case 3: every concurrent answer equals the serial answer to the same payload.
pub fn isolation(levels: &[LevelData]) -> CaseResult {
    let mut c = CaseResult::new("isolation", "concurrent greedy answers equal the same payloads sent alone");
    let (mut compared, mut mismatched, mut by_ids) = (0u64, 0u64, true);
    for l in levels {
        for (i, (a, b)) in l.concurrent.iter().zip(&l.serial).enumerate() {
            let (Some(conc), Some(alone)) = (a, b) else { continue };
            compared += 1;
            by_ids &= conc.token_ids.is_some() && alone.token_ids.is_some();
            let Err(e) = check::same_answer(conc, alone) else { continue };
            mismatched += 1;
            let twin = l
                .serial
                .iter()
                .enumerate()
                .find(|(j, other)| *j != i && other.as_ref().is_some_and(|o| check::same_answer(conc, o).is_ok()));
            match twin {
                Some((j, _)) => {
                    c.fail(format!("level {}: request {i} got request {j}'s answer (cross-request mixing); {e}", l.n))
                }
                None => c.fail(format!("level {}: request {i} differs from its answer when sent alone: {e}", l.n)),
            }
            c.evidence(&format!("level_{}_request_{i}", l.n), json!({"concurrent": conc, "alone": alone}));
        }
    }
    c.count("pairs_compared", compared);
    c.count("pairs_mismatched", mismatched);
    if compared == 0 {
        c.fail("no request was valid both alone and concurrently: nothing to compare");
    } else {
        c.finding(format!("compared by {}", if by_ids { "token ids" } else { "text (no token ids on both sides)" }));
    }
    c
}

/// Case 4: a long request, then a short one `SHORT_DELAY` later; both must complete.
pub async fn long_short(s: &Suite) -> CaseResult {
    let mut c = CaseResult::new("long_short", "long request first, short request 0.5 s later");
    let long_budget = s.budget.saturating_mul(4);
    let mut long_len = s.long_prompt_len;
    if let Some(ctx) = s.max_context {
        let room = (ctx as usize).saturating_sub(long_budget as usize + 8);
        if room < long_len {
            c.finding(format!("long prompt cut from {long_len} to {room} units to fit the context of {ctx}"));
            long_len = room.max(s.prompt_len);
        }
    }
    let long = s.completion_body("long_short/long", &s.prompts.prompt("long", 0, long_len), long_budget, false);
    let short = s.completion_body("long_short/short", &s.prompts.prompt("short", 0, s.prompt_len), s.budget, false);
    let t0 = Instant::now();
    let long_fut = async {
        let x = s.send(Api::Completions, &long, long_budget).await;
        (x, t0.elapsed())
    };
    let short_fut = async {
        tokio::time::sleep(SHORT_DELAY).await;
        let x = s.send(Api::Completions, &short, s.budget).await;
        (x, t0.elapsed())
    };
    let ((l, l_done), (sh, sh_done)) = tokio::join!(long_fut, short_fut);
    l.fail_into(&mut c, "long request");
    sh.fail_into(&mut c, "short request");
    c.count("long_prompt_units", long_len as u64);
    c.count("long_completion_tokens", l.answer.as_ref().map_or(0, |a| a.completion_tokens));
    c.count("short_completion_tokens", sh.answer.as_ref().map_or(0, |a| a.completion_tokens));
    if let (Some(ll), Some(sl)) = (l.latency(), sh.latency()) {
        c.time("long_latency", ll);
        c.time("short_latency", sl);
        c.time("wall", l_done.max(sh_done));
        let order = if sh_done < l_done { "before" } else { "after" };
        c.finding(format!(
            "the short request finished {order} the long one (short done {:.3} s, long done {:.3} s after the long was sent)",
            sh_done.as_secs_f64(),
            l_done.as_secs_f64()
        ));
        c.count("short_finished_first", u64::from(sh_done < l_done));
        if l_done <= SHORT_DELAY {
            c.finding("the long request was done before the short one was sent: no overlap to observe");
        }
    }
    c
}
