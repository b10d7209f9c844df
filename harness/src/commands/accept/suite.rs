//! One acceptance run against one base URL: discovery (model, dialect, context
//! length), payload building (each body built once and its SHA-256 recorded), and
//! the cases in their fixed order. Owns the order and the shared request helpers.
//! Must not start or stop servers (`arm`) or write files (`mod`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde_json::Value;

use super::check::{self, Answer, Api};
use super::http::{Http, Reply};
use super::outcome::{AcceptOutcome, CaseResult, PayloadRecord, ServerInfo};
use super::payload::{Prompt, PromptGen};
use super::{AcceptArgs, AcceptError, CaseGroup, cases_load, cases_server, cases_stream};
use crate::arm::{Adapter, ServerKind, ServerKindArg};
use crate::evidence::sha256_hex;
use crate::protocol::routes::{MODELS_PATH, PROPS_PATH};

/// Everything the cases share.
pub struct Suite {
    pub http: Http,
    pub adapter: Adapter,
    pub model: String,
    /// Completion tokens of every ordinary request (`--max-tokens`).
    pub budget: u32,
    pub prompts: PromptGen,
    pub prompt_len: usize,
    pub long_prompt_len: usize,
    pub max_context: Option<u64>,
    pub levels: Vec<u32>,
    pub warmup_rounds: u32,
    pub chat: bool,
    pub metrics_settle: Duration,
    payloads: Mutex<Vec<PayloadRecord>>,
}

/// A non-streamed request and its verdict.
pub struct Sent {
    pub body: Bytes,
    pub reply: Result<Reply, String>,
    pub answer: Result<Answer, String>,
}

impl Sent {
    pub fn latency(&self) -> Option<Duration> {
        self.reply.as_ref().ok().map(Reply::elapsed)
    }

    pub fn answer_text(&self) -> String {
        match &self.reply {
            Ok(r) => r.text.clone(),
            Err(e) => format!("(no answer: {e})"),
        }
    }

    /// Records a failure with this request's payload and answer when it is invalid.
    pub fn fail_into(&self, case: &mut CaseResult, what: &str) -> bool {
        match &self.answer {
            Ok(_) => false,
            Err(e) => {
                case.fail_with(format!("{what}: {e}"), &self.body, &self.answer_text());
                true
            }
        }
    }
}

async fn get_json(http: &Http, path: &str) -> Option<Value> {
    http.get(path).await.ok().filter(|r| r.status == 200).and_then(|r| r.json())
}

impl Suite {
    /// Discovers the model, dialect and context length of the server at `http`.
    pub async fn discover(
        http: Http,
        args: &AcceptArgs,
        model_hint: Option<&str>,
    ) -> Result<(Suite, ServerInfo), AcceptError> {
        let models = get_json(&http, MODELS_PATH).await;
        let entries = models.as_ref().and_then(|m| m.get("data")).and_then(Value::as_array);
        let wanted = args.model.as_deref().or(model_hint);
        let entry = entries.and_then(|e| {
            e.iter().find(|m| wanted.is_some_and(|w| m.get("id").and_then(Value::as_str) == Some(w))).or(e.first())
        });
        let model = match (wanted, entry.and_then(|m| m.get("id")).and_then(Value::as_str)) {
            (Some(w), _) => w.to_string(),
            (None, Some(id)) => id.to_string(),
            (None, None) => {
                return Err(AcceptError::Discovery(format!("{}/v1/models gave no model id; pass --model", http.base)));
            }
        };
        let props = get_json(&http, PROPS_PATH).await;
        let (kind, kind_source) = match args.server_kind {
            ServerKindArg::Auto => ServerKind::detect(entry, props.as_ref()),
            ServerKindArg::OpenaiVllm => (ServerKind::OpenAiVllm, "--server-kind".into()),
            ServerKindArg::LlamaCpp => (ServerKind::LlamaCpp, "--server-kind".into()),
        };
        let adapter = Adapter::new(kind);
        let max_context = adapter.max_context(entry, props.as_ref());
        let info = ServerInfo {
            url: http.base.clone(),
            kind: kind.as_str().into(),
            kind_source,
            model: model.clone(),
            max_context,
            arm: None,
            server_log: None,
            startup_s: None,
            stop: None,
        };
        let suite = Suite {
            http,
            adapter,
            model,
            budget: args.max_tokens,
            prompts: PromptGen {
                seed: args.seed,
                text: args.text_prompts,
                id_lo: args.min_token_id,
                id_hi: args.max_token_id.saturating_add(1),
            },
            prompt_len: args.prompt_tokens as usize,
            long_prompt_len: args.long_prompt_tokens as usize,
            max_context,
            levels: args.levels.clone(),
            warmup_rounds: args.warmup_rounds,
            chat: !args.no_chat,
            metrics_settle: Duration::from_secs_f64(args.metrics_settle_s),
            payloads: Mutex::new(Vec::new()),
        };
        Ok((suite, info))
    }

    /// Serializes a body once and records its digest under `name`.
    pub fn body(&self, name: &str, v: &Value) -> Bytes {
        let bytes = serde_json::to_vec(v).unwrap_or_default();
        self.record(name, &bytes);
        Bytes::from(bytes)
    }

    pub fn record(&self, name: &str, bytes: &[u8]) {
        if let Ok(mut p) = self.payloads.lock() {
            p.push(PayloadRecord { name: name.into(), bytes: bytes.len(), sha256: sha256_hex(bytes) });
        }
    }

    pub fn completion_body(&self, name: &str, prompt: &Prompt, max_tokens: u32, stream: bool) -> Bytes {
        self.body(name, &self.adapter.completion(&self.model, prompt.to_json(), max_tokens, stream))
    }

    pub fn chat_body(&self, name: &str, text: &str, max_tokens: u32, stream: bool) -> Bytes {
        self.body(name, &self.adapter.chat(&self.model, text, max_tokens, stream))
    }

    /// Sends a non-streamed request and checks it against `budget`.
    pub async fn send(&self, api: Api, body: &Bytes, budget: u32) -> Sent {
        let reply = self.http.post(api.path(), body.clone()).await;
        let answer = match &reply {
            Ok(r) => check::completion(r, api, &self.adapter, budget),
            Err(e) => Err(e.clone()),
        };
        Sent { body: body.clone(), reply, answer }
    }

    /// Runs the selected cases in order.
    pub async fn run(&self, only: &[CaseGroup]) -> Vec<CaseResult> {
        let on = |g: CaseGroup| only.is_empty() || only.contains(&g);
        let mut cases = Vec::new();
        if on(CaseGroup::Single) {
            cases.push(cases_load::single(self).await);
        }
        if on(CaseGroup::Concurrent) {
            let mut levels = Vec::new();
            for &n in &self.levels {
                let (case, data) = cases_load::concurrent(self, n).await;
                cases.push(case);
                levels.push(data);
            }
            cases.push(cases_load::isolation(&levels));
        }
        if on(CaseGroup::LongShort) {
            cases.push(cases_load::long_short(self).await);
        }
        if on(CaseGroup::Streams) {
            cases.push(cases_stream::streams(self, Api::Completions).await);
            if self.chat {
                cases.push(cases_stream::streams(self, Api::Chat).await);
            }
        }
        if on(CaseGroup::Disconnect) {
            cases.push(cases_stream::disconnect(self).await);
        }
        if on(CaseGroup::Validation) {
            cases.push(cases_server::validation(self).await);
        }
        if on(CaseGroup::Metrics) {
            cases.extend(cases_server::metrics(self).await);
        }
        cases
    }

    /// Wraps the cases into the outcome.
    pub fn outcome(&self, server: ServerInfo, settings: Value, cases: Vec<CaseResult>, t0: Instant) -> AcceptOutcome {
        let payloads = self.payloads.lock().map(|p| p.clone()).unwrap_or_default();
        let digests: String = payloads.iter().map(|p| format!("{} {}\n", p.name, p.sha256)).collect();
        let mut o = AcceptOutcome {
            server,
            settings,
            cases,
            payload_set_sha256: sha256_hex(digests.as_bytes()),
            payloads,
            passed: 0,
            failed: 0,
            skipped: 0,
            wall_s: t0.elapsed().as_secs_f64(),
        };
        o.tally();
        o
    }
}
