//! Validation of `[qualification]` (the quality gates, `harness qualify`). Owns the
//! defaults and ranges of every gate key and which arms a serial reference may name.
//! Must not touch files: whether the GSM file or the tokenizer exists is checked
//! when the gates run.

use super::placeholders;
use super::schema::{GsmFile, NllFile, ParityFile, QualificationFile, RetrievalFile};
use super::types::{
    Arm, ArmRole, GsmDataset, GsmGateSpec, NllGateSpec, PanelSource, PanelSpec, ParityGateSpec, Qualification,
    RetrievalGateSpec,
};
use super::validate::Checker;

/// lm-eval's gsm8k prompt (`doc_to_text`).
pub const DEFAULT_GSM_TEMPLATE: &str = "Question: {question}\nAnswer:";
/// lm-eval's gsm8k `until` strings.
pub const DEFAULT_GSM_STOP: [&str; 3] = ["Question:", "</s>", "<|im_end|>"];

fn count(c: &mut Checker, key: &str, v: Option<i64>, default: u32, min: i64, max: i64) -> u32 {
    match v {
        Some(v) => c.int(key, v, min, max).unwrap_or(u64::from(default)) as u32,
        None => default,
    }
}

fn rate(c: &mut Checker, key: &str, v: Option<f64>, default: f64) -> f64 {
    let v = v.unwrap_or(default);
    if !(v.is_finite() && v > 0.0 && v < 1.0) {
        c.err(key, format!("must be in (0, 1), got {v}"));
    }
    v
}

pub(super) fn qualification(
    c: &mut Checker,
    q: Option<QualificationFile>,
    arms: &[Arm],
    panel: &PanelSpec,
    study_seed: u64,
) -> Option<Qualification> {
    let q = q?;
    let k = "qualification";
    let confidence = rate(c, &format!("{k}.confidence"), q.confidence, 0.95);
    let concurrency = count(c, &format!("{k}.concurrency"), q.concurrency, 8, 1, 256);
    let request_timeout_s = q.request_timeout_s.unwrap_or(600.0);
    c.seconds(&format!("{k}.request_timeout_s"), request_timeout_s, false);
    let seed = match q.seed {
        Some(s) => c.int(&format!("{k}.seed"), s, 0, i64::MAX).unwrap_or(0),
        None => study_seed,
    };
    let (panel_texts, panel_tok) = match &panel.source {
        PanelSource::Text { dir, pattern, tokenizer } => {
            (Some((dir.clone(), pattern.clone())), Some(tokenizer.clone()))
        }
        _ => (None, None),
    };
    let tokenizer = q.tokenizer.or(panel_tok).or_else(|| arms.iter().find_map(|a| a.tokenizer.clone()));
    let tokenizer = tokenizer.unwrap_or_else(|| {
        c.err(format!("{k}.tokenizer"), "required: a tokenizer.json (or a text panel's or an arm's tokenizer)");
        String::new()
    });
    let (texts, pattern) = match (q.texts, panel_texts) {
        (Some(t), _) => (t, q.pattern.unwrap_or_else(|| "*.txt".into())),
        (None, Some((d, p))) => (d, q.pattern.unwrap_or(p)),
        (None, None) => ("assets/texts".into(), q.pattern.unwrap_or_else(|| "*_gut.txt".into())),
    };
    if pattern.matches('*').count() > 1 || pattern.contains('/') {
        c.err(format!("{k}.pattern"), "a file name with at most one `*`");
    }
    let gsm = q.gsm.map(|g| gsm(c, g));
    let nll = q.nll.map(|n| nll(c, n));
    let retrieval = q.retrieval.map(|r| retrieval(c, r));
    let parity = q.parity.map(|p| parity(c, p, arms));
    let paired = gsm.is_some() || nll.is_some() || retrieval.is_some();
    let has = |role| arms.iter().any(|a| a.role == role);
    if paired && !(has(ArmRole::Candidate) && has(ArmRole::Control)) {
        c.err(k, "the GSM, NLL and retrieval gates pair candidates with controls: the plan needs one of each");
    }
    if gsm.is_none() && nll.is_none() && retrieval.is_none() && parity.is_none() {
        c.err(k, "no gate: add at least one of [qualification.gsm], .nll, .retrieval or .parity");
    }
    Some(Qualification {
        required: q.required.unwrap_or(false),
        confidence,
        concurrency,
        request_timeout_s,
        seed,
        tokenizer,
        texts,
        pattern,
        gsm,
        nll,
        retrieval,
        parity,
    })
}

fn gsm(c: &mut Checker, g: GsmFile) -> GsmGateSpec {
    let k = "qualification.gsm";
    let dataset = match g.dataset.as_str() {
        "gsm8k" => GsmDataset::Gsm8k,
        "gsm-style" => GsmDataset::GsmStyle,
        other => {
            c.err(format!("{k}.dataset"), format!("unknown dataset {other:?} (use \"gsm8k\" or \"gsm-style\")"));
            GsmDataset::GsmStyle
        }
    };
    if g.path.trim().is_empty() {
        c.err(format!("{k}.path"), "must name a JSONL file");
    }
    let subset = g.subset.and_then(|s| c.int(&format!("{k}.subset"), s, 1, 1 << 24)).map(|s| s as u32);
    let template = g.template.unwrap_or_else(|| DEFAULT_GSM_TEMPLATE.into());
    if template.matches("{question}").count() != 1 {
        c.err(format!("{k}.template"), "must contain {question} exactly once");
    }
    let fewshot = count(c, &format!("{k}.fewshot"), g.fewshot, 0, 0, 64);
    if fewshot > 0 && g.fewshot_path.is_none() {
        c.err(format!("{k}.fewshot_path"), "required when fewshot > 0 (worked examples, GSM8K JSONL format)");
    }
    let stop = g.stop.unwrap_or_else(|| DEFAULT_GSM_STOP.iter().map(|s| s.to_string()).collect());
    if stop.iter().any(String::is_empty) {
        c.err(format!("{k}.stop"), "stop strings must not be empty");
    }
    GsmGateSpec {
        path: g.path,
        dataset,
        subset,
        template,
        fewshot,
        fewshot_path: g.fewshot_path,
        max_tokens: count(c, &format!("{k}.max_tokens"), g.max_tokens, 256, 1, 1 << 20),
        stop,
        max_loss_rate: rate(c, &format!("{k}.max_loss_rate"), g.max_loss_rate, 0.02),
    }
}

fn nll(c: &mut Checker, n: NllFile) -> NllGateSpec {
    let k = "qualification.nll";
    let max_upper = n.max_upper.unwrap_or(1.01f64.ln());
    c.positive(&format!("{k}.max_upper"), max_upper, false);
    NllGateSpec {
        documents: count(c, &format!("{k}.documents"), n.documents, 16, 2, 1 << 16),
        tokens: count(c, &format!("{k}.tokens"), n.tokens, 256, 2, 1 << 24),
        max_upper,
    }
}

fn retrieval(c: &mut Checker, r: RetrievalFile) -> RetrievalGateSpec {
    let k = "qualification.retrieval";
    RetrievalGateSpec {
        prompts: count(c, &format!("{k}.prompts"), r.prompts, 100, 1, 1 << 16),
        context_tokens: c.int(&format!("{k}.context_tokens"), r.context_tokens, 64, 1 << 24).unwrap_or(64) as u32,
        max_tokens: count(c, &format!("{k}.max_tokens"), r.max_tokens, 8, 1, 1024),
        max_loss_rate: rate(c, &format!("{k}.max_loss_rate"), r.max_loss_rate, 0.02),
    }
}

fn parity(c: &mut Checker, p: ParityFile, arms: &[Arm]) -> ParityGateSpec {
    let k = "qualification.parity";
    for (arm, argv) in &p.reference {
        if !arms.iter().any(|a| &a.name == arm) {
            c.err(format!("{k}.reference.{arm}"), format!("no arm is named {arm:?}"));
        }
        if argv.is_empty() || argv[0].trim().is_empty() {
            c.err(format!("{k}.reference.{arm}"), "must be a non-empty argv whose first item names the program");
        }
        for (j, item) in argv.iter().enumerate() {
            if let Err(m) = placeholders::check(item, false) {
                c.err(format!("{k}.reference.{arm}[{j}]"), m);
            }
        }
    }
    if p.reference.is_empty() {
        c.err(format!("{k}.reference"), "name at least one arm's serial reference command");
    }
    ParityGateSpec {
        prompts: count(c, &format!("{k}.prompts"), p.prompts, 32, 1, 4096),
        input_tokens: count(c, &format!("{k}.input_tokens"), p.input_tokens, 64, 1, 1 << 20),
        output_tokens: count(c, &format!("{k}.output_tokens"), p.output_tokens, 32, 1, 1 << 16),
        concurrency: count(c, &format!("{k}.concurrency"), p.concurrency, 8, 1, 256),
        reference: p.reference,
    }
}
