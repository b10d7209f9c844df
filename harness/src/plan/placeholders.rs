//! Placeholders in arm argv, env values and receipts paths: which exist, how they are
//! found, and how the runner expands them for one server start. Must not spawn
//! anything or decide paths: the runner passes the block and the arm's raw directory.
//!
//! A placeholder is `{` + one or more of `a-z` and `_` + `}`. Any other brace text
//! (e.g. a JSON argument such as `{"cudagraph_mode": "FULL_DECODE_ONLY"}`) is literal.
//! There is no escape: a literal `{port}` cannot be written.
//!
//! | placeholder | value |
//! | --- | --- |
//! | `{port}` | the arm's `port` |
//! | `{host}` | `127.0.0.1` (spawned servers listen on loopback) |
//! | `{model}` | `request.model`, the name every request sends |
//! | `{arm}` | the arm's name |
//! | `{block}` | the block index (0-based) |
//! | `{arm_dir}` | absolute path of this invocation's `raw/b<block>/<arm>/` directory |
//! | `{receipts}` | the arm's `receipts` path, itself expanded (not usable inside it) |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::PlanError;
use super::types::{Arm, Plan, Server};

/// Every placeholder name the runner expands.
pub const PLACEHOLDERS: [&str; 7] = ["port", "host", "model", "arm", "block", "arm_dir", "receipts"];

/// The placeholder names in `template`, in order of appearance.
pub fn placeholders_in(template: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_name(&after[..close]) => {
                found.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    found
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// Values for one server start.
#[derive(Debug, Clone)]
pub struct Vars<'a> {
    pub port: Option<u16>,
    pub model: &'a str,
    pub arm: &'a str,
    pub block: u32,
    pub arm_dir: &'a str,
    pub receipts: Option<&'a str>,
}

/// Expands every placeholder of `template`; an unknown or unavailable one is an error
/// naming it (validation has already rejected those, so this is a second guard).
pub fn expand(template: &str, vars: &Vars<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_name(&after[..close]) => {
                let name = &after[..close];
                let value = match name {
                    "port" => vars.port.map(|p| p.to_string()),
                    "host" => Some("127.0.0.1".to_string()),
                    "model" => Some(vars.model.to_string()),
                    "arm" => Some(vars.arm.to_string()),
                    "block" => Some(vars.block.to_string()),
                    "arm_dir" => Some(vars.arm_dir.to_string()),
                    "receipts" => vars.receipts.map(str::to_string),
                    _ => None,
                };
                out.push_str(&value.ok_or_else(|| format!("{{{name}}} has no value here"))?);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Checks one template; `receipts_ok` says whether `{receipts}` may appear.
pub(super) fn check(template: &str, receipts_ok: bool) -> Result<(), String> {
    for name in placeholders_in(template) {
        if !PLACEHOLDERS.contains(&name) {
            let known: Vec<String> = PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
            return Err(format!("unknown placeholder {{{name}}} (known: {})", known.join(", ")));
        }
        if name == "receipts" && !receipts_ok {
            return Err("{receipts} needs the arm's `receipts` key (and cannot appear in it)".into());
        }
    }
    Ok(())
}

/// The command for one start of a spawned arm, placeholders expanded.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmCommand {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub port: u16,
    pub receipts: Option<PathBuf>,
    /// The CPUs the server is started on: the arm's set (`[[arms]] cpus`); for an
    /// unpinned arm of a plan that pins its client, every CPU (the kernel keeps the
    /// ones the machine allows), so that it does not inherit the client's set;
    /// otherwise `None` (it inherits the harness's, as any child does).
    pub cpus: Option<Vec<u32>>,
}

impl Plan {
    /// Expands `arm`'s argv, env and receipts for block `block`, whose raw directory
    /// is `arm_dir` (pass an absolute path). `None` for an external arm.
    pub fn arm_command(&self, arm: &Arm, block: u32, arm_dir: &Path) -> Result<Option<ArmCommand>, PlanError> {
        let Server::Spawn { argv, port } = &arm.server else {
            return Ok(None);
        };
        let idx = self.arms.iter().position(|a| a.name == arm.name).unwrap_or(0);
        let arm_dir = arm_dir.to_string_lossy();
        let mut vars = Vars {
            port: Some(*port),
            model: &self.request.model,
            arm: &arm.name,
            block,
            arm_dir: &arm_dir,
            receipts: None,
        };
        let key = |k: String| move |m: String| PlanError::invalid(k, m);
        let receipts = match &arm.receipts {
            Some(r) => Some(expand(r, &vars).map_err(key(format!("arms[{idx}].receipts")))?),
            None => None,
        };
        vars.receipts = receipts.as_deref();
        let argv = argv
            .iter()
            .enumerate()
            .map(|(i, a)| expand(a, &vars).map_err(key(format!("arms[{idx}].argv[{i}]"))))
            .collect::<Result<Vec<_>, _>>()?;
        let env = arm
            .env
            .iter()
            .map(|(k, v)| {
                let value = expand(v, &vars).map_err(key(format!("arms[{idx}].env.{k}")))?;
                Ok((k.clone(), value))
            })
            .collect::<Result<BTreeMap<_, _>, PlanError>>()?;
        let mut env = env;
        if self.blocks.randomize_setup {
            let len = crate::plan::seed::setup_pad_len(self.study.seed, block, &arm.name);
            env.insert(super::types::SETUP_PAD_ENV.to_string(), "x".repeat(len));
        }
        let cpus =
            arm.cpus.clone().or_else(|| self.client.cpus.is_some().then(|| (0..=crate::host::MAX_CPU).collect()));
        Ok(Some(ArmCommand { argv, env, port: *port, receipts: receipts.map(PathBuf::from), cpus }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_only_identifier_placeholders() {
        let t = r#"--cc={"mode": "FULL"} --port {port} {arm_dir}/x {Bad} {}"#;
        assert_eq!(placeholders_in(t), vec!["port", "arm_dir"]);
    }

    #[test]
    fn expands_and_keeps_literal_braces() {
        let vars = Vars {
            port: Some(8001),
            model: "m",
            arm: "a",
            block: 3,
            arm_dir: "/r/raw/b3/a",
            receipts: Some("/r/raw/b3/a/receipts.jsonl"),
        };
        let got = expand(r#"{"x":{host}:{port}} {receipts} b{block}"#, &vars).unwrap();
        assert_eq!(got, r#"{"x":127.0.0.1:8001} /r/raw/b3/a/receipts.jsonl b3"#);
    }

    #[test]
    fn rejects_unknown_and_misplaced() {
        assert!(check("{prot}", true).unwrap_err().contains("unknown placeholder {prot}"));
        assert!(check("{receipts}", false).unwrap_err().contains("receipts"));
        assert!(check("{arm_dir}/r.jsonl", false).is_ok());
    }
}
