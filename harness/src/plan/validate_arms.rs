//! Validation of the arms and the prompt panel (see `validate` for the rest). Owns
//! the rules for how a server is reached (argv xor url), its placeholders, ports and
//! health path, and which keys each panel source takes. Must not touch files.

use std::collections::BTreeMap;

use super::placeholders;
use super::schema::{ArmFile, LimitsFile, PromptsFile};
use super::types::{Arm, PanelSource, PanelSpec, Server};
use super::validate::Checker;

/// `stop_grace_s` when an arm does not set it.
pub const DEFAULT_STOP_GRACE_S: f64 = 30.0;

/// Environment variables older vLLM releases read and vLLM 0.34 ignores (it only
/// logs "Unknown vLLM environment variable"), with what to pass instead.
const IGNORED_VLLM_ENV: [(&str, &str); 2] = [
    ("VLLM_ATTENTION_BACKEND", "pass `--attention-backend NAME` (e.g. FLASHINFER, FLASH_ATTN) in argv"),
    (
        "VLLM_FLASH_ATTN_VERSION",
        "pass `--attention-backend FLASH_ATTN --attention-config.flash_attn_version=3` in argv",
    ),
];

/// `max_start_failures` when an arm does not set it.
pub const DEFAULT_MAX_START_FAILURES: u32 = 2;

pub(super) fn arms(c: &mut Checker, files: Vec<ArmFile>) -> Vec<Arm> {
    if files.is_empty() {
        c.err("arms", "the plan needs at least one [[arms]] entry");
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, a) in files.into_iter().enumerate() {
        let k = format!("arms[{i}]");
        c.name(&format!("{k}.name"), &a.name);
        if let Some(first) = seen.insert(a.name.clone(), i) {
            c.err(format!("{k}.name"), format!("duplicate arm name {:?} (also arms[{first}])", a.name));
        }
        let external = a.url.is_some() && a.argv.is_none();
        let server = match (a.argv, a.url) {
            (Some(_), Some(_)) => {
                c.err(&k, "set either argv (a server the harness starts) or url (an external server), not both");
                None
            }
            (None, None) => {
                c.err(format!("{k}.argv"), "must be a non-empty array (or set url for an external server)");
                None
            }
            (Some(argv), None) => {
                if argv.is_empty() || argv[0].trim().is_empty() {
                    c.err(format!("{k}.argv"), "must be a non-empty array whose first item names the program");
                }
                for (j, item) in argv.iter().enumerate() {
                    if let Err(m) = placeholders::check(item, a.receipts.is_some()) {
                        c.err(format!("{k}.argv[{j}]"), m);
                    }
                }
                let port = match a.port {
                    Some(p) => c.int(&format!("{k}.port"), p, 1, 65535).map(|p| p as u16),
                    None => {
                        c.err(format!("{k}.port"), "required for a server the harness starts");
                        None
                    }
                };
                port.map(|port| Server::Spawn { argv, port })
            }
            (None, Some(url)) => {
                c.forbid(&format!("{k}.port"), &a.port, "an external server's port is part of its url");
                c.forbid(&format!("{k}.stop_grace_s"), &a.stop_grace_s, "the harness never stops an external server");
                if !a.env.is_empty() {
                    c.err(format!("{k}.env"), "only a server the harness starts takes env");
                }
                // The OpenAI SDK habit: a base URL ending in /v1 names the same server.
                let url = url.trim_end_matches('/');
                let url = url.strip_suffix("/v1").unwrap_or(url).trim_end_matches('/').to_string();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    c.err(format!("{k}.url"), format!("{url:?} must start with http:// or https://"));
                }
                if let Some(r) = &a.receipts
                    && !placeholders::placeholders_in(r).is_empty()
                {
                    c.err(format!("{k}.receipts"), "an external server's receipts path cannot use placeholders");
                }
                Some(Server::External { url })
            }
        };
        for (key, value) in &a.env {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                c.err(format!("{k}.env"), format!("{key:?} is not a valid variable name"));
            }
            if let Err(m) = placeholders::check(value, a.receipts.is_some()) {
                c.err(format!("{k}.env.{key}"), m);
            }
            if let Some((_, instead)) = IGNORED_VLLM_ENV.iter().find(|(v, _)| v == key) {
                c.err(
                    format!("{k}.env.{key}"),
                    format!(
                        "current vLLM (0.34) no longer reads {key} (an unknown VLLM_* variable only logs a \
                         warning), so the arm would run vLLM's default and not what its name says: {instead}"
                    ),
                );
            }
        }
        if let Some(r) = &a.receipts {
            if r.trim().is_empty() {
                c.err(format!("{k}.receipts"), "must not be empty");
            } else if let Err(m) = placeholders::check(r, false) {
                c.err(format!("{k}.receipts"), m);
            }
        }
        let health = a.health.unwrap_or_else(|| crate::protocol::routes::DEFAULT_HEALTH_PATH.into());
        if !health.starts_with('/') {
            c.err(format!("{k}.health"), format!("{health:?} must be a path starting with /"));
        }
        let startup_timeout_s = a.startup_timeout_s.unwrap_or(600.0);
        c.seconds(&format!("{k}.startup_timeout_s"), startup_timeout_s, false);
        let stop_grace_s = a.stop_grace_s.unwrap_or(DEFAULT_STOP_GRACE_S);
        c.seconds(&format!("{k}.stop_grace_s"), stop_grace_s, true);
        let max_start_failures = match a.max_start_failures {
            Some(n) => c.int(&format!("{k}.max_start_failures"), n, 1, u32::MAX.into()).unwrap_or(1) as u32,
            None => DEFAULT_MAX_START_FAILURES,
        };
        access(c, &k, a.api_key_env.as_deref(), &a.headers);
        let identity = a.identity.map(|f| super::validate_identity::identity(c, &format!("{k}.identity"), f, external));
        let cpus = a.cpus.and_then(|v| cpu_set(c, &format!("{k}.cpus"), &v));
        if external && cpus.is_some() {
            c.err(
                format!("{k}.cpus"),
                "an external server runs where its owner started it: only a spawned arm takes cpus",
            );
        }
        // An invalid server has already been reported; the arm is kept (with a
        // stand-in that never leaves validation) so that references to it by name
        // do not raise a second, misleading "unknown arm".
        let server = server.unwrap_or(Server::External { url: String::new() });
        out.push(Arm {
            name: a.name,
            role: a.role,
            server,
            env: a.env,
            health,
            startup_timeout_s,
            stop_grace_s,
            receipts: a.receipts,
            tokenizer: a.tokenizer,
            max_start_failures,
            api_key_env: a.api_key_env,
            headers: a.headers,
            identity,
            cpus,
        });
    }
    same_server(c, &out);
    out
}

/// A CPU set as written (`[0, 1]`): non-empty, each CPU once, within what a
/// `cpu_set_t` holds; sorted.
pub(super) fn cpu_set(c: &mut Checker, key: &str, cpus: &[i64]) -> Option<Vec<u32>> {
    if cpus.is_empty() {
        c.err(key, "an empty CPU set: leave the key out to leave the process unpinned");
        return None;
    }
    let mut out = Vec::new();
    for &cpu in cpus {
        let cpu = c.int(key, cpu, 0, crate::host::MAX_CPU.into())? as u32;
        if out.contains(&cpu) {
            c.err(key, format!("CPU {cpu} is listed twice"));
            return None;
        }
        out.push(cpu);
    }
    out.sort_unstable();
    Some(out)
}

/// Two arms may not share a port (a server still shutting down would answer the
/// next arm's requests) or a url (both names would measure one server).
fn same_server(c: &mut Checker, arms: &[Arm]) {
    for (i, a) in arms.iter().enumerate() {
        let Some(first) = arms[..i].iter().position(|b| match (&a.server, &b.server) {
            (Server::Spawn { port: p, .. }, Server::Spawn { port: q, .. }) => p == q,
            (Server::External { url: u }, Server::External { url: v }) => !u.is_empty() && u == v,
            _ => false,
        }) else {
            continue;
        };
        match &a.server {
            Server::Spawn { port, .. } => c.err(
                format!("arms[{i}].port"),
                format!("{port} is also arms[{first}]'s port: a server still shutting down would answer this arm"),
            ),
            Server::External { url } => c.err(
                format!("arms[{i}].url"),
                format!("{url} is also arms[{first}]'s url: both arms would measure one server under two names"),
            ),
        }
    }
}

/// `api_key_env` names a variable (never holds a key); `headers` are valid HTTP
/// header names and values, and leave `Authorization` to `api_key_env`.
fn access(c: &mut Checker, k: &str, api_key_env: Option<&str>, headers: &BTreeMap<String, String>) {
    if let Some(name) = api_key_env {
        let ok = !name.is_empty()
            && !name.as_bytes()[0].is_ascii_digit()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            c.err(
                format!("{k}.api_key_env"),
                format!(
                    "{name:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*): give the NAME of the \
                     variable that holds the key, never the key itself"
                ),
            );
        }
    }
    for (name, value) in headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            c.err(format!("{k}.headers"), format!("{name:?} is not a valid HTTP header name"));
        } else if name.eq_ignore_ascii_case("authorization") && api_key_env.is_some() {
            c.err(format!("{k}.headers.{name}"), "set by api_key_env; give one or the other");
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            c.err(format!("{k}.headers.{name}"), "is not a valid HTTP header value (visible ASCII and spaces)");
        }
    }
}

/// `[limits]`: the largest failed fraction a cell may have (default 0, strict).
pub(super) fn limits(c: &mut Checker, limits: Option<LimitsFile>) -> f64 {
    let rate = limits.and_then(|l| l.max_error_rate).unwrap_or(0.0);
    if !(0.0..=1.0).contains(&rate) {
        c.err("limits.max_error_rate", format!("must be in 0..=1 (a fraction of a cell's requests), got {rate}"));
        return 0.0;
    }
    rate
}

pub(super) fn prompts(c: &mut Checker, p: PromptsFile, arms: &[Arm]) -> PanelSpec {
    if super::validate_vllm_panel::is_vllm_legacy_source(&p.source) {
        return super::validate_vllm_panel::panel(c, p, arms);
    }
    if matches!(p.source.as_str(), "sharegpt" | "requests" | "synthetic" | "shared_prefix" | "vllm_random") {
        return super::validate_panel::dataset(c, p, arms);
    }
    super::validate_panel::forbid_dataset_keys(c, &p);
    c.forbid("prompts.max_turns", &p.max_turns, "only sharegpt and requests panels hold sessions");
    let mut lengths = Vec::new();
    let listed = p.lengths.as_deref().unwrap_or_default();
    if listed.is_empty() {
        c.err("prompts.lengths", "must list at least one prompt length");
    }
    for (i, &l) in listed.iter().enumerate() {
        if let Some(l) = c.int(&format!("prompts.lengths[{i}]"), l, 1, 1 << 24) {
            if lengths.contains(&(l as u32)) {
                c.err(format!("prompts.lengths[{i}]"), format!("duplicate length {l}"));
            }
            lengths.push(l as u32);
        }
    }
    let documents = match p.documents {
        Some(d) => c.int("prompts.documents", d, 1, 1 << 20).unwrap_or(1) as u32,
        None => {
            c.err("prompts.documents", "required: how many prompts per length");
            1
        }
    };
    let only = |src: &str| format!("only {src} panels take this key (prompts.source = {:?})", p.source);
    let source = match p.source.as_str() {
        "text" => {
            c.forbid("prompts.path", &p.path, &only("jsonl"));
            c.forbid("prompts.min_token_id", &p.min_token_id, &only("random"));
            c.forbid("prompts.max_token_id", &p.max_token_id, &only("random"));
            let pattern = p.pattern.unwrap_or_else(|| "*.txt".into());
            if pattern.matches('*').count() > 1 || pattern.contains('/') {
                c.err("prompts.pattern", "a file name with at most one `*`");
            }
            let dir = p.texts.unwrap_or_else(|| {
                c.err("prompts.texts", "required for a text panel (a directory of text files)");
                String::new()
            });
            let tokenizer = panel_tokenizer(c, p.tokenizer, arms);
            PanelSource::Text { dir, pattern, tokenizer }
        }
        "jsonl" => {
            for (key, v) in [("texts", &p.texts), ("pattern", &p.pattern), ("tokenizer", &p.tokenizer)] {
                c.forbid(&format!("prompts.{key}"), v, &only("text"));
            }
            c.forbid("prompts.min_token_id", &p.min_token_id, &only("random"));
            c.forbid("prompts.max_token_id", &p.max_token_id, &only("random"));
            let path = p.path.unwrap_or_else(|| {
                c.err("prompts.path", "required for a jsonl panel");
                String::new()
            });
            PanelSource::Jsonl { path }
        }
        "random" => {
            for (key, v) in [("texts", &p.texts), ("pattern", &p.pattern), ("tokenizer", &p.tokenizer)] {
                c.forbid(&format!("prompts.{key}"), v, &only("text"));
            }
            c.forbid("prompts.path", &p.path, &only("jsonl"));
            let (min_token_id, max_token_id) = token_id_range(c, p.min_token_id, p.max_token_id, "random");
            PanelSource::Random { min_token_id, max_token_id }
        }
        other => {
            c.err(
                "prompts.source",
                format!(
                    "unknown source {other:?} (use \"text\", \"jsonl\", \"random\", \"sharegpt\", \"requests\", \
                     \"synthetic\", \"shared_prefix\", \"vllm_random\", \"vllm_burstgpt\" or \
                     \"vllm_prefix_repetition\")"
                ),
            );
            PanelSource::Jsonl { path: String::new() }
        }
    };
    PanelSpec { source, lengths, documents, max_turns: None, output_len: None }
}

/// The tokenizer that cuts a text panel: `prompts.tokenizer`, else the one every arm
/// that declares a tokenizer names. Arms that declare one must agree with it.
pub(super) fn panel_tokenizer(c: &mut Checker, panel: Option<String>, arms: &[Arm]) -> String {
    let declared: Vec<(usize, &String)> =
        arms.iter().enumerate().filter_map(|(i, a)| a.tokenizer.as_ref().map(|t| (i, t))).collect();
    let chosen = panel.or_else(|| declared.first().map(|(_, t)| (*t).clone()));
    let Some(chosen) = chosen else {
        c.err("prompts.tokenizer", "a text panel needs a tokenizer (here or in the arms' `tokenizer`)");
        return String::new();
    };
    for (i, t) in declared {
        if *t != chosen {
            c.err(
                format!("arms[{i}].tokenizer"),
                format!("{t:?} differs from the panel's tokenizer {chosen:?}: every arm must read the same token IDs"),
            );
        }
    }
    chosen
}

/// `prompts.min_token_id` (default 0) ..= `prompts.max_token_id` (required for a
/// `what` panel), both within u32 and in order.
pub(super) fn token_id_range(c: &mut Checker, min: Option<i64>, max: Option<i64>, what: &str) -> (u32, u32) {
    let max_id = u32::MAX.into();
    let lo = match min {
        Some(v) => c.int("prompts.min_token_id", v, 0, max_id),
        None => Some(0),
    };
    let hi = match max {
        Some(v) => c.int("prompts.max_token_id", v, 0, max_id),
        None => {
            c.err("prompts.max_token_id", format!("required for a {what} panel"));
            None
        }
    };
    if let (Some(lo), Some(hi)) = (lo, hi)
        && lo > hi
    {
        c.err("prompts.min_token_id", format!("{lo} exceeds max_token_id {hi}"));
    }
    (lo.unwrap_or(0) as u32, hi.unwrap_or(0) as u32)
}
