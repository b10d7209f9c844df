//! The `[compare]` table of a plan: its schema (unknown keys rejected) and its
//! validation against the rest of the validated plan, every problem named by its key
//! (`compare.noise_rounds: must be at least 1, got 0`, `cells[2].load: ...`). The plan
//! layer keeps the table as written (`plan::schema`); this module owns what it means.
//! Must not do I/O: it reads the frozen plan's bytes handed to it.
//!
//! A compare plan is an ordinary plan (arms, request, prompts, warmup, timing, blocks,
//! closed-loop cells) plus `[compare]`; the cells are the concurrency ladder and the
//! blocks are the interleaved comparison rounds (see docs/compare.md).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ArmRole, Issue, Load, Plan, PlanError};
use crate::protocol::routes::ServerKind;

/// `[compare]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompareFile {
    reference: Option<String>,
    candidate: Option<String>,
    noise_arms: Option<String>,
    noise_rounds: Option<i64>,
    parity_prompts: Option<i64>,
    parity_input_tokens: Option<i64>,
    parity_output_tokens: Option<i64>,
    parity_prefix_tokens: Option<i64>,
    #[serde(default)]
    dialects: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Outer {
    compare: Option<toml::Table>,
}

pub use crate::evidence::{CompareSpec, NoiseArms};

fn int(issues: &mut Vec<Issue>, key: &str, v: i64, min: i64, max: i64) -> Option<u32> {
    if (min..=max).contains(&v) {
        Some(v as u32)
    } else {
        issues.push(Issue::new(format!("compare.{key}"), format!("must be in {min}..={max}, got {v}")));
        None
    }
}

/// The arm of `role` when the plan has exactly one.
fn only_arm(plan: &Plan, role: ArmRole) -> Option<String> {
    let mut it = plan.arms.iter().filter(|a| a.role == role);
    match (it.next(), it.next()) {
        (Some(a), None) => Some(a.name.clone()),
        _ => None,
    }
}

/// Reads and validates `[compare]` from the frozen plan text.
pub fn parse(text: &str, plan: &Plan) -> Result<CompareSpec, PlanError> {
    let outer: Outer = toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string().trim_end().to_string()))?;
    let table = outer.compare.ok_or_else(|| {
        PlanError::invalid("compare", "the plan has no [compare] table: `harness compare` needs one (docs/compare.md)")
    })?;
    let file: CompareFile = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| PlanError::invalid("compare", e.to_string().trim_end().to_string()))?;
    validate(file, plan)
}

fn validate(f: CompareFile, plan: &Plan) -> Result<CompareSpec, PlanError> {
    let mut issues = Vec::new();
    let mut arm = |key: &str, given: Option<String>, role: ArmRole| -> String {
        let name = given.or_else(|| only_arm(plan, role));
        match name {
            Some(n) if plan.arm(&n).is_some() => n,
            Some(n) => {
                let known: Vec<&str> = plan.arms.iter().map(|a| a.name.as_str()).collect();
                issues.push(Issue::new(format!("compare.{key}"), format!("no arm {n:?} (arms: {known:?})")));
                n
            }
            None => {
                let why = format!("required: the plan has not exactly one {} arm to default to", role.as_str());
                issues.push(Issue::new(format!("compare.{key}"), why));
                String::new()
            }
        }
    };
    let reference = arm("reference", f.reference, ArmRole::Control);
    let candidate = arm("candidate", f.candidate, ArmRole::Candidate);
    if !reference.is_empty() && reference == candidate {
        issues.push(Issue::new("compare.candidate", "must differ from compare.reference"));
    }
    let noise_arms = match f.noise_arms.as_deref() {
        None | Some("reference") => NoiseArms::Reference,
        Some("both") => NoiseArms::Both,
        Some(other) => {
            issues.push(Issue::new("compare.noise_arms", format!("{other:?}: use \"reference\" or \"both\"")));
            NoiseArms::Reference
        }
    };
    let noise_rounds = int(&mut issues, "noise_rounds", f.noise_rounds.unwrap_or(1), 1, 100).unwrap_or(1);
    let docs = plan.prompts.documents;
    let parity_prompts =
        int(&mut issues, "parity_prompts", f.parity_prompts.unwrap_or(i64::from(docs)), 1, docs.into()).unwrap_or(1);
    let first_len = plan.prompts.lengths.first().copied().unwrap_or(1);
    let parity_input_tokens =
        int(&mut issues, "parity_input_tokens", f.parity_input_tokens.unwrap_or(first_len.into()), 1, 1 << 24)
            .unwrap_or(first_len);
    if !plan.prompts.lengths.contains(&parity_input_tokens) {
        let msg = format!("{parity_input_tokens} is not one of prompts.lengths {:?}", plan.prompts.lengths);
        issues.push(Issue::new("compare.parity_input_tokens", msg));
    }
    let out = i64::from(plan.request.output_tokens);
    let parity_output_tokens =
        int(&mut issues, "parity_output_tokens", f.parity_output_tokens.unwrap_or(out), 1, 65_536).unwrap_or(1);
    let parity_prefix_tokens = f
        .parity_prefix_tokens
        .and_then(|n| int(&mut issues, "parity_prefix_tokens", n, 1, i64::from(parity_output_tokens)));
    let mut dialects = BTreeMap::new();
    for (name, kind) in f.dialects {
        let key = format!("compare.dialects.{name}");
        if plan.arm(&name).is_none() {
            issues.push(Issue::new(key.clone(), "not an arm of the plan"));
        }
        match kind.as_str() {
            "openai-vllm" => dialects.insert(name, ServerKind::OpenAiVllm),
            "llama-cpp" => dialects.insert(name, ServerKind::LlamaCpp),
            other => {
                issues.push(Issue::new(key, format!("{other:?}: use \"openai-vllm\" or \"llama-cpp\"")));
                None
            }
        };
    }
    // The rest of the plan, as `harness compare` needs it.
    for (i, a) in plan.arms.iter().enumerate() {
        let compared = a.name == reference || a.name == candidate;
        if compared && matches!(a.server, super::Server::External { .. }) {
            let msg = "harness compare starts a fresh server for every phase: a compared arm needs argv, not url";
            issues.push(Issue::new(format!("arms[{i}].url"), msg));
        }
    }
    if plan.request.temperature != 0.0 {
        issues.push(Issue::new("request.temperature", "harness compare needs greedy requests (0.0)"));
    }
    if !plan.request.ignore_eos {
        issues.push(Issue::new("request.ignore_eos", "harness compare needs forced-length requests (true)"));
    }
    for (i, c) in plan.cells.iter().enumerate() {
        if !matches!(c.load, Load::Closed { .. }) {
            issues.push(Issue::new(format!("cells[{i}].load"), "harness compare drives closed-loop cells only"));
        }
    }
    if !issues.is_empty() {
        return Err(PlanError::Invalid(issues));
    }
    Ok(CompareSpec {
        reference,
        candidate,
        noise_arms,
        noise_rounds,
        parity_prompts,
        parity_input_tokens,
        parity_output_tokens,
        parity_prefix_tokens,
        dialects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_text(compare: &str) -> String {
        let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/compare-synthetic.toml"))
            .expect("plans/compare-synthetic.toml");
        let cut = base.find("[compare]").expect("a [compare] table");
        format!("{}{compare}", &base[..cut])
    }

    fn check(compare: &str) -> Result<CompareSpec, PlanError> {
        let text = plan_text(compare);
        let plan = crate::plan::parse(&text)?;
        parse(&text, &plan)
    }

    #[test]
    fn defaults_come_from_roles_and_the_panel() {
        let s = check("[compare]\n").expect("valid");
        assert_eq!((s.reference.as_str(), s.candidate.as_str()), ("ref", "cand"));
        assert_eq!((s.noise_arms, s.noise_rounds, s.parity_prefix_tokens), (NoiseArms::Reference, 1, None));
        assert!(s.dialects.is_empty());
    }

    #[test]
    fn errors_name_the_key() {
        let e = check("[compare]\nnoise_rounds = 0\nparity_prefix_tokens = 100000\n").unwrap_err();
        let keys: Vec<&str> = e.issues().iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["compare.noise_rounds", "compare.parity_prefix_tokens"], "{e}");
        let e = check("[compare]\nreference = \"nope\"\n[compare.dialects]\ncand = \"tgi\"\n").unwrap_err();
        let keys: Vec<&str> = e.issues().iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["compare.reference", "compare.dialects.cand"], "{e}");
        let e = check("[compare]\nrounds = 3\n").unwrap_err().to_string();
        assert!(e.starts_with("compare: unknown field `rounds`"), "{e}");
        let e = check("[compare]\ncandidate = \"ref\"\n").unwrap_err().to_string();
        assert!(e.contains("compare.candidate: must differ"), "{e}");
    }

    #[test]
    fn a_plan_without_the_table_is_refused() {
        let text = plan_text("");
        let plan = crate::plan::parse(&text).unwrap();
        assert_eq!(parse(&text, &plan).unwrap_err().issues()[0].key, "compare");
    }
}
