//! The retrieval (passkey) gate's prompts and per-arm scoring. Prompt i of N holds a
//! random 5-digit passkey (use `passkey`), stated once inside natural filler text
//! (a seeded cut, use `filler`) at token depth round(i * F / (N - 1)) of the F filler
//! tokens (0% to 100%), then a question; the whole prompt has exactly the plan's
//! `context_tokens` tokens. Greedy natural completion; right when the first run of
//! ASCII digits in the completion equals the passkey. Must not pair arms.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::common::{Texts, Tok, below, item_rng};
use super::driver::{ArmCtx, GateRun};
use super::{QualityError, client};
use crate::plan::RetrievalGateSpec;

const INTRO: &str = "There is an important piece of information hidden inside a lot of irrelevant text. \
                     Find it and memorize it. I will quiz you about it.\n\n";
const QUESTION: &str = "\n\nWhat is the pass key? The pass key is";

fn needle(key: u32) -> String {
    format!("\n\nThe pass key is {key}. Remember it. {key} is the pass key.\n\n")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PasskeyItem {
    pub index: u64,
    pub passkey: String,
    /// Filler tokens before the passkey sentence / all filler tokens.
    pub depth: f64,
    pub source: String,
    pub prompt: Vec<u32>,
}

pub fn items(
    spec: &RetrievalGateSpec,
    seed: u64,
    tok: &Tok,
    texts: &mut Texts,
) -> Result<Vec<PasskeyItem>, QualityError> {
    let intro = tok.encode(INTRO, true)?;
    let question = tok.encode(QUESTION, false)?;
    let n = u64::from(spec.prompts);
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let key = 10_000 + below(&mut item_rng(seed, "passkey", i), 90_000) as u32;
        let needle = tok.encode(&needle(key), false)?;
        let fixed = intro.len() + needle.len() + question.len();
        let total = spec.context_tokens as usize;
        if fixed + 1 > total {
            return Err(QualityError::Input {
                path: tok.path.clone(),
                message: format!("retrieval context_tokens {total} leaves no room for filler ({fixed} fixed tokens)"),
            });
        }
        let f = total - fixed;
        let (source, _, filler) = texts.cut(tok, seed, "filler", i, f)?;
        let at = if n > 1 { ((i as f64 * f as f64) / (n - 1) as f64).round() as usize } else { 0 }.min(f);
        let mut prompt = intro.clone();
        prompt.extend_from_slice(&filler[..at]);
        prompt.extend_from_slice(&needle);
        prompt.extend_from_slice(&filler[at..]);
        prompt.extend_from_slice(&question);
        debug_assert_eq!(prompt.len(), total);
        out.push(PasskeyItem { index: i, passkey: key.to_string(), depth: at as f64 / f as f64, source, prompt });
    }
    Ok(out)
}

/// The first maximal run of ASCII digits.
pub fn first_digits(text: &str) -> Option<&str> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let rest = &text[start..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    Some(&rest[..end])
}

pub async fn run(ctx: &ArmCtx<'_>, spec: &RetrievalGateSpec, items: &[PasskeyItem]) -> GateRun {
    let bodies: Vec<Value> =
        items.iter().map(|it| client::body(ctx.model, &it.prompt, spec.max_tokens, json!({}))).collect();
    let answers = ctx.complete_all("retrieval", &bodies).await;
    let mut run = GateRun::new("retrieval");
    let mut correct = 0u64;
    for (it, a) in items.iter().zip(&answers) {
        let got = first_digits(&a.text);
        let ok = a.error.is_none() && got == Some(it.passkey.as_str());
        correct += u64::from(ok);
        run.push(a, ok, json!({"passkey": it.passkey, "depth": it.depth, "answer_digits": got, "correct": ok}));
    }
    let n = items.len() as u64;
    run.summary = json!({
        "n": n, "correct": correct, "context_tokens": spec.context_tokens, "max_tokens": spec.max_tokens,
        "failed": run.failed,
        "rule": "right when the first run of ASCII digits in the completion equals the 5-digit passkey",
    });
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits() {
        assert_eq!(first_digits(" 12345. Remember"), Some("12345"));
        assert_eq!(first_digits(" 123456"), Some("123456"));
        assert_eq!(first_digits(" twelve"), None);
        assert_eq!(first_digits("x 1 2345"), Some("1"));
    }
}
