//! The prompt panel: for each context length L of the plan, N prompts of exactly L
//! token IDs, cut deterministically from natural text (through an injected
//! `Encoder`), from a JSONL of token IDs, or drawn at random for synthetic models;
//! and its file, `prompts.jsonl`. Must not link a tokenizer: the caller supplies the
//! encoder for the plan's tokenizer file (the harness never links the engine).
//!
//! Cutting, for length L and document j in 0..N (the panel lists lengths in plan
//! order, N prompts each, so prompt index = length position * N + j):
//! - text: files in `prompts.texts` matching `prompts.pattern`, sorted by name, each
//!   encoded whole (no special tokens); those with at least L tokens are eligible;
//!   document j uses eligible file j mod E;
//! - jsonl: each line `{"tokens": [..]}` is a document (other keys are ignored);
//!   those with at least L tokens are eligible, document j uses line j mod E;
//! - both then take the L tokens starting at offset o, drawn uniformly in 0..=T-L
//!   from the prompt seed (study seed, L, j; see `seed`);
//! - random: L token IDs uniform in min..=max from the same prompt seed.
//!
//! A dataset panel (`sharegpt`, `requests`, `synthetic`; see `sources`) is instead
//! `num_requests` entries of their own lengths, in the order the source fixes; each
//! line then also carries the entry's own output length (when the source has one),
//! the `max_tokens` its request sends and whether EOS is ignored, so that every
//! per-request setting is in `prompts.jsonl` before the first request. When any
//! cell is on the chat endpoint (`cells[].endpoint`, else `request.endpoint`) each
//! line also carries the chat messages its chat requests send (hashed with the rest
//! of the file, so replay checks them); its `tokens` are what the cells on
//! `/v1/completions` send, so one panel serves both routes.
//!
//! A session panel (`prompts.max_turns`, chat only) is a dataset panel whose line
//! is the session's first request (as above) plus `next_turns`: each later user
//! turn's text, its token count, its own output length and the `max_tokens` its
//! request sends (`RequestSpec::max_tokens_for`, like the first turn's). The replies
//! that go into later turns' history are not known before the run: they are
//! recorded with each turn's record (`record::TurnRecord`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::TraceError;
use super::sources;
use crate::plan::seed::{below, prompt_seed, rng};
use crate::plan::{Endpoint, PanelSource, Plan, SyntheticTokens};

/// Turns text into token IDs. Implemented by the caller for the plan's tokenizer.
pub trait Encoder {
    /// Token IDs of `text`, with no special tokens added (no BOS/EOS).
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;

    /// Token IDs of each text, as [`Encoder::encode`] gives them (an implementation
    /// may encode in parallel).
    fn encode_batch(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, String> {
        texts.iter().map(|t| self.encode(t)).collect()
    }

    /// The text of `ids`, special tokens kept (Hugging Face's `decode` defaults),
    /// for sources that decode (vLLM's random dataset). Encoders that cannot say so.
    fn decode(&self, _ids: &[u32]) -> Result<String, String> {
        Err("this tokenizer cannot decode".into())
    }

    /// What vLLM's random dataset reads from a tokenizer besides encode and decode;
    /// `None` from encoders that cannot say.
    fn vocabulary(&self) -> Option<Vocabulary> {
        None
    }
}

/// A tokenizer's vocabulary as vLLM's random dataset reads it from a Hugging Face
/// tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocabulary {
    /// `tokenizer.vocab_size`: the model vocabulary without added tokens.
    pub size: u32,
    /// `tokenizer.all_special_ids`: here the added tokens marked special.
    pub special_ids: Vec<u32>,
    /// `tokenizer.num_special_tokens_to_add()`: what its post-processor adds to one
    /// sequence.
    pub special_tokens_to_add: u32,
}

/// One line of `prompts.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// Position in the panel (what traces refer to).
    pub index: u64,
    /// Exact token count: `tokens.len()`.
    pub length: u32,
    /// Document number within its length, 0..N.
    pub doc: u32,
    /// Where it was cut from: a file name, `<path>:<line>` or `random`.
    pub source: String,
    /// Token offset of the cut in its source document.
    pub offset: u64,
    /// Dataset panels: the entry's own output length (e.g. the token count of a
    /// ShareGPT answer), when the source gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// Dataset panels: the `max_tokens` this entry's request sends
    /// (`RequestSpec::max_tokens_for`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Dataset panels: whether this entry's request ignores EOS (forced output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    pub tokens: Vec<u32>,
    /// `request.endpoint = "chat"`: the chat messages this entry's request sends
    /// (`tokens` is then their contents encoded, for lengths only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<ChatMessage>>,
    /// A session panel: the user turns after the first, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_turns: Option<Vec<SessionTurn>>,
}

/// One user turn after a session's first (`Prompt::next_turns`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionTurn {
    /// Token count of `content` (the panel's tokenizer, no template).
    pub length: u32,
    /// The turn's own output length (the answer's token count), when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// The `max_tokens` this turn's request sends (set by the panel from the plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The user message's text.
    pub content: String,
}

/// One chat message of a panel entry (`{"role", "content"}`, as sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panel {
    pub prompts: Vec<Prompt>,
}

/// A source document as token IDs.
pub(super) struct Doc {
    pub name: String,
    pub tokens: Vec<u32>,
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, suf)) => name.len() >= pre.len() + suf.len() && name.starts_with(pre) && name.ends_with(suf),
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TraceError + '_ {
    move |error| TraceError::Io { path: path.to_path_buf(), error }
}

pub(super) fn text_docs(dir: &Path, pattern: &str, enc: &dyn Encoder) -> Result<Vec<Doc>, TraceError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| matches(pattern, n))
        .collect();
    names.sort();
    let mut docs = Vec::with_capacity(names.len());
    for name in names {
        let path = dir.join(&name);
        let text = crate::evidence::read_input_text(&path).map_err(io_err(&path))?;
        let tokens = enc.encode(&text).map_err(|message| TraceError::Encode { file: name.clone(), message })?;
        docs.push(Doc { name, tokens });
    }
    Ok(docs)
}

#[derive(Deserialize)]
struct JsonlDoc {
    tokens: Vec<u32>,
}

fn jsonl_docs(path: &Path, label: &str) -> Result<Vec<Doc>, TraceError> {
    let text = crate::evidence::read_input_text(path).map_err(io_err(path))?;
    let mut docs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let d: JsonlDoc = serde_json::from_str(line).map_err(|e| TraceError::Malformed {
            what: format!("{}, line {}", path.display(), n + 1),
            message: e.to_string(),
        })?;
        docs.push(Doc { name: format!("{label}:{}", n + 1), tokens: d.tokens });
    }
    Ok(docs)
}

/// Builds the plan's panel. Relative source paths are joined to `base` (the working
/// directory the plan is run from). A text panel needs `encoder`.
pub fn build_panel(plan: &Plan, base: &Path, encoder: Option<&dyn Encoder>) -> Result<Panel, TraceError> {
    let spec = &plan.prompts;
    if spec.source.is_dataset() {
        return dataset_panel(plan, base, encoder);
    }
    let docs = match &spec.source {
        PanelSource::Text { dir, pattern, tokenizer } => {
            let enc = encoder.ok_or_else(|| TraceError::NoEncoder { tokenizer: tokenizer.clone() })?;
            Some(text_docs(&base.join(dir), pattern, enc)?)
        }
        PanelSource::Jsonl { path } => Some(jsonl_docs(&base.join(path), path)?),
        PanelSource::Random { .. } => None,
        PanelSource::ShareGpt(_)
        | PanelSource::Requests { .. }
        | PanelSource::Synthetic(_)
        | PanelSource::SharedPrefix(_)
        | PanelSource::VllmRandom(_)
        | PanelSource::VllmBurstGpt(_)
        | PanelSource::VllmPrefixRepetition(_) => None,
    };
    let mut prompts = Vec::new();
    for &length in &spec.lengths {
        let eligible: Vec<&Doc> = docs.iter().flatten().filter(|d| d.tokens.len() >= length as usize).collect();
        if docs.is_some() && eligible.is_empty() {
            return Err(TraceError::Malformed {
                what: "prompts".into(),
                message: format!("no source document has at least {length} tokens"),
            });
        }
        for doc in 0..spec.documents {
            let mut r = rng(prompt_seed(plan.study.seed, length, doc));
            let index = prompts.len() as u64;
            let prompt = match &spec.source {
                PanelSource::Random { min_token_id, max_token_id } => {
                    let span = u64::from(max_token_id - min_token_id) + 1;
                    let tokens = (0..length).map(|_| min_token_id + below(&mut r, span) as u32).collect();
                    Prompt { index, length, doc, source: "random".into(), offset: 0, tokens, ..Prompt::fixed() }
                }
                _ => {
                    let d = eligible[doc as usize % eligible.len()];
                    let room = (d.tokens.len() - length as usize) as u64 + 1;
                    let offset = below(&mut r, room);
                    let start = offset as usize;
                    let tokens = d.tokens[start..start + length as usize].to_vec();
                    Prompt { index, length, doc, source: d.name.clone(), offset, tokens, ..Prompt::fixed() }
                }
            };
            prompts.push(prompt);
        }
    }
    Ok(Panel { prompts })
}

impl Prompt {
    /// The dataset-only fields of a fixed-length panel's line (all absent).
    fn fixed() -> Prompt {
        Prompt {
            index: 0,
            length: 0,
            doc: 0,
            source: String::new(),
            offset: 0,
            output_tokens: None,
            max_tokens: None,
            ignore_eos: None,
            tokens: Vec::new(),
            messages: None,
            next_turns: None,
        }
    }
}

/// A dataset panel: the source's entries in its order, with each request's
/// `max_tokens` and EOS flag fixed from the plan.
fn dataset_panel(plan: &Plan, base: &Path, encoder: Option<&dyn Encoder>) -> Result<Panel, TraceError> {
    let spec = &plan.prompts;
    let n = spec.documents as usize;
    let seed = plan.study.seed;
    let need = |tokenizer: &str| encoder.ok_or_else(|| TraceError::NoEncoder { tokenizer: tokenizer.to_string() });
    let routes = line_routes(plan);
    let chat = routes.chat.is_some();
    let entries = match &spec.source {
        PanelSource::ShareGpt(g) => {
            sources::sharegpt_sessions(g, &base.join(&g.path), need(&g.tokenizer)?, seed, n, chat, spec.max_turns)?
        }
        PanelSource::Requests { path, .. } => {
            sources::requests_sessions(&base.join(path), path, encoder, n, &routes, spec.max_turns)?
        }
        PanelSource::Synthetic(y) => match &y.tokens {
            SyntheticTokens::Text { texts, tokenizer, .. } => {
                sources::synthetic(y, &base.join(texts), need(tokenizer)?, seed, n, chat)?
            }
            SyntheticTokens::Random { .. } => sources::synthetic_random(y, seed, n),
        },
        PanelSource::SharedPrefix(s) => sources::shared_prefix(s, &base.join(&s.texts), need(&s.tokenizer)?, seed)?,
        PanelSource::VllmRandom(v) => sources::vllm_random(v, need(&v.tokenizer)?, seed, n)?,
        PanelSource::VllmBurstGpt(b) => sources::vllm_burstgpt(b, &base.join(&b.path), need(&b.tokenizer)?, seed, n)?,
        PanelSource::VllmPrefixRepetition(v) => sources::vllm_prefix_repetition(v, need(&v.tokenizer)?, seed, n)?,
        PanelSource::Text { .. } | PanelSource::Jsonl { .. } | PanelSource::Random { .. } => Vec::new(),
    };
    let r = &plan.request;
    let mut prompts = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let length = u32::try_from(e.tokens.len()).map_err(|_| TraceError::Malformed {
            what: e.source.clone(),
            message: format!("{} prompt tokens is too many", e.tokens.len()),
        })?;
        prompts.push(Prompt {
            index: i as u64,
            length,
            doc: i as u32,
            source: e.source,
            offset: e.offset,
            output_tokens: spec.output_len.or(e.output_tokens),
            max_tokens: Some(r.max_tokens_for(spec.output_len.or(e.output_tokens))),
            ignore_eos: Some(r.ignore_eos),
            tokens: e.tokens,
            messages: if chat { e.messages } else { None },
            next_turns: spec.max_turns.map(|_| {
                let turn = |t: sources::SessionTurn| sources::SessionTurn {
                    max_tokens: Some(r.max_tokens_for(t.output_tokens)),
                    ..t
                };
                e.next_turns.into_iter().map(turn).collect()
            }),
        });
    }
    Ok(Panel { prompts })
}

/// The endpoints the plan's cells send to, each named by its first cell.
fn line_routes(plan: &Plan) -> sources::LineRoutes {
    let who = |e: Endpoint| plan.cells.iter().find(|c| c.endpoint == e).map(|c| format!("cell {:?}", c.name));
    let mut routes = sources::LineRoutes { chat: who(Endpoint::Chat), completions: who(Endpoint::Completions) };
    // A plan without cells (a bare panel): the study's endpoint.
    if routes.chat.is_none() && routes.completions.is_none() {
        routes = sources::LineRoutes::single(plan.request.endpoint == Endpoint::Chat, "request.endpoint");
    }
    routes
}

impl Panel {
    /// `prompts.jsonl` text: one prompt per line, fixed key order, `\n`-terminated.
    pub fn to_jsonl(&self) -> String {
        let mut s = String::new();
        for p in &self.prompts {
            // Serializing plain integers and strings cannot fail.
            s.push_str(&serde_json::to_string(p).unwrap_or_default());
            s.push('\n');
        }
        s
    }

    pub fn from_jsonl(text: &str) -> Result<Panel, TraceError> {
        let prompts = text
            .lines()
            .enumerate()
            .map(|(n, line)| {
                serde_json::from_str(line).map_err(|e| TraceError::Malformed {
                    what: format!("prompts.jsonl, line {}", n + 1),
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<Prompt>, _>>()?;
        Ok(Panel { prompts })
    }

    /// Checks the panel has the plan's shape: N prompts per length, in order, each of
    /// exactly its length; for a dataset panel, N entries in order, each sending the
    /// `max_tokens` and EOS flag the plan gives its own output length.
    pub fn check(&self, plan: &Plan) -> Result<(), TraceError> {
        let spec = &plan.prompts;
        let dataset = spec.source.is_dataset();
        let want = if dataset { spec.documents as usize } else { spec.lengths.len() * spec.documents as usize };
        let bad = |message: String| TraceError::Malformed { what: crate::evidence::PROMPTS_FILE.into(), message };
        if self.prompts.len() != want {
            return Err(bad(format!("{} prompts, the plan needs {want}", self.prompts.len())));
        }
        for (i, p) in self.prompts.iter().enumerate() {
            if dataset {
                let shape = p.index == i as u64 && p.doc as usize == i && p.length as usize == p.tokens.len();
                if !shape || p.tokens.is_empty() {
                    return Err(bad(format!("prompt {i} is not entry {i} with as many tokens as its length")));
                }
                let max_tokens = plan.request.max_tokens_for(p.output_tokens);
                if p.max_tokens != Some(max_tokens) || p.ignore_eos != Some(plan.request.ignore_eos) {
                    return Err(bad(format!(
                        "prompt {i} sends max_tokens {:?} and ignore_eos {:?}; the plan gives {max_tokens} and {}",
                        p.max_tokens, p.ignore_eos, plan.request.ignore_eos
                    )));
                }
                check_session(p, plan).map_err(|m| bad(format!("prompt {i}: {m}")))?;
                continue;
            }
            let length = spec.lengths[i / spec.documents as usize];
            let doc = (i % spec.documents as usize) as u32;
            if p.index != i as u64 || p.length != length || p.doc != doc || p.tokens.len() != length as usize {
                return Err(bad(format!("prompt {i} is not document {doc} of exactly {length} tokens")));
            }
            if p.output_tokens.is_some() || p.max_tokens.is_some() || p.ignore_eos.is_some() {
                return Err(bad(format!("prompt {i} carries dataset fields, but the panel has fixed lengths")));
            }
        }
        Ok(())
    }

    /// Requests entry `index` sends: 1 + its later session turns.
    pub fn turns_of(&self, index: u64) -> u32 {
        self.get(index).map_or(1, Prompt::turns)
    }

    pub fn get(&self, index: u64) -> Option<&Prompt> {
        self.prompts.get(usize::try_from(index).ok()?)
    }
}

impl Prompt {
    /// Requests this entry sends: 1, or 1 + its later turns for a session.
    pub fn turns(&self) -> u32 {
        1 + self.next_turns.as_ref().map_or(0, |t| t.len() as u32)
    }
}

/// A line's session fields against the plan: present exactly on a session panel,
/// each later turn of exactly its length with the `max_tokens` the plan gives it,
/// and chat messages to start from.
pub fn check_session(p: &Prompt, plan: &Plan) -> Result<(), String> {
    let Some(turns) = &p.next_turns else {
        return match plan.prompts.max_turns {
            Some(_) => Err("no next_turns, but the panel holds sessions (prompts.max_turns)".into()),
            None => Ok(()),
        };
    };
    let Some(max_turns) = plan.prompts.max_turns else {
        return Err("carries next_turns, but the plan sets no prompts.max_turns".into());
    };
    if p.messages.is_none() {
        return Err("a session needs the first turn's chat messages".into());
    }
    if turns.len() as u32 >= max_turns {
        return Err(format!("{} turns, more than prompts.max_turns = {max_turns}", turns.len() + 1));
    }
    for (k, t) in turns.iter().enumerate() {
        let want = plan.request.max_tokens_for(t.output_tokens);
        if t.max_tokens != Some(want) {
            return Err(format!("turn {} sends max_tokens {:?}; the plan gives {want}", k + 1, t.max_tokens));
        }
        if t.length == 0 || t.content.is_empty() {
            return Err(format!("turn {} is empty", k + 1));
        }
    }
    Ok(())
}
