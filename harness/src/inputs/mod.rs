//! The study's inputs, fixed before any server starts: the prompt panel (text panels
//! cut through a `tokenizers` encoder loaded from the plan's tokenizer.json), the
//! traces and catalog written to `inputs/`, then read back from those files, verified
//! against the catalog, and turned into one request body per panel prompt for each
//! endpoint the cells send to (`Plan::endpoints`: a cell on `/v1/completions` sends
//! an entry's token IDs, one on the chat endpoint its messages). Every arm of every
//! block sends these bytes. Shared by `run`, `compare`, `bench-loadgen` and the
//! trace command. Owns `InputsError`. Must not read settings from anywhere but the
//! frozen plan, and must not send anything.

use std::collections::BTreeMap;
use std::path::Path;

use axum::body::Bytes;

use std::path::PathBuf;

use crate::evidence::{PROMPTS_FILE, sha256_hex};
use crate::load::LoadError;
use crate::load::{PreparedRequest, SessionScript, prepare as prepare_request, stream_body_with};
use crate::plan::PlanError;
use crate::plan::{BodyKind, Plan};
use crate::trace::{self, Encoder, Panel, Trace, TraceError};

mod encoder;
pub mod hf_cache;

pub use encoder::TokenizerEncoder;

/// Why the study's inputs could not be built or read back.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

impl crate::BadInput for InputsError {
    /// The plan, its traces, datasets and tokenizer; not an I/O failure of `inputs/`.
    fn is_bad_input(&self) -> bool {
        match self {
            InputsError::Plan(p) => p.is_bad_input(),
            InputsError::Trace(t) => t.is_bad_input(),
            InputsError::Tokenizer { .. } => true,
            InputsError::Load(_) | InputsError::Io { .. } => false,
        }
    }
}

/// Everything the cells send, read back from `inputs/`.
pub struct Inputs {
    pub panel: Panel,
    /// One trace per cell, in plan order.
    pub traces: Vec<Trace>,
    /// Per kind of body the cells send (route, token IDs asked for): the prepared
    /// request (body, prompt length, max_tokens) per panel index.
    pub bodies: BTreeMap<BodyKind, Vec<PreparedRequest>>,
    /// SHA-256 of each body (`run.json` `request_body_sha256.<kind key>`), per
    /// kind (`BodyKind::key`) and panel index.
    pub body_sha256: BTreeMap<String, Vec<String>>,
    /// Per cell whose trace sets each request's output length (`trace_lengths`):
    /// SHA-256 of each entry's body, in trace order (`run.json`).
    pub entry_body_sha256: BTreeMap<String, Vec<String>>,
    /// A session panel (`prompts.max_turns`): each entry's session script (turn 0's
    /// body is `bodies[i]`; later turns' depend on the replies); `None` otherwise.
    pub sessions: Option<Vec<std::sync::Arc<SessionScript>>>,
}

impl Inputs {
    pub fn trace(&self, cell: &str) -> Option<&Trace> {
        self.traces.iter().find(|t| t.cell == cell)
    }

    /// The bodies of kind `kind`, per panel index (empty when no cell sends it:
    /// the dispatcher then names every missing prompt).
    pub fn bodies_for(&self, kind: BodyKind) -> &[PreparedRequest] {
        self.bodies.get(&kind).map_or(&[], Vec::as_slice)
    }

    /// Records cell `cell` holds when every request is sent: one per trace entry, or
    /// for a session panel every turn of every session.
    pub fn planned_records(&self, cell: &str) -> Option<u64> {
        let trace = self.trace(cell)?;
        Some(match &self.sessions {
            None => trace.entries.len() as u64,
            Some(_) => trace.entries.iter().map(|e| u64::from(self.panel.turns_of(e.prompt))).sum(),
        })
    }

    /// One body per entry when the cell's trace sets per-request output lengths
    /// (`trace_lengths`): entry i's panel prompt with its row's output length as
    /// `max_tokens`; `None` for every other cell (bodies per panel prompt).
    pub fn entry_bodies(&self, plan: &Plan, cell: &str) -> Option<Vec<Bytes>> {
        let trace = self.trace(cell)?;
        if trace.entries.iter().all(|e| e.output_length.is_none()) {
            return None;
        }
        let kind = plan.body_kind_of(cell);
        let bodies = trace.entries.iter().map(|e| {
            let prompt = usize::try_from(e.prompt).ok().and_then(|i| self.panel.prompts.get(i))?;
            let out = e.output_length.unwrap_or(prompt.max_tokens.unwrap_or(plan.request.output_tokens));
            Some(Bytes::from(stream_body_with(plan, kind, prompt, out)))
        });
        // A missing prompt: the per-prompt bodies are used and the dispatcher names it.
        bodies.collect()
    }
}

/// Builds the panel (relative sources under `base`), writes `inputs_dir`, verifies it
/// and reads it back.
pub fn prepare(plan: &Plan, plan_sha256: &str, base: &Path, inputs_dir: &Path) -> Result<Inputs, InputsError> {
    generate(plan, plan_sha256, base, inputs_dir)?;
    load(plan, inputs_dir)
}

/// [`prepare`] with the panel already built ([`build_panel`]).
pub fn prepare_with(
    plan: &Plan,
    plan_sha256: &str,
    base: &Path,
    inputs_dir: &Path,
    panel: &Panel,
) -> Result<Inputs, InputsError> {
    trace::write_inputs_in(inputs_dir, plan, plan_sha256, Some(panel), base)?;
    load(plan, inputs_dir)
}

/// The panel the plan's `[prompts]` describe: its tokenizer loaded and every
/// source read and cut (relative sources under `base`). Writes nothing: `harness
/// run` builds it before the evidence directory exists, so a bad dataset, tokenizer
/// or FIFO leaves nothing behind.
pub fn build_panel(plan: &Plan, base: &Path) -> Result<Panel, InputsError> {
    let encoder = match plan.prompts.source.tokenizer() {
        Some(tokenizer) => Some(TokenizerEncoder::from_file(&base.join(tokenizer))?),
        None => None,
    };
    Ok(trace::build_panel(plan, base, encoder.as_ref().map(|e| e as &dyn Encoder))?)
}

/// Builds the panel (relative sources under `base`) and writes the prompts, traces
/// and catalog into `inputs_dir` (`--resume` regenerates them elsewhere to compare).
pub fn generate(plan: &Plan, plan_sha256: &str, base: &Path, inputs_dir: &Path) -> Result<(), InputsError> {
    let panel = build_panel(plan, base)?;
    trace::write_inputs_in(inputs_dir, plan, plan_sha256, Some(&panel), base)?;
    Ok(())
}

/// Verifies `inputs_dir` against its catalog and reads it back: from here on, only
/// the files in inputs/ count.
pub fn load(plan: &Plan, inputs_dir: &Path) -> Result<Inputs, InputsError> {
    trace::verify_catalog(inputs_dir)?;
    let path = inputs_dir.join(PROMPTS_FILE);
    let text = std::fs::read_to_string(&path).map_err(|error| InputsError::Io { path, error })?;
    let panel = Panel::from_jsonl(&text)?;
    panel.check(plan)?;
    let traces = plan.cells.iter().map(|c| trace::read_trace(inputs_dir, &c.name)).collect::<Result<Vec<_>, _>>()?;
    let mut bodies = BTreeMap::new();
    let mut body_sha256 = BTreeMap::new();
    for kind in plan.body_kinds() {
        let prepared: Vec<PreparedRequest> = panel.prompts.iter().map(|p| prepare_request(plan, kind, p)).collect();
        body_sha256.insert(kind.key(), prepared.iter().map(|r| sha256_hex(&r.body)).collect());
        bodies.insert(kind, prepared);
    }
    let sessions = match plan.prompts.max_turns {
        None => None,
        Some(_) => Some(
            panel
                .prompts
                .iter()
                .map(|p| {
                    SessionScript::new(plan, p).map(std::sync::Arc::new).ok_or_else(|| trace::TraceError::Malformed {
                        what: PROMPTS_FILE.into(),
                        message: format!("prompt {} is not a chat session", p.index),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let mut inputs = Inputs { panel, traces, bodies, body_sha256, entry_body_sha256: Default::default(), sessions };
    for c in &plan.cells {
        if let Some(bodies) = inputs.entry_bodies(plan, &c.name) {
            inputs.entry_body_sha256.insert(c.name.clone(), bodies.iter().map(|b| sha256_hex(b)).collect());
        }
    }
    Ok(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORD_LEVEL: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"the":0,"cat":1,"sat":2,"[UNK]":3},"unk_token":"[UNK]"}}"#;

    #[test]
    fn encodes_with_a_tokenizer_json_without_special_tokens() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tokenizer.json");
        std::fs::write(&path, WORD_LEVEL).unwrap();
        let enc = TokenizerEncoder::from_file(&path).unwrap();
        assert_eq!(enc.encode("the cat sat the dog").unwrap(), [0, 1, 2, 0, 3]);
        assert_eq!(enc.encode_batch(&["cat the", "sat"]).unwrap(), [vec![1, 0], vec![2]]);
    }

    /// The offset-free encoding gives the IDs the full one does, on a real
    /// byte-level BPE tokenizer when the assets are there (scripts/fetch-assets).
    #[test]
    fn the_fast_encoding_gives_the_same_ids() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/qwen3-tokenizer/tokenizer.json");
        let path = if path.is_file() {
            path
        } else {
            let tmp = std::env::temp_dir().join(format!("harness-word-level-{}.json", std::process::id()));
            std::fs::write(&tmp, WORD_LEVEL).unwrap();
            tmp
        };
        let enc = TokenizerEncoder::from_file(&path).unwrap();
        let texts = ["HAMLET. Who's there?", "  Nay, answer me: stand,\n and unfold yourself. 1234 ", "the cat"];
        for t in texts {
            let full = enc.inner.encode(t, false).unwrap().get_ids().to_vec();
            assert_eq!(enc.encode(t).unwrap(), full, "{t:?}");
        }
        let full: Vec<Vec<u32>> =
            texts.iter().map(|t| enc.inner.encode(*t, false).unwrap().get_ids().to_vec()).collect();
        assert_eq!(enc.encode_batch(&texts).unwrap(), full);
    }

    #[test]
    fn trace_lengths_set_each_request_body_s_max_tokens() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("arr.jsonl"),
            "{\"timestamp\": 0, \"input_length\": 7, \"output_length\": 5}\n\
             {\"timestamp\": 9, \"input_length\": 30, \"output_length\": 2}\n",
        )
        .unwrap();
        let text = "[study]\nname = \"t\"\nseed = 1\n[request]\nmodel = \"m\"\noutput_tokens = 4\n\
             [prompts]\nsource = \"random\"\nlengths = [8, 16]\ndocuments = 2\nmin_token_id = 0\nmax_token_id = 9\n\
             [warmup]\nprompts = 0\n[timing]\nsettle_s = 0\nrequest_timeout_s = 5\ndrain_timeout_s = 5\n\
             [blocks]\ncount = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\
             [[arms]]\nname = \"a\"\nrole = \"control\"\nargv = [\"srv\", \"{port}\"]\nport = 9000\n\
             [[cells]]\nname = \"tr\"\nkind = \"confirmation\"\nload = \"trace\"\ntrace = \"arr.jsonl\"\n\
             count = 2\ntrace_lengths = true\n\
             [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 1\ncount = 2\ninput_tokens = 8\n";
        let plan = crate::plan::parse(text).unwrap();
        let inputs = prepare(&plan, "abc", tmp.path(), &tmp.path().join("inputs")).unwrap();
        let bodies = inputs.entry_bodies(&plan, "tr").unwrap();
        let max_tokens = |b: &Bytes| serde_json::from_slice::<serde_json::Value>(b).unwrap()["max_tokens"].clone();
        assert_eq!((max_tokens(&bodies[0]), max_tokens(&bodies[1])), (5.into(), 2.into()));
        // Request 1 (input 30) sends a 16-token panel prompt; request 0 an 8-token one.
        let prompt_len =
            |b: &Bytes| serde_json::from_slice::<serde_json::Value>(b).unwrap()["prompt"].as_array().unwrap().len();
        assert_eq!((prompt_len(&bodies[0]), prompt_len(&bodies[1])), (8, 16));
        assert!(inputs.entry_bodies(&plan, "c").is_none());
        // run.json lists those per-entry bodies' hashes, for that cell only.
        let hashes: Vec<String> = bodies.iter().map(|b| sha256_hex(b)).collect();
        assert_eq!(inputs.entry_body_sha256.get("tr"), Some(&hashes));
        assert_eq!(inputs.entry_body_sha256.len(), 1);
    }

    #[test]
    fn a_gguf_tokenizer_path_names_the_export_command() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("model.gguf");
        std::fs::write(&path, b"GGUF").unwrap();
        let err = TokenizerEncoder::from_file(&path).err().unwrap().to_string();
        assert!(err.contains("engine export-tokenizer"), "{err}");
    }
}
