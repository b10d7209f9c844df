//! Validation of the vLLM dataset panels built draw for draw from NumPy's legacy
//! and Python's generators (`prompts.source` = `vllm_burstgpt`,
//! `vllm_prefix_repetition`): each takes only its own keys, with vLLM's defaults
//! (`vllm_random` is `validate_panel`'s). Must not touch files: whether the CSV
//! exists and parses is checked when the panel is built (`trace::sources`).

use super::schema::PromptsFile;
use super::types::{Arm, PanelSource, PanelSpec, VllmBurstGptSpec, VllmPrefixRepetitionSpec};
use super::validate::Checker;
use super::validate_arms::panel_tokenizer;
use super::validate_panel::MAX_DATASET_REQUESTS;

/// Longest prefix or suffix (as a distribution's longest length).
const MAX_LENGTH: i64 = 1 << 24;

/// The sources this module validates.
pub(super) fn is_vllm_legacy_source(source: &str) -> bool {
    matches!(source, "vllm_burstgpt" | "vllm_prefix_repetition")
}

/// Every `[prompts]` key but `source`, and whether it is given.
fn given(p: &PromptsFile) -> [(&'static str, bool); 28] {
    [
        ("lengths", p.lengths.is_some()),
        ("documents", p.documents.is_some()),
        ("texts", p.texts.is_some()),
        ("pattern", p.pattern.is_some()),
        ("tokenizer", p.tokenizer.is_some()),
        ("path", p.path.is_some()),
        ("min_token_id", p.min_token_id.is_some()),
        ("max_token_id", p.max_token_id.is_some()),
        ("num_requests", p.num_requests.is_some()),
        ("min_tokens", p.min_tokens.is_some()),
        ("max_prompt_tokens", p.max_prompt_tokens.is_some()),
        ("max_total_tokens", p.max_total_tokens.is_some()),
        ("shuffle", p.shuffle.is_some()),
        ("input_tokens", p.input_tokens.is_some()),
        ("output_tokens", p.output_tokens.is_some()),
        ("groups", p.groups.is_some()),
        ("prompts_per_group", p.prompts_per_group.is_some()),
        ("prefix_tokens", p.prefix_tokens.is_some()),
        ("suffix_tokens", p.suffix_tokens.is_some()),
        ("max_turns", p.max_turns.is_some()),
        ("input_len", p.input_len.is_some()),
        ("output_len", p.output_len.is_some()),
        ("prefix_len", p.prefix_len.is_some()),
        ("range_ratio", p.range_ratio.is_some()),
        ("output_range_ratio", p.output_range_ratio.is_some()),
        ("special_ids", p.special_ids.is_some()),
        ("suffix_len", p.suffix_len.is_some()),
        ("num_prefixes", p.num_prefixes.is_some()),
    ]
}

/// Only a vllm_prefix_repetition panel takes `suffix_len` and `num_prefixes`
/// (called by the other sources' validation).
pub(super) fn forbid_prefix_repetition_keys(c: &mut Checker, p: &PromptsFile) {
    let why = format!("only vllm_prefix_repetition panels take this key (prompts.source = {:?})", p.source);
    c.forbid("prompts.suffix_len", &p.suffix_len, &why);
    c.forbid("prompts.num_prefixes", &p.num_prefixes, &why);
}

/// `vllm_burstgpt` or `vllm_prefix_repetition`.
pub(super) fn panel(c: &mut Checker, p: PromptsFile, arms: &[Arm]) -> PanelSpec {
    let burst = p.source == "vllm_burstgpt";
    let own: &[&str] = if burst {
        &["tokenizer", "path", "num_requests"]
    } else {
        &["tokenizer", "num_requests", "prefix_len", "suffix_len", "num_prefixes", "output_len", "shuffle"]
    };
    for (key, is_given) in given(&p) {
        if is_given && !own.contains(&key) {
            c.err(format!("prompts.{key}"), format!("a {} panel takes only {} (and source)", p.source, own.join(", ")));
        }
    }
    let documents = match p.num_requests {
        Some(n) => c.int("prompts.num_requests", n, 1, MAX_DATASET_REQUESTS).unwrap_or(1) as u32,
        None => {
            c.err("prompts.num_requests", "required for a dataset panel: how many requests it holds");
            1
        }
    };
    let source = if burst {
        let path = p.path.unwrap_or_else(|| {
            c.err("prompts.path", "required for a vllm_burstgpt panel (the BurstGPT CSV)");
            String::new()
        });
        PanelSource::VllmBurstGpt(VllmBurstGptSpec { path, tokenizer: panel_tokenizer(c, p.tokenizer, arms) })
    } else {
        let len = |c: &mut Checker, key: &str, v: Option<i64>, min: i64, default: u32| match v {
            Some(v) => c.int(&format!("prompts.{key}"), v, min, MAX_LENGTH).map_or(default, |v| v as u32),
            None => default,
        };
        let prefix_len = len(c, "prefix_len", p.prefix_len, 0, 256);
        let suffix_len = len(c, "suffix_len", p.suffix_len, 0, 256);
        let output_len = len(c, "output_len", p.output_len, 1, 128);
        let num_prefixes = match p.num_prefixes {
            Some(v) => c.int("prompts.num_prefixes", v, 1, MAX_DATASET_REQUESTS).map_or(10, |v| v as u32),
            None => 10,
        };
        if documents % num_prefixes != 0 {
            c.err(
                "prompts.num_requests",
                format!(
                    "{documents} is not a multiple of prompts.num_prefixes {num_prefixes}: vLLM builds num_prefixes x \
                     floor(num_requests / num_prefixes) = {} prompts",
                    num_prefixes * (documents / num_prefixes)
                ),
            );
        }
        PanelSource::VllmPrefixRepetition(VllmPrefixRepetitionSpec {
            tokenizer: panel_tokenizer(c, p.tokenizer, arms),
            prefix_len,
            suffix_len,
            num_prefixes,
            output_len,
            shuffle: p.shuffle.unwrap_or(true),
        })
    };
    PanelSpec { source, lengths: Vec::new(), documents, max_turns: None, output_len: None }
}

#[cfg(test)]
mod tests {
    use super::super::validate_tests::BASE;
    use super::*;
    use crate::plan::parse;

    const FIXED_PANEL: &str = "source = \"random\"\nlengths = [64]\ndocuments = 4\nmax_token_id = 255";

    fn panel(text: &str) -> Result<PanelSpec, String> {
        parse(&BASE.replace(FIXED_PANEL, text)).map(|p| p.prompts).map_err(|e| e.to_string())
    }

    #[test]
    fn each_source_takes_its_own_keys_with_vllms_defaults() {
        let p =
            panel("source = \"vllm_burstgpt\"\npath = \"b.csv\"\ntokenizer = \"t.json\"\nnum_requests = 3").unwrap();
        let want = VllmBurstGptSpec { path: "b.csv".into(), tokenizer: "t.json".into() };
        assert_eq!((p.source, p.documents), (PanelSource::VllmBurstGpt(want), 3));
        let p = panel("source = \"vllm_prefix_repetition\"\ntokenizer = \"t.json\"\nnum_requests = 20").unwrap();
        let PanelSource::VllmPrefixRepetition(s) = p.source else { panic!("{:?}", p.source) };
        assert_eq!((s.prefix_len, s.suffix_len, s.num_prefixes, s.output_len, s.shuffle), (256, 256, 10, 128, true));
        let e =
            panel("source = \"vllm_burstgpt\"\ntokenizer = \"t.json\"\nnum_requests = 3\ninput_len = 4").unwrap_err();
        assert!(e.contains("prompts.input_len") && e.contains("prompts.path: required"), "{e}");
        let e = panel("source = \"vllm_prefix_repetition\"\ntokenizer = \"t.json\"\nnum_requests = 25").unwrap_err();
        assert!(e.contains("not a multiple") && e.contains("= 20 prompts"), "{e}");
        let e =
            panel("source = \"sharegpt\"\npath = \"d.json\"\ntokenizer = \"t.json\"\nnum_requests = 4\nsuffix_len = 3")
                .unwrap_err();
        assert!(e.contains("prompts.suffix_len: only vllm_prefix_repetition"), "{e}");
        let e = panel("source = \"random\"\nlengths = [64]\ndocuments = 4\nmax_token_id = 255\nnum_prefixes = 2")
            .unwrap_err();
        assert!(e.contains("prompts.num_prefixes"), "{e}");
    }
}
