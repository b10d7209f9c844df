//! The NLL gate's document panel and per-arm scoring: `documents` cuts of exactly
//! `tokens` token IDs from the natural texts (use `nll`), each sent once with
//! `prompt_logprobs: 0` and `max_tokens: 1`; the document's mean token NLL is minus
//! the mean log-probability of positions 1..L (position 0 has none). Reads vLLM's
//! format `[null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]`. Must not
//! pair arms.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::common::{Texts, Tok};
use super::driver::{ArmCtx, GateRun};
use super::{QualityError, client};
use crate::plan::NllGateSpec;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NllDoc {
    pub index: u64,
    pub source: String,
    pub offset: u64,
    pub tokens: Vec<u32>,
}

pub fn documents(spec: &NllGateSpec, seed: u64, tok: &Tok, texts: &mut Texts) -> Result<Vec<NllDoc>, QualityError> {
    (0..u64::from(spec.documents))
        .map(|i| {
            let (source, offset, tokens) = texts.cut(tok, seed, "nll", i, spec.tokens as usize)?;
            Ok(NllDoc { index: i, source, offset, tokens })
        })
        .collect()
}

/// Per-position log-probabilities of `tokens[1..]` from a `prompt_logprobs` array.
pub fn token_logprobs(prompt_logprobs: &Value, tokens: &[u32]) -> Result<Vec<f64>, String> {
    let arr = prompt_logprobs.as_array().ok_or("prompt_logprobs is not an array")?;
    if arr.len() != tokens.len() {
        return Err(format!("prompt_logprobs has {} entries for {} prompt tokens", arr.len(), tokens.len()));
    }
    let mut out = Vec::with_capacity(tokens.len().saturating_sub(1));
    for (pos, (entry, id)) in arr.iter().zip(tokens).enumerate().skip(1) {
        let lp = entry
            .get(id.to_string())
            .and_then(|e| e.get("logprob"))
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("position {pos}: no logprob for the prompt token {id}"))?;
        if !lp.is_finite() {
            return Err(format!("position {pos}: logprob {lp} is not finite"));
        }
        out.push(lp);
    }
    Ok(out)
}

pub async fn run(ctx: &ArmCtx<'_>, docs: &[NllDoc]) -> GateRun {
    let bodies: Vec<Value> =
        docs.iter().map(|d| client::body(ctx.model, &d.tokens, 1, json!({ "prompt_logprobs": 0 }))).collect();
    let answers = ctx.complete_all("nll", &bodies).await;
    let mut run = GateRun::new("nll");
    let mut means = Vec::new();
    for (d, a) in docs.iter().zip(answers) {
        let mut a = a;
        let parsed = match (&a.error, &a.prompt_logprobs) {
            (Some(_), _) => Err(String::new()),
            (None, Some(p)) => token_logprobs(p, &d.tokens),
            (None, None) => Err("the answer has no prompt_logprobs".to_string()),
        };
        match parsed {
            Ok(lps) => {
                let mean_nll = -lps.iter().sum::<f64>() / lps.len().max(1) as f64;
                means.push(mean_nll);
                run.push_value(
                    &a,
                    mean_nll,
                    json!({"source": d.source, "offset": d.offset, "mean_nll": mean_nll, "logprobs": lps}),
                );
            }
            Err(e) => {
                if a.error.is_none() {
                    a.error = Some(e);
                }
                run.push_value(&a, f64::NAN, json!({"source": d.source, "offset": d.offset, "mean_nll": null}));
            }
        }
    }
    let mean = if means.is_empty() { f64::NAN } else { means.iter().sum::<f64>() / means.len() as f64 };
    run.summary = json!({
        "documents": docs.len(), "tokens": docs.first().map(|d| d.tokens.len()), "scored_per_document":
            docs.first().map(|d| d.tokens.len().saturating_sub(1)),
        "mean_of_document_mean_nll": if mean.is_finite() { json!(mean) } else { Value::Null },
        "failed": run.failed,
    });
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_prompt_logprobs() {
        let v = json!([null, {"7": {"logprob": -1.5, "rank": 2, "decoded_token": "a"}, "3": {"logprob": -0.2, "rank": 1}},
            {"9": {"logprob": -0.5, "rank": 1, "decoded_token": "b"}}]);
        assert_eq!(token_logprobs(&v, &[1, 7, 9]).unwrap(), vec![-1.5, -0.5]);
        assert!(token_logprobs(&v, &[1, 3, 8]).unwrap_err().contains("position 2"));
        assert!(token_logprobs(&v, &[1, 7]).is_err());
    }
}
