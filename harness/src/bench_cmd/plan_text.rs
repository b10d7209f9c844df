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
    if a.port.is_some() && a.argv.is_none() {
        return Err(bad("--port: only with --argv (the port the started server listens on)"));
    }
    if a.num_prompts == 0 {
        return Err(bad("--num-prompts: must be at least 1"));
    }
    let needs_path = a.dataset != Dataset::Random;
    match (&a.dataset_path, needs_path) {
        (None, true) => return Err(bad(format!("--dataset {}: needs --dataset-path", dataset_name(a.dataset)))),
        (Some(_), false) => return Err(bad("--dataset-path: only with --dataset sharegpt, synthetic or requests")),
        _ => {}
    }
    let needs_tokenizer = matches!(a.dataset, Dataset::Sharegpt | Dataset::Synthetic);
    if needs_tokenizer && a.tokenizer.is_none() {
        return Err(bad(format!(
            "--dataset {}: needs --tokenizer (a tokenizer.json that encodes its text)",
            dataset_name(a.dataset)
        )));
    }
    if a.dataset == Dataset::Random && a.tokenizer.is_some() {
        return Err(bad("--tokenizer: random token IDs are not encoded; use --dataset synthetic for real text"));
    }
    if a.output_len == Some(0) || a.input_len == 0 {
        return Err(bad("--input-len and --output-len must be at least 1"));
    }
    Ok(())
}

fn dataset_name(d: Dataset) -> &'static str {
    match d {
        Dataset::Random => "random",
        Dataset::Sharegpt => "sharegpt",
        Dataset::Synthetic => "synthetic",
        Dataset::Requests => "requests",
    }
}

/// `[request]` and `[prompts]`.
fn panel(a: &BenchArgs, t: &mut String) {
    let n = a.num_prompts;
    let path = a.dataset_path.as_deref().unwrap_or_default();
    let fixed_output = a.output_len.unwrap_or(128);
    let (output, request) = match a.dataset {
        Dataset::Random | Dataset::Synthetic => ("forced", format!("output_tokens = {fixed_output}\n")),
        Dataset::Sharegpt | Dataset::Requests => (
            if a.ignore_eos { "forced" } else { "natural" },
            format!("max_output_tokens = {}\n", a.output_len.unwrap_or(DEFAULT_DATASET_OUTPUT_CAP)),
        ),
    };
    let _ = write!(t, "[request]\nmodel = {}\noutput = \"{output}\"\n{request}temperature = 0.0\n\n", quote(&a.model));
    t.push_str("[prompts]\n");
    let tokenizer = a.tokenizer.as_ref().map(|k| format!("tokenizer = {}\n", quote(k))).unwrap_or_default();
    let _ = match a.dataset {
        Dataset::Random => write!(
            t,
            "source = \"random\"\nlengths = [{}]\ndocuments = {}\nmin_token_id = 0\nmax_token_id = {}\n",
            a.input_len,
            n.min(MAX_DOCUMENTS),
            a.max_token_id
        ),
        Dataset::Sharegpt => {
            write!(t, "source = \"sharegpt\"\npath = {}\n{tokenizer}num_requests = {n}\n", quote(path))
        }
        Dataset::Requests => {
            write!(t, "source = \"requests\"\npath = {}\n{tokenizer}num_requests = {n}\n", quote(path))
        }
        Dataset::Synthetic => write!(
            t,
            "source = \"synthetic\"\ntexts = {}\n{tokenizer}num_requests = {n}\n\
             input_tokens = {{ dist = \"fixed\", value = {} }}\noutput_tokens = {{ dist = \"fixed\", value = {} }}\n",
            quote(path),
            a.input_len,
            fixed_output
        ),
    };
    t.push('\n');
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
    panel(a, &mut t);
    let _ = write!(
        t,
        "[warmup]\nprompts = 1\noutput_tokens = 4\n\n[timing]\nsettle_s = {:?}\nrequest_timeout_s = {:?}\n\
         drain_timeout_s = {:?}\n\n[blocks]\ncount = 0\ndescriptive = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
         [limits]\nmax_error_rate = {:?}\n\n",
        a.settle_s, a.request_timeout_s, a.request_timeout_s, a.max_error_rate
    );
    t.push_str(&arms);
    if !a.rate.is_empty() {
        let rates: Vec<String> = a.rate.iter().map(|r| format!("{r:?}")).collect();
        let _ = write!(
            t,
            "[[cells]]\nname = \"poisson\"\nkind = \"descriptive\"\nload = \"open\"\nrate = [{}]\ncount = {}\n\n",
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
