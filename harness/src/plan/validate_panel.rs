//! Validation of the dataset panel sources (`prompts.source` = `sharegpt`,
//! `requests`, `synthetic`, `shared_prefix`) and their length distributions (see `validate_arms` for
//! the fixed-length sources). Owns which keys each dataset source takes, their
//! defaults (vLLM's ShareGPT filters) and the distribution parameters' ranges. Must
//! not touch files: whether a dataset file exists and parses is checked when the
//! panel is built (`trace::sources`).

use super::schema::{DistFile, PromptsFile};
use super::types::{
    Arm, LengthDist, PanelSource, PanelSpec, ShareGptSpec, SharedPrefixSpec, SyntheticSpec, SyntheticTokens,
    VllmRandomSpec,
};
use super::validate::Checker;
use super::validate_arms::{panel_tokenizer, token_id_range};
use super::validate_vllm_panel::forbid_prefix_repetition_keys;

/// Most entries a dataset panel may hold.
pub const MAX_DATASET_REQUESTS: i64 = 10_000_000;
/// vLLM's ShareGPT filters (`is_valid_sequence` defaults).
pub const SHAREGPT_MIN_TOKENS: u32 = 4;
pub const SHAREGPT_MAX_PROMPT_TOKENS: u32 = 1024;
pub const SHAREGPT_MAX_TOTAL_TOKENS: u32 = 2048;
/// Most user turns a session may hold (`prompts.max_turns`).
pub const MAX_TURNS: i64 = 1000;
/// Longest prompt or output a distribution may produce.
const MAX_LENGTH: i64 = 1 << 24;

/// Only a vllm_random panel takes vLLM's random-dataset keys.
fn forbid_vllm_random_keys(c: &mut Checker, p: &PromptsFile) {
    let why = format!("only vllm_random panels take this key (prompts.source = {:?})", p.source);
    c.forbid("prompts.input_len", &p.input_len, &why);
    c.forbid("prompts.prefix_len", &p.prefix_len, &why);
    c.forbid("prompts.range_ratio", &p.range_ratio, &why);
    c.forbid("prompts.output_range_ratio", &p.output_range_ratio, &why);
    c.forbid("prompts.special_ids", &p.special_ids, &why);
}

/// `vllm_random`: vLLM's random dataset; `num_requests` entries, lengths from
/// vLLM's arguments (defaults vLLM's: 1024 in, 128 out, no prefix, ratio 0).
fn vllm_random(c: &mut Checker, p: PromptsFile, arms: &[Arm], documents: u32) -> PanelSpec {
    let why = "a vllm_random panel is built from prompts.tokenizer's vocabulary (vLLM's random dataset)";
    for (key, v) in [("path", &p.path), ("texts", &p.texts), ("pattern", &p.pattern)] {
        c.forbid(&format!("prompts.{key}"), v, why);
    }
    let len = |c: &mut Checker, key: &str, v: Option<i64>, min: i64, default: u32| match v {
        Some(v) => c.int(&format!("prompts.{key}"), v, min, MAX_LENGTH).map_or(default, |v| v as u32),
        None => default,
    };
    let input_len = len(c, "input_len", p.input_len, 0, 1024);
    let output_len = len(c, "output_len", p.output_len, 1, 128);
    let prefix_len = len(c, "prefix_len", p.prefix_len, 0, 0);
    let ratio = |c: &mut Checker, key: &str, v: Option<f64>| match v {
        Some(r) if (0.0..1.0).contains(&r) => r,
        Some(r) => {
            c.err(format!("prompts.{key}"), format!("must be in [0, 1) (vLLM's range), got {r}"));
            0.0
        }
        None => 0.0,
    };
    let input_range_ratio = ratio(c, "range_ratio", p.range_ratio);
    let output_range_ratio = match p.output_range_ratio {
        Some(_) => ratio(c, "output_range_ratio", p.output_range_ratio),
        None => input_range_ratio,
    };
    let special_ids = p.special_ids.map(|ids| {
        let mut ids: Vec<u32> = ids
            .iter()
            .filter_map(|&v| c.int("prompts.special_ids", v, 0, i64::from(u32::MAX)))
            .map(|v| v as u32)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    });
    let tokenizer = panel_tokenizer(c, p.tokenizer, arms);
    let spec = VllmRandomSpec {
        tokenizer,
        input_len,
        output_len,
        prefix_len,
        input_range_ratio,
        output_range_ratio,
        special_ids,
    };
    PanelSpec {
        source: PanelSource::VllmRandom(spec),
        lengths: Vec::new(),
        documents,
        max_turns: None,
        output_len: None,
    }
}

/// A fixed-length panel (text, jsonl, random) takes none of the dataset keys.
pub(super) fn forbid_dataset_keys(c: &mut Checker, p: &PromptsFile) {
    let why = format!("only dataset panels take this key (prompts.source = {:?})", p.source);
    c.forbid("prompts.num_requests", &p.num_requests, &why);
    c.forbid("prompts.min_tokens", &p.min_tokens, &why);
    c.forbid("prompts.max_prompt_tokens", &p.max_prompt_tokens, &why);
    c.forbid("prompts.max_total_tokens", &p.max_total_tokens, &why);
    c.forbid("prompts.shuffle", &p.shuffle, &why);
    c.forbid("prompts.input_tokens", &p.input_tokens, &why);
    c.forbid("prompts.output_tokens", &p.output_tokens, &why);
    forbid_group_keys(c, p);
    forbid_vllm_random_keys(c, p);
    forbid_prefix_repetition_keys(c, p);
    c.forbid("prompts.output_len", &p.output_len, "only sharegpt, requests and vllm_random panels take this key");
}

/// Only a shared_prefix panel takes the group keys.
fn forbid_group_keys(c: &mut Checker, p: &PromptsFile) {
    let why = format!("only shared_prefix panels take this key (prompts.source = {:?})", p.source);
    c.forbid("prompts.groups", &p.groups, &why);
    c.forbid("prompts.prompts_per_group", &p.prompts_per_group, &why);
    c.forbid("prompts.suffix_tokens", &p.suffix_tokens, &why);
    let why =
        format!("only shared_prefix and synthetic random-token panels take this key (prompts.source = {:?})", p.source);
    c.forbid("prompts.prefix_tokens", &p.prefix_tokens, &why);
}

/// `shared_prefix`: its four counts and natural text; `num_requests` is
/// groups x prompts_per_group.
fn shared_prefix(c: &mut Checker, p: PromptsFile, arms: &[Arm]) -> PanelSpec {
    c.forbid(
        "prompts.num_requests",
        &p.num_requests,
        "a shared_prefix panel holds groups x prompts_per_group requests",
    );
    c.forbid("prompts.path", &p.path, "a shared_prefix panel is cut from prompts.texts");
    c.forbid("prompts.input_tokens", &p.input_tokens, "a shared_prefix panel's input is prefix_tokens + suffix_tokens");
    c.forbid(
        "prompts.output_tokens",
        &p.output_tokens,
        "a shared_prefix panel's output length is request.output_tokens",
    );
    for (key, v) in [("min_tokens", p.min_tokens), ("max_prompt_tokens", p.max_prompt_tokens)] {
        c.forbid(&format!("prompts.{key}"), &v, "only sharegpt panels take this key");
    }
    c.forbid("prompts.max_total_tokens", &p.max_total_tokens, "only sharegpt panels take this key");
    c.forbid("prompts.shuffle", &p.shuffle, "only sharegpt panels take this key");
    let mut count = |key: &str, v: Option<i64>, max: i64| match v {
        Some(v) => c.int(&format!("prompts.{key}"), v, 1, max).unwrap_or(1) as u32,
        None => {
            c.err(format!("prompts.{key}"), "required for a shared_prefix panel");
            1
        }
    };
    let groups = count("groups", p.groups, MAX_DATASET_REQUESTS);
    let prompts_per_group = count("prompts_per_group", p.prompts_per_group, MAX_DATASET_REQUESTS);
    let prefix_tokens = count("prefix_tokens", p.prefix_tokens, MAX_LENGTH);
    let suffix_tokens = count("suffix_tokens", p.suffix_tokens, MAX_LENGTH);
    let total = i64::from(groups) * i64::from(prompts_per_group);
    if total > MAX_DATASET_REQUESTS {
        c.err("prompts.groups", format!("groups x prompts_per_group = {total} exceeds {MAX_DATASET_REQUESTS}"));
    }
    let pattern = p.pattern.unwrap_or_else(|| "*.txt".into());
    if pattern.matches('*').count() > 1 || pattern.contains('/') {
        c.err("prompts.pattern", "a file name with at most one `*`");
    }
    let texts = p.texts.unwrap_or_else(|| {
        c.err("prompts.texts", "required for a shared_prefix panel (a directory of text files)");
        String::new()
    });
    let tokenizer = panel_tokenizer(c, p.tokenizer, arms);
    let spec = SharedPrefixSpec { texts, pattern, tokenizer, groups, prompts_per_group, prefix_tokens, suffix_tokens };
    PanelSpec {
        source: PanelSource::SharedPrefix(spec),
        lengths: Vec::new(),
        documents: total.clamp(1, MAX_DATASET_REQUESTS) as u32,
        max_turns: None,
        output_len: None,
    }
}

/// A dataset panel: `num_requests` entries, no `lengths`/`documents`.
pub(super) fn dataset(c: &mut Checker, p: PromptsFile, arms: &[Arm]) -> PanelSpec {
    let src = p.source.clone();
    let only = |what: &str| format!("only {what} panels take this key (prompts.source = {src:?})");
    if p.lengths.is_some() {
        c.err("prompts.lengths", "a dataset panel's entries have their own lengths; leave it out");
    }
    c.forbid("prompts.documents", &p.documents, "a dataset panel counts entries in prompts.num_requests");
    forbid_prefix_repetition_keys(c, &p);
    if src != "synthetic" {
        c.forbid("prompts.min_token_id", &p.min_token_id, &only("random and synthetic"));
        c.forbid("prompts.max_token_id", &p.max_token_id, &only("random and synthetic"));
    }
    if !matches!(src.as_str(), "sharegpt" | "requests") {
        c.forbid("prompts.max_turns", &p.max_turns, "only sharegpt and requests panels hold sessions");
    }
    let max_turns = p.max_turns.and_then(|v| c.int("prompts.max_turns", v, 1, MAX_TURNS)).map(|v| v as u32);
    if src == "shared_prefix" {
        forbid_vllm_random_keys(c, &p);
        c.forbid("prompts.output_len", &p.output_len, "only sharegpt, requests and vllm_random panels take this key");
        return shared_prefix(c, p, arms);
    }
    if src == "vllm_random" {
        forbid_group_keys(c, &p);
        for (key, v) in [("min_tokens", p.min_tokens), ("max_prompt_tokens", p.max_prompt_tokens)] {
            c.forbid(&format!("prompts.{key}"), &v, &only("sharegpt"));
        }
        c.forbid("prompts.max_total_tokens", &p.max_total_tokens, &only("sharegpt"));
        c.forbid("prompts.shuffle", &p.shuffle, &only("sharegpt"));
        c.forbid("prompts.input_tokens", &p.input_tokens, &only("synthetic"));
        c.forbid("prompts.output_tokens", &p.output_tokens, &only("synthetic"));
        let documents = match p.num_requests {
            Some(n) => c.int("prompts.num_requests", n, 1, MAX_DATASET_REQUESTS).unwrap_or(1) as u32,
            None => {
                c.err("prompts.num_requests", "required for a dataset panel: how many requests it holds");
                1
            }
        };
        return vllm_random(c, p, arms, documents);
    }
    forbid_vllm_random_keys(c, &p);
    if src == "synthetic" {
        // `prefix_tokens` is a synthetic panel's too (random token IDs only).
        let why = format!("only shared_prefix panels take this key (prompts.source = {src:?})");
        c.forbid("prompts.groups", &p.groups, &why);
        c.forbid("prompts.prompts_per_group", &p.prompts_per_group, &why);
        c.forbid("prompts.suffix_tokens", &p.suffix_tokens, &why);
    } else {
        forbid_group_keys(c, &p);
    }
    let documents = match p.num_requests {
        Some(n) => c.int("prompts.num_requests", n, 1, MAX_DATASET_REQUESTS).unwrap_or(1) as u32,
        None => {
            c.err("prompts.num_requests", "required for a dataset panel: how many requests it holds");
            1
        }
    };
    if src != "sharegpt" {
        let why = only("sharegpt");
        c.forbid("prompts.min_tokens", &p.min_tokens, &why);
        c.forbid("prompts.max_prompt_tokens", &p.max_prompt_tokens, &why);
        c.forbid("prompts.max_total_tokens", &p.max_total_tokens, &why);
        c.forbid("prompts.shuffle", &p.shuffle, &why);
    }
    if src != "synthetic" {
        let why = only("synthetic");
        c.forbid("prompts.texts", &p.texts, &why);
        c.forbid("prompts.pattern", &p.pattern, &why);
        c.forbid("prompts.input_tokens", &p.input_tokens, &why);
        c.forbid("prompts.output_tokens", &p.output_tokens, &why);
    } else {
        c.forbid("prompts.path", &p.path, &only("sharegpt and requests"));
    }
    let path = |c: &mut Checker, path: Option<String>| {
        path.unwrap_or_else(|| {
            c.err("prompts.path", format!("required for a {src} panel"));
            String::new()
        })
    };
    let source = match p.source.as_str() {
        "sharegpt" => {
            let bound = |c: &mut Checker, key: &str, v: Option<i64>, default: u32| match v {
                Some(v) => c.int(key, v, 1, MAX_LENGTH).map_or(default, |v| v as u32),
                None => default,
            };
            let min_tokens = bound(c, "prompts.min_tokens", p.min_tokens, SHAREGPT_MIN_TOKENS);
            let max_prompt = bound(c, "prompts.max_prompt_tokens", p.max_prompt_tokens, SHAREGPT_MAX_PROMPT_TOKENS);
            let max_total = bound(c, "prompts.max_total_tokens", p.max_total_tokens, SHAREGPT_MAX_TOTAL_TOKENS);
            if max_prompt < min_tokens {
                c.err("prompts.max_prompt_tokens", format!("{max_prompt} is below prompts.min_tokens {min_tokens}"));
            }
            let path = path(c, p.path);
            PanelSource::ShareGpt(ShareGptSpec {
                path,
                tokenizer: panel_tokenizer(c, p.tokenizer, arms),
                min_tokens,
                max_prompt_tokens: Some(max_prompt),
                max_total_tokens: Some(max_total),
                shuffle: p.shuffle.unwrap_or(true),
            })
        }
        "requests" => {
            let declared = p.tokenizer.is_some() || arms.iter().any(|a| a.tokenizer.is_some());
            let tokenizer = declared.then(|| panel_tokenizer(c, p.tokenizer, arms));
            PanelSource::Requests { path: path(c, p.path), tokenizer }
        }
        _ => {
            let input = dist(c, "prompts.input_tokens", p.input_tokens);
            let output = dist(c, "prompts.output_tokens", p.output_tokens);
            let tokens = if p.max_token_id.is_some() || p.min_token_id.is_some() {
                let why = "a synthetic panel of random token IDs (max_token_id) has no text";
                for (key, v) in [("texts", &p.texts), ("pattern", &p.pattern), ("tokenizer", &p.tokenizer)] {
                    c.forbid(&format!("prompts.{key}"), v, why);
                }
                let (min_token_id, max_token_id) =
                    token_id_range(c, p.min_token_id, p.max_token_id, "synthetic random-token");
                let prefix = match p.prefix_tokens {
                    Some(v) => c.int("prompts.prefix_tokens", v, 0, MAX_LENGTH).unwrap_or(0) as u32,
                    None => 0,
                };
                SyntheticTokens::Random { min_token_id, max_token_id, prefix }
            } else {
                c.forbid(
                    "prompts.prefix_tokens",
                    &p.prefix_tokens,
                    "a synthetic text panel has no shared prefix: use source = \"shared_prefix\" (or random token IDs)",
                );
                let pattern = p.pattern.unwrap_or_else(|| "*.txt".into());
                if pattern.matches('*').count() > 1 || pattern.contains('/') {
                    c.err("prompts.pattern", "a file name with at most one `*`");
                }
                let texts = p.texts.unwrap_or_else(|| {
                    c.err(
                        "prompts.texts",
                        "required for a synthetic panel (a directory of text files), or max_token_id for random token IDs",
                    );
                    String::new()
                });
                SyntheticTokens::Text { texts, pattern, tokenizer: panel_tokenizer(c, p.tokenizer, arms) }
            };
            PanelSource::Synthetic(SyntheticSpec { tokens, input, output })
        }
    };
    let output_len = match p.output_len {
        Some(v) if matches!(src.as_str(), "sharegpt" | "requests") => {
            c.int("prompts.output_len", v, 1, MAX_LENGTH).map(|v| v as u32)
        }
        Some(_) => {
            c.err("prompts.output_len", "only sharegpt, requests and vllm_random panels take this key");
            None
        }
        None => None,
    };
    PanelSpec { source, lengths: Vec::new(), documents, max_turns, output_len }
}

/// One length distribution; `None` is an issue (required).
fn dist(c: &mut Checker, key: &str, d: Option<DistFile>) -> LengthDist {
    let Some(d) = d else {
        c.err(key, "required for a synthetic panel, e.g. { dist = \"uniform\", min = 64, max = 256 }");
        return LengthDist::Fixed(1);
    };
    let k = |name: &str| format!("{key}.{name}");
    let not_for = |name: &str| format!("{name} does not apply to dist = {:?}", d.dist);
    let int = |c: &mut Checker, name: &str, v: Option<i64>| -> Option<u32> {
        match v {
            Some(v) => c.int(&k(name), v, 1, MAX_LENGTH).map(|v| v as u32),
            None => {
                c.err(k(name), format!("required for dist = {:?}", d.dist));
                None
            }
        }
    };
    let real = |c: &mut Checker, name: &str, v: Option<f64>, positive: bool| -> f64 {
        match v {
            Some(v) if v.is_finite() && (!positive || v > 0.0) => v,
            Some(v) => {
                c.err(k(name), format!("must be finite{}, got {v}", if positive { " and positive" } else { "" }));
                1.0
            }
            None => {
                c.err(k(name), format!("required for dist = {:?}", d.dist));
                1.0
            }
        }
    };
    let bounds = |c: &mut Checker| -> (u32, u32) {
        let (lo, hi) = (int(c, "min", d.min), int(c, "max", d.max));
        if let (Some(lo), Some(hi)) = (lo, hi)
            && lo > hi
        {
            c.err(k("min"), format!("{lo} exceeds max {hi}"));
        }
        (lo.unwrap_or(1), hi.unwrap_or(1).max(lo.unwrap_or(1)))
    };
    let forbid = |c: &mut Checker, names: &[(&str, bool)]| {
        for &(name, present) in names {
            if present {
                c.err(k(name), not_for(name));
            }
        }
    };
    let (value, mean, sd, mu, sigma) =
        (d.value.is_some(), d.mean.is_some(), d.sd.is_some(), d.mu.is_some(), d.sigma.is_some());
    match d.dist.as_str() {
        "fixed" => {
            forbid(c, &[("min", d.min.is_some()), ("max", d.max.is_some()), ("mean", mean), ("sd", sd)]);
            forbid(c, &[("mu", mu), ("sigma", sigma)]);
            LengthDist::Fixed(int(c, "value", d.value).unwrap_or(1))
        }
        "uniform" => {
            forbid(c, &[("value", value), ("mean", mean), ("sd", sd), ("mu", mu), ("sigma", sigma)]);
            let (min, max) = bounds(c);
            LengthDist::Uniform { min, max }
        }
        "normal" => {
            forbid(c, &[("value", value), ("mu", mu), ("sigma", sigma)]);
            let (mean, sd) = (real(c, "mean", d.mean, true), real(c, "sd", d.sd, true));
            let (min, max) = bounds(c);
            LengthDist::Normal { mean, sd, min, max }
        }
        "lognormal" => {
            forbid(c, &[("value", value), ("mean", mean), ("sd", sd)]);
            let (mu, sigma) = (real(c, "mu", d.mu, false), real(c, "sigma", d.sigma, true));
            let (min, max) = bounds(c);
            LengthDist::LogNormal { mu, sigma, min, max }
        }
        other => {
            c.err(
                k("dist"),
                format!("unknown distribution {other:?} (use \"fixed\", \"uniform\", \"normal\" or \"lognormal\")"),
            );
            LengthDist::Fixed(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_tests::BASE;
    use super::*;
    use crate::plan::parse;

    const FIXED_PANEL: &str = "source = \"random\"\nlengths = [64]\ndocuments = 4\nmax_token_id = 255";
    const SHAREGPT: &str = "source = \"sharegpt\"\npath = \"d.json\"\ntokenizer = \"t.json\"\nnum_requests = 10";

    fn with(request: &str, panel: &str) -> String {
        BASE.replace("output_tokens = 16", request).replace(FIXED_PANEL, panel)
    }

    fn error(text: &str) -> String {
        parse(text).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn extra_body_is_json_and_never_a_field_the_harness_sets() {
        let p =
            parse(&with("output_tokens = 16\nextra_body = { top_k = 20, top_p = 0.9, stop = [\"x\"] }", FIXED_PANEL))
                .unwrap();
        assert_eq!(
            serde_json::Value::Object(p.request.extra_body),
            serde_json::json!({"top_k": 20, "top_p": 0.9, "stop": ["x"]})
        );
        assert!(parse(BASE).unwrap().request.extra_body.is_empty());
        let e = error(&with("output_tokens = 16\nextra_body = { temperature = 0.5 }", FIXED_PANEL));
        assert!(e.contains("request.extra_body.temperature") && e.contains("request.temperature"), "{e}");
        let e = error(&with("output_tokens = 16\nextra_body = { max_tokens = 5, stream = false }", FIXED_PANEL));
        assert!(e.contains("extra_body.max_tokens") && e.contains("extra_body.stream"), "{e}");
        let e = error(&with("output_tokens = 16\nextra_body = { top_p = nan }", FIXED_PANEL));
        assert!(e.contains("extra_body.top_p") && e.contains("finite"), "{e}");
        let e = error(&with("output_tokens = 16\nextra_body = { when = 2026-12-06 }", FIXED_PANEL));
        assert!(e.contains("extra_body.when") && e.contains("no dates"), "{e}");
    }

    #[test]
    fn output_mode_forced_is_the_default_and_natural_lets_eos_end_it() {
        let p = parse(BASE).unwrap();
        assert!(p.request.forced() && p.request.max_output_tokens.is_none());
        let p = parse(&with("output_tokens = 16\noutput = \"forced\"", FIXED_PANEL)).unwrap();
        assert!(p.request.forced());
        let p = parse(&with("output_tokens = 16\noutput = \"natural\"\nmax_output_tokens = 32", FIXED_PANEL)).unwrap();
        assert!(!p.request.forced() && !p.request.ignore_eos);
        assert_eq!((p.request.max_tokens_for(None), p.request.max_tokens_for(Some(100))), (16, 32));
        assert_eq!(p.request.max_tokens_for(Some(5)), 5);
        let e = error(&with("output_tokens = 16\noutput = \"natural\"\nignore_eos = true", FIXED_PANEL));
        assert!(e.contains("request.ignore_eos: contradicts request.output = \"natural\""), "{e}");
        let e = error(&with("output_tokens = 16\noutput = \"eos\"", FIXED_PANEL));
        assert!(e.contains("request.output: unknown value \"eos\""), "{e}");
        let e = error(&with("output_tokens = 16\nmax_output_tokens = 8", FIXED_PANEL));
        assert!(e.contains("request.output_tokens: 16 exceeds request.max_output_tokens 8"), "{e}");
        let e = error(&with("max_output_tokens = 8", FIXED_PANEL));
        assert!(e.contains("request.output_tokens: required: this panel's prompts carry no output length"), "{e}");
    }

    #[test]
    fn a_sharegpt_panel_takes_vllms_filters_and_its_own_lengths() {
        let p = parse(&with("output = \"natural\"\nmax_output_tokens = 128", SHAREGPT)).unwrap();
        assert_eq!((p.request.output_tokens, p.prompts.documents), (128, 10));
        assert!(p.prompts.lengths.is_empty() && p.cells.iter().all(|c| c.input_tokens.is_none()));
        assert_eq!(p.warmup.input_tokens, None);
        let PanelSource::ShareGpt(g) = &p.prompts.source else { panic!("{:?}", p.prompts.source) };
        assert_eq!((g.min_tokens, g.max_prompt_tokens, g.max_total_tokens), (4, Some(1024), Some(2048)));
        let e = error(&with("output = \"natural\"", SHAREGPT));
        assert!(e.contains("request.output_tokens: required unless request.max_output_tokens caps"), "{e}");
        let e = error(&with("output_tokens = 8", &SHAREGPT.replace("num_requests = 10", "lengths = [4]")));
        assert!(e.contains("prompts.lengths: a dataset panel's entries have their own lengths"), "{e}");
        assert!(e.contains("prompts.num_requests: required for a dataset panel"), "{e}");
        let e = error(&with("output_tokens = 8", &format!("{SHAREGPT}\ndocuments = 3\nmin_token_id = 1")));
        assert!(e.contains("prompts.documents: a dataset panel counts entries in prompts.num_requests"), "{e}");
        assert!(e.contains("prompts.min_token_id: only random and synthetic panels"), "{e}");
        let e = error(&with("output_tokens = 8", &format!("{SHAREGPT}\nmax_prompt_tokens = 2")));
        assert!(e.contains("prompts.max_prompt_tokens: 2 is below prompts.min_tokens 4"), "{e}");
        let e = error(&with("output_tokens = 8", &SHAREGPT.replace("tokenizer = \"t.json\"\n", "")));
        assert!(e.contains("prompts.tokenizer"), "{e}");
        let e = error(&with("output_tokens = 8", SHAREGPT).replace("count = 16", "count = 16\ninput_tokens = 64"));
        assert!(e.contains("cells[0].input_tokens: a dataset panel's entries have their own lengths"), "{e}");
        let e = error(&with("output_tokens = 8", &format!("{FIXED_PANEL}\nnum_requests = 3")));
        assert!(e.contains("prompts.num_requests: only dataset panels take this key"), "{e}");
    }

    #[test]
    fn the_play_dialogue_file_is_never_called_sharegpt() {
        let plays = SHAREGPT.replace("d.json", "assets/sharegpt-plays/plays_sharegpt.json");
        let p = parse(&with("output_tokens = 8", &plays)).unwrap();
        let PanelSource::ShareGpt(g) = &p.prompts.source else { panic!() };
        assert_eq!(g.label(), "play dialogue in ShareGPT format, not ShareGPT");
        assert!(p.render_check("x").contains("not ShareGPT"));
        let p = parse(&with("output_tokens = 8", SHAREGPT)).unwrap();
        let PanelSource::ShareGpt(g) = &p.prompts.source else { panic!() };
        assert_eq!(g.label(), "ShareGPT-format conversations");
    }

    #[test]
    fn a_synthetic_panel_of_random_token_ids_takes_a_prefix_and_no_text() {
        let random = "source = \"synthetic\"\nnum_requests = 5\nmax_token_id = 255\nprefix_tokens = 3\n\
                      input_tokens = { dist = \"uniform\", min = 4, max = 8 }\noutput_tokens = { dist = \"fixed\", value = 2 }";
        let p = parse(&with("output_tokens = 2", random)).unwrap();
        let PanelSource::Synthetic(s) = &p.prompts.source else { panic!() };
        assert_eq!(s.tokens, SyntheticTokens::Random { min_token_id: 0, max_token_id: 255, prefix: 3 });
        assert!(p.prompts.source.tokenizer().is_none());
        let e = error(&with("output_tokens = 2", &format!("{random}\ntexts = \"t\"\nmin_token_id = 300")));
        assert!(e.contains("prompts.texts: a synthetic panel of random token IDs"), "{e}");
        assert!(e.contains("prompts.min_token_id: 300 exceeds max_token_id 255"), "{e}");
        let text = random.replace("max_token_id = 255", "texts = \"t\"\ntokenizer = \"t.json\"");
        let e = error(&with("output_tokens = 2", &text));
        assert!(e.contains("prompts.prefix_tokens: a synthetic text panel has no shared prefix"), "{e}");
        let e = error(&with("output_tokens = 2", &format!("{FIXED_PANEL}\nprefix_tokens = 3")));
        assert!(e.contains("prompts.prefix_tokens: only shared_prefix and synthetic random-token panels"), "{e}");
    }

    #[test]
    fn synthetic_distributions_are_checked_key_by_key() {
        let synth = |input: &str, output: &str| {
            format!(
                "source = \"synthetic\"\ntexts = \"t\"\ntokenizer = \"t.json\"\nnum_requests = 5\n\
                 input_tokens = {input}\noutput_tokens = {output}"
            )
        };
        let ok = synth(
            "{ dist = \"normal\", mean = 100.0, sd = 20.0, min = 10, max = 300 }",
            "{ dist = \"lognormal\", mu = 4.0, sigma = 0.5, min = 1, max = 512 }",
        );
        let p = parse(&with("output = \"natural\"\nmax_output_tokens = 256", &ok)).unwrap();
        let PanelSource::Synthetic(s) = &p.prompts.source else { panic!() };
        assert_eq!(s.input, LengthDist::Normal { mean: 100.0, sd: 20.0, min: 10, max: 300 });
        assert_eq!(s.output, LengthDist::LogNormal { mu: 4.0, sigma: 0.5, min: 1, max: 512 });
        let cases = [
            (
                synth("{ dist = \"fixed\", value = 8 }", "{ dist = \"uniform\", min = 9, max = 3 }"),
                "prompts.output_tokens.min: 9 exceeds max 3",
            ),
            (
                synth("{ dist = \"normal\", mean = 5.0, min = 1, max = 9 }", "{ dist = \"fixed\", value = 2 }"),
                "prompts.input_tokens.sd: required for dist = \"normal\"",
            ),
            (
                synth("{ dist = \"fixed\", value = 8, mean = 2.0 }", "{ dist = \"fixed\", value = 2 }"),
                "prompts.input_tokens.mean: mean does not apply to dist = \"fixed\"",
            ),
            (
                synth("{ dist = \"zipf\" }", "{ dist = \"fixed\", value = 2 }"),
                "prompts.input_tokens.dist: unknown distribution \"zipf\"",
            ),
            (
                synth(
                    "{ dist = \"lognormal\", mu = 1.0, sigma = -1.0, min = 1, max = 9 }",
                    "{ dist = \"fixed\", value = 0 }",
                ),
                "prompts.input_tokens.sigma: must be finite and positive",
            ),
            (
                synth("{ dist = \"fixed\", value = 8 }", "{ dist = \"fixed\", value = 0 }"),
                "prompts.output_tokens.value: must be at least 1",
            ),
        ];
        for (panel, want) in cases {
            let e = error(&with("output_tokens = 8", &panel));
            assert!(e.contains(want), "{want}\n{e}");
        }
        let e = error(&with(
            "output_tokens = 8",
            "source = \"synthetic\"\ntexts = \"t\"\ntokenizer = \"t.json\"\nnum_requests = 5",
        ));
        assert!(e.contains("prompts.input_tokens: required for a synthetic panel"), "{e}");
    }

    #[test]
    fn a_requests_panel_needs_no_tokenizer_for_token_ids() {
        let p =
            parse(&with("output_tokens = 8", "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 2")).unwrap();
        assert_eq!(p.prompts.source, PanelSource::Requests { path: "r.jsonl".into(), tokenizer: None });
        let e = error(&with("output_tokens = 8", "source = \"requests\"\nnum_requests = 2\ntexts = \"t\""));
        assert!(e.contains("prompts.path: required for a requests panel"), "{e}");
        assert!(e.contains("prompts.texts: only synthetic panels take this key"), "{e}");
    }

    #[test]
    fn a_shared_prefix_panel_counts_groups_times_prompts_and_checks_its_keys() {
        let panel = "source = \"shared_prefix\"\ntexts = \"t\"\ntokenizer = \"t.json\"\ngroups = 3\n\
                     prompts_per_group = 4\nprefix_tokens = 64\nsuffix_tokens = 8";
        let p = parse(&with("output_tokens = 16", panel)).unwrap();
        assert_eq!(p.prompts.documents, 12);
        let PanelSource::SharedPrefix(s) = &p.prompts.source else { panic!("{:?}", p.prompts.source) };
        assert_eq!((s.groups, s.prompts_per_group, s.prefix_tokens, s.suffix_tokens), (3, 4, 64, 8));
        assert_eq!(s.pattern, "*.txt");
        let e = error(&with("output_tokens = 16", &panel.replace("groups = 3\n", "")));
        assert!(e.contains("prompts.groups: required for a shared_prefix panel"), "{e}");
        let e = error(&with("output_tokens = 16", &format!("{panel}\nnum_requests = 12")));
        assert!(e.contains("prompts.num_requests: a shared_prefix panel holds groups x prompts_per_group"), "{e}");
        let e = error(&with("output_tokens = 16", &panel.replace("prefix_tokens = 64", "prefix_tokens = 0")));
        assert!(e.contains("prompts.prefix_tokens"), "{e}");
        let e = error(&with("output_tokens = 8", &format!("{SHAREGPT}\ngroups = 2")));
        assert!(e.contains("prompts.groups: only shared_prefix panels take this key"), "{e}");
        let e = error(&with("output_tokens = 8", &format!("{FIXED_PANEL}\nsuffix_tokens = 2")));
        assert!(e.contains("prompts.suffix_tokens: only shared_prefix panels take this key"), "{e}");
    }
}
