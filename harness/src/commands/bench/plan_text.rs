//! The one-arm plan of `harness bench`, as TOML text: one arm (`url`, or `argv` and
//! `port`), descriptive cells only (one descriptive block, fixed orders), a sweep
//! cell per load kind (`--rate` gives open-loop Poisson cells `poisson-r<rate>`,
//! `--concurrency` closed-loop cells `closed-c<C>`), the panel of `--dataset`.
//! Owns the mapping from flags to plan keys and the flag errors that name a flag.
//! Must not judge what the plan parser judges (names, URLs, ranges): the text is
//! frozen through `plan::freeze` like any plan file.

use std::fmt::Write;

use super::{BenchArgs, BenchError, Dataset, split_words};

/// Largest `prompts.documents` of a fixed-length panel (the plan's limit).
const MAX_DOCUMENTS: u64 = 1 << 20;
/// Output cap of a dataset whose entries carry their own lengths, without
/// `--output-len` (vLLM's ShareGPT total-length filter).
const DEFAULT_DATASET_OUTPUT_CAP: u32 = 2048;

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(", "))
}

fn bad(msg: impl Into<String>) -> BenchError {
    BenchError::Args(msg.into())
}

/// The flag checks the plan parser cannot word in flags' terms.
fn check_flags(a: &BenchArgs) -> Result<(), BenchError> {
    if let Some(r) = a.rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(bad(format!("--rate: every rate must be a positive, finite req/s, got {r}")));
    }
    if a.concurrency.contains(&0) {
        return Err(bad("--concurrency: every concurrency must be at least 1, got 0"));
    }
    if a.num_prompts == 0 {
        return Err(bad("--num-prompts: must be at least 1"));
    }
    let needs_path = !matches!(a.dataset, Dataset::Random | Dataset::RandomIds | Dataset::PrefixRepetition);
    match (&a.dataset_path, needs_path) {
        (None, true) => {
            return Err(bad(format!("--dataset-name {}: needs --dataset-path", dataset_name(a.dataset))));
        }
        (Some(_), false) => {
            return Err(bad(format!(
                "--dataset-path: --dataset-name {} reads no file (vLLM refuses it too)",
                dataset_name(a.dataset)
            )));
        }
        _ => {}
    }
    let needs_tokenizer = matches!(
        a.dataset,
        Dataset::Random
            | Dataset::Sharegpt
            | Dataset::Synthetic
            | Dataset::Custom
            | Dataset::Burstgpt
            | Dataset::PrefixRepetition
    );
    if needs_tokenizer && a.tokenizer.is_none() {
        return Err(bad(format!(
            "--dataset-name {}: needs --tokenizer (a tokenizer.json, or a directory holding one: the model's \
             tokenizer; vLLM loads --model's, which cannot be fetched here){}",
            dataset_name(a.dataset),
            if a.dataset == Dataset::Random {
                "; --dataset-name random-ids is the harness's own random token IDs, which need none"
            } else {
                ""
            }
        )));
    }
    if a.dataset == Dataset::RandomIds && a.tokenizer.is_some() {
        return Err(bad("--tokenizer: random-ids are not encoded; --dataset-name random decodes vLLM's random IDs"));
    }
    if a.dataset == Dataset::Custom && !a.skip_chat_template && !chat(a) {
        return Err(bad(
            "--dataset-name custom: vLLM renders each prompt with the tokenizer's chat template on the client; the \
             harness does not: pass --skip-chat-template (prompts sent as written) or --backend openai-chat (the \
             server renders the template)",
        ));
    }
    if a.dataset == Dataset::Custom && (a.custom_output_len == 0 || a.custom_output_len < -1) {
        return Err(bad(format!("--custom-output-len: a positive length or -1, got {}", a.custom_output_len)));
    }
    if a.random_output_len == 0 || a.sharegpt_output_len == Some(0) {
        return Err(bad("--output-len, --random-output-len and --sharegpt-output-len must be at least 1"));
    }
    if a.dataset == Dataset::PrefixRepetition {
        prefix_repetition(a)?;
    }
    if a.dataset == Dataset::RandomIds && a.random_input_len == 0 {
        return Err(bad("--random-input-len: must be at least 1 with --dataset-name random-ids"));
    }
    vllm_flag_lists(a)?;
    range_and_prefix(a)?;
    if a.model.is_none() && a.served_model_name.is_none() {
        return Err(bad("--model: required (or --served-model-name)"));
    }
    if let Some(m) = a.metadata.iter().find(|m| m.split_once('=').is_none_or(|(k, _)| k.trim().is_empty())) {
        return Err(bad(format!("--metadata {m:?}: expected KEY=VALUE (vLLM's form)")));
    }
    if let (Some(b), Some(e)) = (&a.backend, &a.endpoint)
        && (b == "openai-chat") != (e == crate::protocol::routes::CHAT_COMPLETIONS_PATH)
    {
        return Err(bad(format!("--backend {b} and --endpoint {e} name different routes")));
    }
    if let Some(b) = a.burstiness
        && !(b.is_finite() && b > 0.0)
    {
        return Err(bad(format!("--burstiness: must be a positive number (1.0 is Poisson), got {b}")));
    }
    let max = crate::plan::MAX_REQUEST_ID_PREFIX;
    if let Some(p) = &a.request_id_prefix
        && (p.len() > max || !p.bytes().all(|b| (0x20..0x7f).contains(&b)))
    {
        return Err(bad(format!(
            "--request-id-prefix: printable ASCII of at most {max} bytes (it starts an `x-request-id` header value)"
        )));
    }

    Ok(())
}

/// prefix_repetition's counts: vLLM builds num_prefixes x floor(num_prompts /
/// num_prefixes) prompts; the harness sends exactly --num-prompts, so it must be a
/// multiple.
fn prefix_repetition(a: &BenchArgs) -> Result<(), BenchError> {
    let p = u64::from(a.prefix_repetition_num_prefixes);
    if p == 0 {
        return Err(bad("--prefix-repetition-num-prefixes: must be at least 1"));
    }
    if !a.num_prompts.is_multiple_of(p) {
        return Err(bad(format!(
            "--num-prompts {} is not a multiple of --prefix-repetition-num-prefixes {p}: vLLM would build and send \
             only {} prompts (num_prefixes x floor(num_prompts / num_prefixes)); pass --num-prompts {}",
            a.num_prompts,
            p * (a.num_prompts / p),
            (p * (a.num_prompts / p)).max(p)
        )));
    }
    if a.prefix_repetition_output_len == 0 {
        return Err(bad("--prefix-repetition-output-len (or --output-len): must be at least 1"));
    }
    Ok(())
}

/// vLLM bench flags the harness checks itself: the percentile lists.
fn vllm_flag_lists(a: &BenchArgs) -> Result<(), BenchError> {
    if let Some(m) = &a.percentile_metrics
        && let Some(x) = m.split(',').map(str::trim).find(|x| !matches!(*x, "ttft" | "tpot" | "itl" | "e2el"))
    {
        return Err(bad(format!("--percentile-metrics: unknown metric {x:?} (ttft, tpot, itl, e2el)")));
    }
    super::metric_percentiles(a)?;
    Ok(())
}

/// Deepest `--extra-body` nesting (objects and arrays) the plan holds: the plan
/// parser's TOML reader refuses deeper inline tables (its recursion limit), and no
/// real request body comes near it.
const MAX_EXTRA_BODY_DEPTH: usize = 32;

/// Levels of objects and arrays in `v` (a scalar is 0).
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(m) => 1 + m.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A JSON value as TOML (inline tables); `None` for a null anywhere in it.
fn toml_value(v: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quote(s),
        Value::Array(items) => format!("[{}]", items.iter().map(toml_value).collect::<Option<Vec<_>>>()?.join(", ")),
        Value::Object(m) => {
            let pairs = m.iter().map(|(k, v)| Some(format!("{} = {}", quote(k), toml_value(v)?)));
            format!("{{ {} }}", pairs.collect::<Option<Vec<_>>>()?.join(", "))
        }
    })
}

/// vLLM's sampling flags and `--extra-body` as the plan's temperature and its
/// `request.extra_body` line, merged as vLLM merges them (`--extra-body` keys
/// win; its `temperature` is the request temperature).
fn sampling(a: &BenchArgs) -> Result<(f64, String), BenchError> {
    let mut body = serde_json::Map::new();
    let reals = [
        ("top_p", a.top_p),
        ("min_p", a.min_p),
        ("frequency_penalty", a.frequency_penalty),
        ("presence_penalty", a.presence_penalty),
        ("repetition_penalty", a.repetition_penalty),
    ];
    for (key, v) in reals {
        if let Some(v) = v {
            let n = serde_json::Number::from_f64(v)
                .ok_or_else(|| bad(format!("--{}: must be a finite number, got {v}", key.replace('_', "-"))))?;
            body.insert(key.into(), n.into());
        }
    }
    if let Some(k) = a.top_k {
        body.insert("top_k".into(), k.into());
    }
    if let Some(text) = &a.extra_body {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("--extra-body: not JSON ({e})")))?;
        let serde_json::Value::Object(m) = v else {
            return Err(bad("--extra-body: must be a JSON object, e.g. '{\"top_p\": 0.9}'"));
        };
        let depth = json_depth(&serde_json::Value::Object(m.clone()));
        if depth > MAX_EXTRA_BODY_DEPTH {
            return Err(bad(format!(
                "--extra-body: nested {depth} levels deep; a body is written into the plan (TOML inline tables), \
                 which holds at most {MAX_EXTRA_BODY_DEPTH} levels"
            )));
        }
        body.extend(m);
    }
    let temperature = match body.remove("temperature") {
        None => a.temperature.unwrap_or(0.0),
        Some(t) => t.as_f64().ok_or_else(|| bad(format!("--extra-body: temperature must be a number, got {t}")))?,
    };
    if let Some((k, owner)) = crate::plan::RESERVED_BODY_FIELDS.iter().find(|(k, _)| body.contains_key(*k)) {
        return Err(bad(format!("--extra-body: `{k}` is set by the harness itself (from {owner})")));
    }
    if body.is_empty() {
        return Ok((temperature, String::new()));
    }
    let table = toml_value(&serde_json::Value::Object(body)).ok_or_else(|| {
        bad("--extra-body: null values cannot be sent here (a plan is TOML, which has no null); leave the key out")
    })?;
    Ok((temperature, format!("extra_body = {table}\n")))
}

/// `--goodput KEY:VALUE ...` as `[slo]` lines (vLLM's keys ttft, tpot, e2el in ms).
fn slo(a: &BenchArgs) -> Result<String, BenchError> {
    let mut t = String::new();
    for item in &a.goodput {
        let (k, v) = item
            .split_once(':')
            .ok_or_else(|| bad(format!("--goodput {item:?}: expected KEY:VALUE (ttft:200 tpot:50 e2el:1000, ms)")))?;
        let key = match k.trim() {
            "ttft" => "ttft_ms",
            "tpot" => "tpot_ms",
            "e2el" => "e2e_ms",
            other => return Err(bad(format!("--goodput: unknown key {other:?} (ttft, tpot, e2el)"))),
        };
        let ms: f64 = v
            .trim()
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x > 0.0)
            .ok_or_else(|| bad(format!("--goodput {item:?}: {v:?} is not a positive number of milliseconds")))?;
        if t.contains(&format!("{key} =")) {
            return Err(bad(format!("--goodput: {k} given twice")));
        }
        let _ = writeln!(t, "{key} = {ms:?}");
    }
    Ok(if t.is_empty() { t } else { format!("[slo]\n{t}\n") })
}

/// Whether a header's name says it carries a secret: `Authorization` (and
/// `Proxy-Authorization`), `api-key`, `x-api-key`, or any name containing
/// `token`, `secret` or `key` (case-insensitive).
pub fn is_secret_header(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    n.ends_with("authorization") || ["token", "secret", "key"].iter().any(|w| n.contains(w))
}

/// `--header KEY=VALUE ...` as an arm's `headers` table. A secret-bearing header
/// is refused: the table is written into the evidence's plan.toml, which is the
/// study's frozen identity (hashed, replayed, resumed from), so its values cannot
/// be scrubbed there without the plan no longer saying what was sent.
fn headers(a: &BenchArgs) -> Result<String, BenchError> {
    let mut pairs = Vec::new();
    for h in &a.header {
        let (k, v) =
            h.split_once('=').ok_or_else(|| bad(format!("--header {h:?}: expected KEY=VALUE (vLLM's form)")))?;
        if is_secret_header(k) {
            return Err(bad(format!(
                "--header {}: looks like a secret, and headers are written into the evidence's plan.toml; put the \
                 key in an environment variable and pass --api-key-env VAR (sent as `Authorization: Bearer`, never \
                 written, and scrubbed from anything the server echoes)",
                k.trim()
            )));
        }
        pairs.push(format!("{} = {}", quote(k.trim()), quote(v)));
    }
    Ok(if pairs.is_empty() { String::new() } else { format!("headers = {{ {} }}\n", pairs.join(", ")) })
}

fn dataset_name(d: Dataset) -> &'static str {
    match d {
        Dataset::Random => "random",
        Dataset::Burstgpt => "burstgpt",
        Dataset::PrefixRepetition => "prefix_repetition",
        Dataset::RandomIds => "random-ids",
        Dataset::Sharegpt => "sharegpt",
        Dataset::Custom => "custom",
        Dataset::Synthetic => "synthetic",
        Dataset::Requests => "requests",
    }
}

/// Whether the requests go to the chat route (`--backend openai-chat` or
/// `--endpoint /v1/chat/completions`).
fn chat(a: &BenchArgs) -> bool {
    a.backend.as_deref() == Some("openai-chat")
        || a.endpoint.as_deref() == Some(crate::protocol::routes::CHAT_COMPLETIONS_PATH)
}

/// The tokenizer's special IDs as transformers reads them for vLLM (from the
/// tokenizer_config.json beside the tokenizer.json) as the panel's `special_ids`
/// line, so the plan states them; nothing without that file (the panel then
/// takes the tokenizer.json's added tokens marked special).
fn special_ids_line(a: &BenchArgs) -> Result<String, BenchError> {
    let Some(tok) = &a.tokenizer else { return Ok(String::new()) };
    let path = std::path::Path::new(tok);
    let config = path.with_file_name("tokenizer_config.json");
    if !path.is_file() || !config.is_file() {
        return Ok(String::new());
    }
    let enc = crate::inputs::TokenizerEncoder::from_file(path).map_err(|e| bad(format!("--tokenizer {tok}: {e}")))?;
    let text = std::fs::read(&config).map_err(|e| bad(format!("{}: {e}", config.display())))?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(format!("{}: not JSON ({e})", config.display())))?;
    let ids: Vec<String> = enc.special_ids_named(&v).iter().map(u32::to_string).collect();
    Ok(format!("special_ids = [{}]\n", ids.join(", ")))
}

/// vLLM's `--random-range-ratio`: one float for both, or `{"input": R, "output": R}`.
fn range_ratios(a: &BenchArgs) -> Result<(f64, f64), BenchError> {
    let Some(text) = a.random_range_ratio.as_deref() else { return Ok((0.0, 0.0)) };
    let bad_value = || bad(format!("--random-range-ratio {text:?}: a float, or {{\"input\": R, \"output\": R}}"));
    let (i, o) = if text.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|_| bad_value())?;
        let get = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).ok_or_else(bad_value);
        (get("input")?, get("output")?)
    } else {
        let r: f64 = text.trim().parse().map_err(|_| bad_value())?;
        (r, r)
    };
    for r in [i, o] {
        if !(0.0..1.0).contains(&r) {
            return Err(bad(format!("--random-range-ratio: must be in [0, 1) (vLLM's range), got {r}")));
        }
    }
    Ok((i, o))
}

/// `[request]` and `[prompts]`.
fn panel(a: &BenchArgs, t: &mut String) -> Result<(), BenchError> {
    let (temperature, extra_body) = sampling(a)?;
    let n = a.num_prompts;
    let path = a.dataset_path.as_deref().unwrap_or_default();
    let fixed_output = a.random_output_len;
    let natural = if a.ignore_eos { "forced" } else { "natural" };
    let custom_output = u32::try_from(a.custom_output_len).ok();
    let (output, request) = match (&a.length_shape, a.dataset) {
        // A trace cell's rows: each request's own output length (`trace_lengths`).
        _ if a.trace_replay.is_some() => {
            (natural, format!("output_tokens = {}\n", a.trace_replay.as_ref().map_or(1, |tr| tr.max_output)))
        }
        // `harness profile`'s synthetic lengths: each entry's own output length.
        (Some(s), _) => {
            (if s.natural { "natural" } else { "forced" }, format!("max_output_tokens = {}\n", s.output_cap))
        }
        (None, d) => dataset_output(a, d, natural, fixed_output, custom_output),
    };
    let model = a.served_model_name.as_deref().or(a.model.as_deref()).unwrap_or_default();
    let endpoint = if chat(a) { "endpoint = \"chat\"\n" } else { "" };
    let token_ids = if a.no_token_ids { "token_ids = false\n" } else { "" };
    let request_ids =
        a.request_id_prefix.as_ref().map(|p| format!("request_id_prefix = {}\n", quote(p))).unwrap_or_default();
    let _ = write!(
        t,
        "[request]\nmodel = {}\noutput = \"{output}\"\n{request}temperature = {temperature:?}\n{endpoint}{token_ids}{request_ids}{extra_body}\n",
        quote(model),
    );
    t.push_str("[prompts]\n");
    let tokenizer = a.tokenizer.as_ref().map(|k| format!("tokenizer = {}\n", quote(k))).unwrap_or_default();
    let (ri, ro) = range_ratios(a)?;
    if let Some(tr) = &a.trace_replay {
        trace_panel(a, tr, &tokenizer, t);
        return Ok(());
    }
    if let Some(shape) = &a.length_shape {
        let entries = a.panel_entries.unwrap_or(n);
        let _ = match a.dataset {
            Dataset::Synthetic => write!(
                t,
                "source = \"synthetic\"\ntexts = {}\n{tokenizer}num_requests = {entries}\ninput_tokens = {}\n\
                 output_tokens = {}\n",
                quote(path),
                shape.input,
                shape.output
            ),
            _ => write!(
                t,
                "source = \"synthetic\"\nnum_requests = {entries}\nmin_token_id = 0\nmax_token_id = {}\n\
                 input_tokens = {}\noutput_tokens = {}\n",
                a.max_token_id, shape.input, shape.output
            ),
        };
        t.push('\n');
        return Ok(());
    }
    let _ = match a.dataset {
        Dataset::Random => {
            let mut output_ratio = if ro == ri { String::new() } else { format!("output_range_ratio = {ro:?}\n") };
            output_ratio.push_str(&special_ids_line(a)?);
            write!(
                t,
                "source = \"vllm_random\"\n{tokenizer}num_requests = {n}\ninput_len = {}\noutput_len = {}\n\
                 prefix_len = {}\nrange_ratio = {ri:?}\n{output_ratio}",
                a.random_input_len,
                fixed_output,
                a.random_prefix_len.unwrap_or(0),
            )
        }
        Dataset::RandomIds if ri != 0.0 || a.random_prefix_len.is_some_and(|p| p > 0) => write!(
            t,
            "source = \"synthetic\"\nnum_requests = {n}\nmin_token_id = 0\nmax_token_id = {}\nprefix_tokens = {}\n\
             input_tokens = {}\noutput_tokens = {}\n",
            a.max_token_id,
            a.random_prefix_len.unwrap_or(0),
            length_range(a.random_input_len, ri),
            length_range(fixed_output, ro)
        ),
        Dataset::RandomIds => write!(
            t,
            "source = \"random\"\nlengths = [{}]\ndocuments = {}\nmin_token_id = 0\nmax_token_id = {}\n",
            a.random_input_len,
            n.min(MAX_DOCUMENTS),
            a.max_token_id
        ),
        Dataset::Sharegpt => {
            let mut over = a.sharegpt_output_len.map(|o| format!("output_len = {o}\n")).unwrap_or_default();
            if a.disable_shuffle {
                over.push_str("shuffle = false\n");
            }
            write!(t, "source = \"sharegpt\"\npath = {}\n{tokenizer}num_requests = {n}\n{over}", quote(path))
        }
        Dataset::Burstgpt => {
            write!(t, "source = \"vllm_burstgpt\"\npath = {}\n{tokenizer}num_requests = {n}\n", quote(path))
        }
        Dataset::PrefixRepetition => write!(
            t,
            "source = \"vllm_prefix_repetition\"\n{tokenizer}num_requests = {n}\nprefix_len = {}\nsuffix_len = {}\n\
             num_prefixes = {}\noutput_len = {}\n{}",
            a.prefix_repetition_prefix_len,
            a.prefix_repetition_suffix_len,
            a.prefix_repetition_num_prefixes,
            a.prefix_repetition_output_len,
            if a.disable_shuffle { "shuffle = false\n" } else { "" }
        ),
        Dataset::Custom => {
            let over = custom_output.map(|o| format!("output_len = {o}\n")).unwrap_or_default();
            write!(t, "source = \"requests\"\npath = {}\n{tokenizer}num_requests = {n}\n{over}", quote(path))
        }
        Dataset::Requests => {
            write!(t, "source = \"requests\"\npath = {}\n{tokenizer}num_requests = {n}\n", quote(path))
        }
        Dataset::Synthetic => write!(
            t,
            "source = \"synthetic\"\ntexts = {}\n{tokenizer}num_requests = {n}\n\
             input_tokens = {{ dist = \"fixed\", value = {} }}\noutput_tokens = {{ dist = \"fixed\", value = {} }}\n",
            quote(path),
            a.random_input_len,
            fixed_output
        ),
    };
    t.push('\n');
    Ok(())
}

/// A trace cell's fixed-length panel: text cut with the tokenizer from
/// `--dataset-path`'s texts, else random token IDs; one length per distinct row
/// input length.
fn trace_panel(a: &BenchArgs, tr: &super::TraceReplay, tokenizer: &str, t: &mut String) {
    let lengths: Vec<String> = tr.lengths.iter().map(u32::to_string).collect();
    let (lengths, documents) = (lengths.join(", "), tr.documents);
    let _ = match (a.dataset, a.dataset_path.as_deref()) {
        (Dataset::Synthetic, Some(texts)) => write!(
            t,
            "source = \"text\"\ntexts = {}\n{tokenizer}lengths = [{lengths}]\ndocuments = {documents}\n",
            quote(texts)
        ),
        _ => write!(
            t,
            "source = \"random\"\nlengths = [{lengths}]\ndocuments = {documents}\nmin_token_id = 0\nmax_token_id = {}\n",
            a.max_token_id
        ),
    };
    t.push('\n');
}

/// The trace cell of `harness profile`'s Mooncake file: every row's timestamp,
/// input and output length (`trace_lengths`), capped in flight by
/// `max_concurrency` when given.
fn trace_cell(a: &BenchArgs, tr: &super::TraceReplay, t: &mut String) {
    let cap = a.max_concurrency.map(|c| format!("max_concurrency = {c}\n")).unwrap_or_default();
    let _ = write!(
        t,
        "[[cells]]\nname = \"trace\"\nkind = \"descriptive\"\nload = \"trace\"\ntrace = {}\ntrace_lengths = true\n\
         count = {}\n{cap}\n",
        quote(&tr.path),
        a.num_prompts
    );
}

/// The `[request]` output mode and length line of a dataset's own lengths.
fn dataset_output(
    a: &BenchArgs,
    d: Dataset,
    natural: &'static str,
    fixed_output: u32,
    custom_output: Option<u32>,
) -> (&'static str, String) {
    match d {
        // vLLM sets ignore_eos for its random dataset.
        Dataset::Random | Dataset::RandomIds | Dataset::Synthetic => {
            ("forced", format!("output_tokens = {fixed_output}\n"))
        }
        // vLLM sends each row's Response tokens as max_tokens, uncapped.
        Dataset::Burstgpt => (natural, format!("max_output_tokens = {}\n", u32::MAX)),
        Dataset::PrefixRepetition => (natural, format!("output_tokens = {}\n", a.prefix_repetition_output_len)),
        Dataset::Sharegpt => {
            (natural, format!("max_output_tokens = {}\n", a.sharegpt_output_len.unwrap_or(DEFAULT_DATASET_OUTPUT_CAP)))
        }
        Dataset::Custom => {
            (natural, format!("max_output_tokens = {}\n", custom_output.unwrap_or(DEFAULT_DATASET_OUTPUT_CAP)))
        }
        Dataset::Requests => {
            (natural, format!("max_output_tokens = {}\n", a.output_len.unwrap_or(DEFAULT_DATASET_OUTPUT_CAP)))
        }
    }
}

/// vLLM's integer-uniform range around `len`: [floor(len(1-r)), ceil(len(1+r))],
/// the low end at least 1, as a plan distribution.
fn length_range(len: u32, r: f64) -> String {
    let low = ((f64::from(len) * (1.0 - r)).floor() as u32).max(1);
    let high = ((f64::from(len) * (1.0 + r)).ceil() as u32).max(low);
    if low == high {
        format!("{{ dist = \"fixed\", value = {low} }}")
    } else {
        format!("{{ dist = \"uniform\", min = {low}, max = {high} }}")
    }
}

/// `--random-range-ratio` and `--random-prefix-len` only with the random datasets.
fn range_and_prefix(a: &BenchArgs) -> Result<(), BenchError> {
    let (ri, ro) = range_ratios(a)?;
    let varied = ri != 0.0 || ro != 0.0 || a.random_prefix_len.is_some_and(|n| n > 0);
    if varied && !matches!(a.dataset, Dataset::Random | Dataset::RandomIds) {
        return Err(bad(format!(
            "--random-range-ratio and --random-prefix-len shape --dataset-name random, not {}",
            dataset_name(a.dataset)
        )));
    }
    Ok(())
}

/// `[[arms]]`: the one arm.
fn arm(a: &BenchArgs, port: impl FnOnce() -> u16, t: &mut String) -> Result<String, BenchError> {
    t.push_str("[[arms]]\nname = \"server\"\nrole = \"control\"\n");
    let what = match (&a.url, &a.argv) {
        (Some(url), None) => {
            let _ = writeln!(t, "url = {}", quote(url));
            format!("the server at {url}")
        }
        (None, Some(text)) => {
            let words = split_words(text).map_err(bad)?;
            if words.is_empty() {
                return Err(bad("--argv: empty command line"));
            }
            let port = a.port.unwrap_or_else(port);
            let _ = write!(t, "argv = {}\nport = {port}\n", array(&words));
            if words.iter().any(|w| w.contains("{receipts}")) {
                t.push_str("receipts = \"{arm_dir}/receipts.jsonl\"\n");
            }
            format!("a fresh `{}` on port {port}", words.join(" "))
        }
        _ => return Err(bad("give exactly one of --url (a running server) and --argv (a server to start)")),
    };
    let _ = write!(t, "health = {}\nstartup_timeout_s = {:?}\n", quote(&a.health), a.startup_timeout_s);
    if let Some(var) = &a.api_key_env {
        let _ = writeln!(t, "api_key_env = {}", quote(var));
    }
    t.push_str(&headers(a)?);
    if let Some(tok) = &a.tokenizer {
        let _ = writeln!(t, "tokenizer = {}", quote(tok));
    }
    t.push('\n');
    Ok(what)
}

/// The plan text the flags describe (`port`: the spawned server's port when
/// `--port` is not given). Errors name the flag.
pub fn plan_text(a: &BenchArgs, port: impl FnOnce() -> u16) -> Result<String, BenchError> {
    check_flags(a)?;
    let mut arms = String::new();
    let what = arm(a, port, &mut arms)?;
    let mut t = String::from(
        "# Written by `harness bench`: a one-arm study, descriptive cells only (docs/plan.md\n\
         # documents every key). Run it again with `harness run plan.toml --out DIR`.\n\n",
    );
    let _ = write!(
        t,
        "[study]\nname = {}\nseed = {}\ndescription = {}\n\n",
        quote(&a.name),
        a.seed,
        quote(&format!("harness bench: {} requests per cell to {what}", a.num_prompts))
    );
    panel(a, &mut t)?;
    t.push_str(&slo(a)?);
    let _ = write!(
        t,
        "[warmup]\nprompts = {}\noutput_tokens = 4\n\n[timing]\nsettle_s = {:?}\nrequest_timeout_s = {:?}\n\
         drain_timeout_s = {:?}\n\n[blocks]\ncount = 0\ndescriptive = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
         [limits]\nmax_error_rate = {:?}\n\n",
        a.num_warmups.unwrap_or(0),
        a.settle_s,
        a.request_timeout_s,
        a.request_timeout_s,
        a.max_error_rate
    );
    t.push_str(&arms);
    if let Some(tr) = &a.trace_replay {
        trace_cell(a, tr, &mut t);
    }
    let (kind, load, arrival) = if a.constant_arrivals {
        ("constant", "constant", String::new())
    } else {
        match a.burstiness {
            Some(b) if b != 1.0 => ("gamma", "open", format!("arrival = \"gamma\"\nburstiness = {b:?}\n")),
            _ => ("poisson", "open", String::new()),
        }
    };
    // vLLM's --max-concurrency beside finite rates: the open cells' in-flight cap.
    let arrival = match a.max_concurrency {
        Some(c) => format!("{arrival}max_concurrency = {c}\n"),
        None => arrival,
    };
    if !a.counts_per_rate.is_empty() {
        // A count per rate (guidellm's max_duration): one cell each, named as a sweep would name them.
        for (r, n) in a.rate.iter().zip(&a.counts_per_rate) {
            let name = crate::plan::rate_cell_name(kind, *r);
            let _ = write!(
                t,
                "[[cells]]\nname = {}\nkind = \"descriptive\"\nload = \"{load}\"\nrate = {r:?}\ncount = {n}\n{arrival}\n",
                quote(&name)
            );
        }
    } else if !a.rate.is_empty() {
        let rates: Vec<String> = a.rate.iter().map(|r| format!("{r:?}")).collect();
        let _ = write!(
            t,
            "[[cells]]\nname = \"{kind}\"\nkind = \"descriptive\"\nload = \"{load}\"\nrate = [{}]\ncount = {}\n{arrival}\n",
            rates.join(", "),
            a.num_prompts
        );
    }
    if !a.concurrency.is_empty() {
        let cs: Vec<String> = a.concurrency.iter().map(u32::to_string).collect();
        let _ = write!(
            t,
            "[[cells]]\nname = \"closed\"\nkind = \"descriptive\"\nload = \"closed\"\nconcurrency = [{}]\ncount = {}\n\n",
            cs.join(", "),
            a.num_prompts
        );
    }
    Ok(t.trim_end().to_string() + "\n")
}
