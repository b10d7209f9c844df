//! Tests of the dataset sources on small hand-made files (good and bad), and of
//! dataset panels built from them through `build_panel`.

use std::path::Path;

use super::*;
use crate::plan::seed::rng;
use crate::plan::{self, LengthDist, Plan, ShareGptSpec, SyntheticSpec, SyntheticTokens};
use crate::trace::{Encoder, Panel, build_panel, cell_trace};

/// One token per whitespace-separated word: its byte length (enough to count and cut).
pub(super) struct Words;

impl Encoder for Words {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(text.split_whitespace().map(|w| w.len() as u32).collect())
    }
}

pub(super) fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

pub(super) fn words(n: usize) -> String {
    (0..n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

pub(super) fn spec(path: &str) -> ShareGptSpec {
    ShareGptSpec {
        path: path.into(),
        tokenizer: "tok.json".into(),
        min_tokens: 4,
        max_prompt_tokens: Some(1024),
        max_total_tokens: Some(2048),
        shuffle: true,
    }
}

/// A ShareGPT-format file: conversation i has a prompt of 4 + i words and an
/// answer of 10 + i words.
fn sharegpt_file(dir: &Path, n: usize) -> std::path::PathBuf {
    let convs: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"id": "c{i}", "conversations": [{{"from": "human", "value": "{}"}}, {{"from": "gpt", "value": "{}"}}]}}"#,
                words(4 + i),
                words(10 + i)
            )
        })
        .collect();
    write(dir, "sg.json", &format!("[{}]", convs.join(",\n")))
}

#[test]
fn sharegpt_takes_the_first_human_turn_and_the_first_answer_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "sg.json",
        r#"[{"conversations": [{"from": "system", "value": "s s s s s"}, {"from": "gpt", "value": "early early early early"},
             {"from": "human", "value": "a bb ccc dddd"}, {"from": "gpt", "value": "one two three four five"},
             {"from": "human", "value": "later later later later"}]},
            {"conversations": [{"role": "user", "content": "x yy zzz wwww v"}, {"role": "assistant", "content": "1 2 3 4 5 6"}]}]"#,
    );
    let mut got = sharegpt(&spec("sg.json"), &path, &Words, 1, 2, false).unwrap();
    got.sort_by(|a, b| a.source.cmp(&b.source));
    assert_eq!(got[0].tokens, [1, 2, 3, 4]);
    assert_eq!((got[0].output_tokens, got[0].source.as_str()), (Some(5), "sg.json#0"));
    assert_eq!(got[1].tokens, [1, 2, 3, 4, 1]);
    assert_eq!((got[1].output_tokens, got[1].source.as_str()), (Some(6), "sg.json#1"));
}

#[test]
fn sharegpt_applies_vllms_filters() {
    let tmp = tempfile::tempdir().unwrap();
    let conv = |p: usize, a: usize| {
        format!(
            r#"{{"conversations": [{{"from": "human", "value": "{}"}}, {{"from": "gpt", "value": "{}"}}]}}"#,
            words(p),
            words(a)
        )
    };
    // Kept: (4, 4) and (10, 10). Dropped: prompt 3, output 3, prompt 21 > 20, total 31 > 30.
    let text = format!("[{}]", [conv(4, 4), conv(3, 9), conv(9, 3), conv(21, 5), conv(16, 15), conv(10, 10)].join(","));
    let path = write(tmp.path(), "sg.json", &text);
    let s = ShareGptSpec { max_prompt_tokens: Some(20), max_total_tokens: Some(30), ..spec("sg.json") };
    let mut got: Vec<(usize, Option<u32>)> =
        sharegpt(&s, &path, &Words, 3, 2, false).unwrap().iter().map(|e| (e.tokens.len(), e.output_tokens)).collect();
    got.sort();
    assert_eq!(got, [(4, Some(4)), (10, Some(10))]);
    let err = sharegpt(&s, &path, &Words, 3, 3, false).unwrap_err().to_string();
    assert!(err.contains("3 requests asked (prompts.num_requests), only 2 available"), "{err}");
    assert!(err.contains("of 6 conversations: 0 without a human turn"), "{err}");
    assert!(err.contains("2 with a prompt or output under prompts.min_tokens = 4, 2 over"), "{err}");
}

#[test]
fn sharegpt_sampling_is_seeded_and_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let path = sharegpt_file(tmp.path(), 40);
    let order = |seed| -> Vec<String> {
        sharegpt(&spec("sg.json"), &path, &Words, seed, 10, false).unwrap().into_iter().map(|e| e.source).collect()
    };
    assert_eq!(order(7), order(7));
    assert_ne!(order(7), order(8));
    let all: std::collections::BTreeSet<String> = order(7).into_iter().collect();
    assert_eq!(all.len(), 10, "sampled without replacement");
    // A prefix does not depend on how many are asked.
    assert_eq!(
        order(7)[..5],
        sharegpt(&spec("sg.json"), &path, &Words, 7, 5, false)
            .unwrap()
            .into_iter()
            .map(|e| e.source)
            .collect::<Vec<_>>()[..]
    );
}

#[test]
fn bad_sharegpt_files_say_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = |text: &str, n: usize| {
        let path = write(tmp.path(), "bad.json", text);
        sharegpt(&spec("bad.json"), &path, &Words, 1, n, false).unwrap_err().to_string()
    };
    let e = bad("[{\"conversations\": [", 1);
    assert!(e.contains("not a ShareGPT-format JSON array") && e.contains("line 1"), "{e}");
    let e = bad(r#"[{"turns": []}]"#, 1);
    assert!(e.contains("missing field `conversations`"), "{e}");
    let e =
        bad(r#"[{"conversations": [{"from": "gpt", "value": "a b c d"}, {"from": "gpt", "value": "a b c d"}]}]"#, 1);
    assert!(
        e.contains("only 0 available") && e.contains("1 without a human turn followed by an assistant turn"),
        "{e}"
    );
    let e = bad("[]", 1);
    assert!(e.contains("only 0 available (of 0 conversations"), "{e}");
}

#[test]
fn requests_reads_prompts_tokens_and_output_lengths() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "r.jsonl",
        "{\"prompt\": \"a bb ccc\", \"output_tokens\": 7}\n\n{\"tokens\": [5, 6], \"id\": 3}\n{\"tokens\": [1]}\n",
    );
    let got = requests(&path, "r.jsonl", Some(&Words), 2, &LineRoutes::single(false, "cell \"c\"")).unwrap();
    let entry = |tokens: Vec<u32>, output_tokens, source: &str| Entry {
        tokens,
        output_tokens,
        source: source.into(),
        offset: 0,
        messages: None,
        next_turns: Vec::new(),
    };
    assert_eq!(got[0], entry(vec![1, 2, 3], Some(7), "r.jsonl:1"));
    assert_eq!(got[1], entry(vec![5, 6], None, "r.jsonl:3"));
    let err =
        requests(&path, "r.jsonl", Some(&Words), 4, &LineRoutes::single(false, "cell \"c\"")).unwrap_err().to_string();
    assert!(err.contains("4 requests asked (prompts.num_requests), only 3 available"), "{err}");
}

#[test]
fn bad_request_lines_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = |text: &str, enc: Option<&dyn Encoder>| {
        let path = write(tmp.path(), "r.jsonl", text);
        requests(&path, "r.jsonl", enc, 2, &LineRoutes::single(false, "cell \"c\"")).unwrap_err().to_string()
    };
    let e = bad("{\"tokens\": [1]}\n{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n", Some(&Words));
    assert!(e.contains("line 2") && e.contains("but cell \"c\" sends to /v1/completions"), "{e}");
    let e = bad("{\"tokens\": [1]}\n{\"tokens\": [1], \"prompt\": \"x\"}\n", Some(&Words));
    assert!(e.contains("line 2") && e.contains("not several"), "{e}");
    let e = bad("{\"prompt\": \"x\"}\n", None);
    assert!(e.contains("line 1") && e.contains("prompts.tokenizer"), "{e}");
    let e = bad("{\"tokens\": []}\n", Some(&Words));
    assert!(e.contains("line 1") && e.contains("no tokens"), "{e}");
    let e = bad("{\"tokens\": [1]\n", Some(&Words));
    assert!(e.contains("line 1"), "{e}");
    let e = bad("{\"id\": 1}\n", Some(&Words));
    assert!(e.contains("no \"prompt\", \"tokens\" or \"messages\""), "{e}");
}

#[test]
fn chat_requests_carry_messages_and_refuse_token_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "r.jsonl",
        "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"a bb\"}], \
         \"output_tokens\": 5}\n{\"prompt\": \"ccc dd\"}\n",
    );
    let got = requests(&path, "r.jsonl", Some(&Words), 2, &LineRoutes::single(true, "cell \"c\"")).unwrap();
    let m = |role: &str, content: &str| ChatMessage { role: role.into(), content: content.into() };
    assert_eq!(got[0].messages, Some(vec![m("system", "be brief"), m("user", "a bb")]));
    // The contents encoded one after the other: "be brief" then "a bb" (Words: word lengths).
    assert_eq!((got[0].tokens.clone(), got[0].output_tokens), (vec![2, 5, 1, 2], Some(5)));
    assert_eq!(got[1].messages, Some(vec![m("user", "ccc dd")]));
    let tokens = write(tmp.path(), "t.jsonl", "{\"tokens\": [1, 2]}\n");
    let e =
        requests(&tokens, "t.jsonl", Some(&Words), 1, &LineRoutes::single(true, "cell \"c\"")).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("cannot be sent to the chat endpoint"), "{e}");
    let empty = write(tmp.path(), "e.jsonl", "{\"messages\": []}\n");
    let e =
        requests(&empty, "e.jsonl", Some(&Words), 1, &LineRoutes::single(true, "cell \"c\"")).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("empty"), "{e}");
    let e = requests(&path, "r.jsonl", None, 1, &LineRoutes::single(true, "cell \"c\"")).unwrap_err().to_string();
    assert!(e.contains("prompts.tokenizer"), "{e}");
}

#[test]
fn sharegpt_for_chat_sends_the_first_human_turn_as_one_user_message() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "sg.json",
        r#"[{"conversations": [{"from": "human", "value": "aa bb cc dd"}, {"from": "gpt", "value": "w x y z"}]}]"#,
    );
    let got = sharegpt(&spec("sg.json"), &path, &Words, 1, 1, true).unwrap();
    let want = ChatMessage { role: "user".into(), content: "aa bb cc dd".into() };
    assert_eq!(got[0].messages, Some(vec![want]));
    assert_eq!(sharegpt(&spec("sg.json"), &path, &Words, 1, 1, false).unwrap()[0].messages, None);
}

fn synth_spec(input: LengthDist, output: LengthDist) -> SyntheticSpec {
    let tokens = SyntheticTokens::Text { texts: "t".into(), pattern: "*.txt".into(), tokenizer: "tok.json".into() };
    SyntheticSpec { tokens, input, output }
}

#[test]
fn synthetic_random_ids_share_one_prefix_and_draw_their_own_lengths() {
    let tokens = SyntheticTokens::Random { min_token_id: 10, max_token_id: 19, prefix: 4 };
    let s = SyntheticSpec { tokens, input: LengthDist::Uniform { min: 3, max: 6 }, output: LengthDist::Fixed(7) };
    let got = synthetic_random(&s, 9, 200);
    assert_eq!(got, synthetic_random(&s, 9, 200), "deterministic");
    assert_ne!(got, synthetic_random(&s, 10, 200), "seeded");
    let prefix = &got[0].tokens[..4];
    for e in &got {
        assert!((4 + 3..=4 + 6).contains(&e.tokens.len()), "{}", e.tokens.len());
        assert_eq!(&e.tokens[..4], prefix, "one prefix for every entry");
        assert!(e.tokens.iter().all(|t| (10..=19).contains(t)));
        assert_eq!((e.output_tokens, e.source.as_str()), (Some(7), "random"));
    }
    assert!((3..=6).all(|l| got.iter().any(|e| e.tokens.len() == 4 + l)), "every length drawn");
    // The lengths are the text panel's draws (the same seeds), so one plan's
    // random and text variants send prompts of the same lengths.
    let no_prefix =
        SyntheticSpec { tokens: SyntheticTokens::Random { min_token_id: 0, max_token_id: 9, prefix: 0 }, ..s };
    assert!(synthetic_random(&no_prefix, 9, 200).iter().zip(&got).all(|(a, b)| a.tokens.len() + 4 == b.tokens.len()));
    let text = synth_spec(LengthDist::Fixed(1), LengthDist::Fixed(1));
    assert!(synthetic_random(&text, 9, 3).is_empty());
}

#[test]
fn synthetic_cuts_real_text_at_drawn_lengths() {
    let tmp = tempfile::tempdir().unwrap();
    let text: String = (0..200).map(|i| "x".repeat(1 + i % 9)).collect::<Vec<_>>().join(" ");
    write(tmp.path(), "a.txt", &text);
    write(tmp.path(), "short.txt", "a bb ccc");
    let doc = Words.encode(&text).unwrap();
    let s = synth_spec(LengthDist::Uniform { min: 5, max: 50 }, LengthDist::Fixed(12));
    let got = synthetic(&s, tmp.path(), &Words, 9, 30, false).unwrap();
    assert_eq!(got, synthetic(&s, tmp.path(), &Words, 9, 30, false).unwrap(), "deterministic");
    assert_ne!(got, synthetic(&s, tmp.path(), &Words, 10, 30, false).unwrap(), "seeded");
    for e in &got {
        assert!((5..=50).contains(&e.tokens.len()), "{}", e.tokens.len());
        assert_eq!(e.output_tokens, Some(12));
        assert_eq!(e.source, "a.txt", "only a.txt has at least 5 tokens");
        let o = e.offset as usize;
        assert_eq!(e.tokens[..], doc[o..o + e.tokens.len()], "a real cut");
    }
    let too_long = synth_spec(LengthDist::Fixed(201), LengthDist::Fixed(1));
    let err = synthetic(&too_long, tmp.path(), &Words, 9, 1, false).unwrap_err().to_string();
    assert!(err.contains("drew 201 tokens, but the longest text file has 200"), "{err}");
}

/// One token per decimal word, its value; token 0 decodes to nothing (as a
/// partial UTF-8 byte can), so a cut holding it re-encodes short.
struct Numbers;

impl Encoder for Numbers {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        text.split_whitespace().map(|w| w.parse::<u32>().map_err(|e| e.to_string())).collect()
    }

    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        Ok(ids.iter().filter(|&&i| i != 0).map(u32::to_string).collect::<Vec<_>>().join(" "))
    }
}

#[test]
fn synthetic_on_chat_sends_each_cut_as_text_of_its_length() {
    let tmp = tempfile::tempdir().unwrap();
    let text: String = (0..60).map(|i| (i % 7).to_string()).collect::<Vec<_>>().join(" ");
    write(tmp.path(), "a.txt", &text);
    let s = synth_spec(LengthDist::Uniform { min: 5, max: 20 }, LengthDist::Fixed(3));
    let ids = synthetic(&s, tmp.path(), &Numbers, 9, 20, false).unwrap();
    let chat = synthetic(&s, tmp.path(), &Numbers, 9, 20, true).unwrap();
    for (c, i) in chat.iter().zip(&ids) {
        // The same draws on both routes; the text re-encodes to the drawn length,
        // the vanished 0s topped up with the document's next tokens.
        assert_eq!(
            (c.offset, &c.source, c.output_tokens, c.tokens.len()),
            (i.offset, &i.source, i.output_tokens, i.tokens.len())
        );
        let [m] = c.messages.as_deref().unwrap() else { panic!("one message") };
        assert_eq!(m.role, "user");
        assert_eq!(Numbers.encode(&m.content).unwrap(), c.tokens, "the tokens are the text's");
        assert!(!c.tokens.contains(&0));
        assert!(i.messages.is_none());
    }
    assert!(ids.iter().any(|e| e.tokens.contains(&0)), "some cut needed topping up");
}

#[test]
fn a_synthetic_text_panel_on_chat_carries_each_entrys_message() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("t")).unwrap();
    write(&tmp.path().join("t"), "a.txt", &(1..80).map(|i| i.to_string()).collect::<Vec<_>>().join(" "));
    let synthetic = "source = \"synthetic\"\ntexts = \"t\"\ntokenizer = \"tok.json\"\nnum_requests = 3\n\
                     input_tokens = { dist = \"fixed\", value = 6 }\noutput_tokens = { dist = \"fixed\", value = 4 }";
    let plan = plan::parse(&plan_text("endpoint = \"chat\"\noutput_tokens = 4", synthetic)).unwrap();
    let panel = build_panel(&plan, tmp.path(), Some(&Numbers)).unwrap();
    panel.check(&plan).unwrap();
    for p in &panel.prompts {
        let [m] = p.messages.as_deref().unwrap() else { panic!("one message") };
        assert_eq!((m.role.as_str(), Numbers.encode(&m.content).unwrap()), ("user", p.tokens.clone()));
    }
    let ids = plan::parse(&plan_text("output_tokens = 4", synthetic)).unwrap();
    assert!(build_panel(&ids, tmp.path(), Some(&Numbers)).unwrap().prompts.iter().all(|p| p.messages.is_none()));
}

#[test]
fn length_draws_follow_their_distribution_and_stay_clipped() {
    let mut r = rng([3; 32]);
    let draws = |d: LengthDist, r: &mut crate::plan::seed::TraceRng| {
        (0..20_000).map(|_| draw_length(&d, r)).collect::<Vec<u32>>()
    };
    let u = draws(LengthDist::Uniform { min: 3, max: 7 }, &mut r);
    assert!(u.iter().all(|v| (3..=7).contains(v)));
    assert!((3..=7).all(|v| u.iter().filter(|&&x| x == v).count() > 3500));
    let n = draws(LengthDist::Normal { mean: 100.0, sd: 10.0, min: 1, max: 1000 }, &mut r);
    let mean = n.iter().map(|&v| f64::from(v)).sum::<f64>() / n.len() as f64;
    // Rounding keeps the mean; 5 standard errors of 20,000 draws of sd 10.
    assert!((mean - 100.0).abs() < 5.0 * 10.0 / (n.len() as f64).sqrt(), "{mean}");
    let c = draws(LengthDist::Normal { mean: 100.0, sd: 50.0, min: 90, max: 110 }, &mut r);
    assert!(c.iter().all(|v| (90..=110).contains(v)) && c.contains(&90) && c.contains(&110));
    let l = draws(LengthDist::LogNormal { mu: 4.0, sigma: 0.5, min: 1, max: 100_000 }, &mut r);
    let mut sorted = l.clone();
    sorted.sort_unstable();
    // The median of a lognormal is e^mu = 54.6.
    assert!((50..=60).contains(&sorted[sorted.len() / 2]), "{}", sorted[sorted.len() / 2]);
    assert_eq!(draws(LengthDist::Fixed(9), &mut r)[..3], [9, 9, 9]);
}

/// A dataset plan: sharegpt at `path`, with the `[request]` lines given.
pub(super) fn plan_text(request: &str, prompts: &str) -> String {
    format!(
        "[study]\nname = \"d\"\nseed = 5\n\n[request]\nmodel = \"m\"\n{request}\n\n[prompts]\n{prompts}\n\n\
         [warmup]\nprompts = 2\n\n[timing]\nsettle_s = 0\nrequest_timeout_s = 5\ndrain_timeout_s = 5\n\n\
         [blocks]\ncount = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
         [[arms]]\nname = \"a\"\nrole = \"candidate\"\nargv = [\"srv\", \"{{port}}\"]\nport = 9000\n\n\
         [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 2\ncount = 7\n"
    )
}

const SHAREGPT: &str = "source = \"sharegpt\"\npath = \"sg.json\"\ntokenizer = \"tok.json\"\nnum_requests = 3";

fn dataset_panel(tmp: &Path, request: &str) -> (Plan, Panel) {
    sharegpt_file(tmp, 6);
    let plan = plan::parse(&plan_text(request, SHAREGPT)).unwrap();
    let panel = build_panel(&plan, tmp, Some(&Words)).unwrap();
    (plan, panel)
}

#[test]
fn a_sharegpt_panel_fixes_each_requests_max_tokens_and_eos_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let (plan, panel) = dataset_panel(tmp.path(), "output = \"natural\"\nmax_output_tokens = 12");
    assert_eq!(panel.prompts.len(), 3);
    for (i, p) in panel.prompts.iter().enumerate() {
        assert_eq!((p.index, p.doc as usize, p.length as usize), (i as u64, i, p.tokens.len()));
        let own = p.output_tokens.unwrap();
        assert_eq!(own as usize, p.length as usize + 6, "the answer is 6 words longer than its prompt");
        assert_eq!((p.max_tokens, p.ignore_eos), (Some(own.min(12)), Some(false)));
    }
    panel.check(&plan).unwrap();
    let text = panel.to_jsonl();
    assert!(text.lines().next().unwrap().contains("\"output_tokens\":"), "{text}");
    assert_eq!(Panel::from_jsonl(&text).unwrap(), panel);
    // Forced: min_tokens = max_tokens = the entry's own length (no cap).
    let (forced_plan, forced) = dataset_panel(tmp.path(), "output = \"forced\"\nmax_output_tokens = 4096");
    for p in &forced.prompts {
        assert_eq!((p.max_tokens, p.ignore_eos), (p.output_tokens, Some(true)));
    }
    // The panel records what the plan decides: another plan's panel does not check.
    assert!(forced.check(&plan).is_err());
    assert!(panel.check(&forced_plan).unwrap_err().to_string().contains("prompt 0 sends max_tokens"));
}

#[test]
fn cells_send_a_dataset_panel_round_robin() {
    let tmp = tempfile::tempdir().unwrap();
    let (plan, _) = dataset_panel(tmp.path(), "output = \"natural\"\nmax_output_tokens = 12");
    let cell = plan.resolved_cells().unwrap().remove(0);
    let prompts: Vec<u64> = cell_trace(&plan, &cell).unwrap().entries.iter().map(|e| e.prompt).collect();
    assert_eq!(prompts, [0, 1, 2, 0, 1, 2, 0]);
    assert_eq!(plan.warmup_prompts(), [0, 1]);
}

#[test]
fn a_requests_panel_falls_back_to_the_plans_output_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "r.jsonl", "{\"tokens\": [1, 2], \"output_tokens\": 50}\n{\"tokens\": [3]}\n");
    let prompts = "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 2";
    let plan = plan::parse(&plan_text("output_tokens = 6\nmax_output_tokens = 20", prompts)).unwrap();
    let panel = build_panel(&plan, tmp.path(), None).unwrap();
    let got: Vec<(Option<u32>, Option<u32>)> = panel.prompts.iter().map(|p| (p.output_tokens, p.max_tokens)).collect();
    assert_eq!(got, [(Some(50), Some(20)), (None, Some(6))]);
    assert_eq!(panel.prompts[1].ignore_eos, Some(true), "forced unless the plan says natural");
}

fn shared_spec(groups: u32, per: u32, prefix: u32, suffix: u32) -> crate::plan::SharedPrefixSpec {
    crate::plan::SharedPrefixSpec {
        texts: "t".into(),
        pattern: "*.txt".into(),
        tokenizer: "tok.json".into(),
        groups,
        prompts_per_group: per,
        prefix_tokens: prefix,
        suffix_tokens: suffix,
    }
}

/// Text files of distinct words (w<file>_<i>), so every cut is recognisable.
fn shared_texts(dir: &Path) {
    for (f, n) in [(0, 300), (1, 40), (2, 500)] {
        let text: Vec<String> = (0..n).map(|i| format!("w{f}_{i}")).collect();
        write(dir, &format!("f{f}.txt"), &text.join(" "));
    }
}

/// One token per word: a number that names the word (file * 1000 + index).
struct WordIds;

impl Encoder for WordIds {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        text.split_whitespace()
            .map(|w| {
                let (f, i) = w.trim_start_matches('w').split_once('_').ok_or("not a test word")?;
                Ok(f.parse::<u32>().map_err(|e| e.to_string())? * 1000 + i.parse::<u32>().map_err(|e| e.to_string())?)
            })
            .collect()
    }
}

#[test]
fn shared_prefix_groups_share_exactly_their_prefix_and_are_seeded() {
    let tmp = tempfile::tempdir().unwrap();
    shared_texts(tmp.path());
    let spec = shared_spec(3, 4, 50, 7);
    let got = shared_prefix(&spec, tmp.path(), &WordIds, 11).unwrap();
    assert_eq!(got.len(), 12);
    let contiguous = |t: &[u32]| t.windows(2).all(|w| w[1] == w[0] + 1);
    for (k, e) in got.iter().enumerate() {
        let (g, first) = (k / 4, &got[k / 4 * 4]);
        assert_eq!(e.tokens.len(), 57, "{}", e.source);
        // The prefix is the group's, a contiguous cut of one file (50 > 40: never f1).
        assert_eq!(e.tokens[..50], first.tokens[..50], "entry {k} of group {g}");
        assert!(contiguous(&e.tokens[..50]) && e.tokens[0] / 1000 != 1, "{}", e.source);
        assert!(contiguous(&e.tokens[50..]), "{}", e.source);
        assert!(e.source.starts_with(&format!("group {g}: ")), "{}", e.source);
        assert_eq!((e.output_tokens, e.messages.clone()), (None, None));
    }
    // Groups differ in their prefix; requests of a group differ in their suffix.
    let prefixes: std::collections::BTreeSet<&[u32]> = got.iter().map(|e| &e.tokens[..50]).collect();
    assert_eq!(prefixes.len(), 3);
    let suffixes: std::collections::BTreeSet<&[u32]> = got.iter().map(|e| &e.tokens[50..]).collect();
    assert_eq!(suffixes.len(), 12);
    // Seeded: the same seed gives the same panel, another seed another one.
    assert_eq!(shared_prefix(&spec, tmp.path(), &WordIds, 11).unwrap(), got);
    assert_ne!(shared_prefix(&spec, tmp.path(), &WordIds, 12).unwrap(), got);
    // Group g's prefix does not depend on how many requests a group has.
    let fewer = shared_prefix(&shared_spec(3, 2, 50, 7), tmp.path(), &WordIds, 11).unwrap();
    assert_eq!(fewer[2].tokens[..50], got[4].tokens[..50]);
    // No file long enough: an error naming the key.
    let e = shared_prefix(&shared_spec(1, 1, 501, 7), tmp.path(), &WordIds, 11).unwrap_err().to_string();
    assert!(e.contains("prompts.prefix_tokens") && e.contains("longest text file has 500"), "{e}");
}

#[test]
fn a_shared_prefix_panel_sends_the_plans_output_length_round_robin() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("t")).unwrap();
    shared_texts(&tmp.path().join("t"));
    let prompts = "source = \"shared_prefix\"\ntexts = \"t\"\ntokenizer = \"tok.json\"\ngroups = 2\n\
                   prompts_per_group = 3\nprefix_tokens = 30\nsuffix_tokens = 5";
    let plan = plan::parse(&plan_text("output_tokens = 6", prompts)).unwrap();
    let panel = build_panel(&plan, tmp.path(), Some(&WordIds)).unwrap();
    assert_eq!(panel.prompts.len(), 6);
    for p in &panel.prompts {
        assert_eq!((p.length, p.output_tokens, p.max_tokens, p.ignore_eos), (35, None, Some(6), Some(true)));
        assert_eq!(p.tokens[..30], panel.prompts[p.index as usize / 3 * 3].tokens[..30]);
    }
    panel.check(&plan).unwrap();
    assert_eq!(Panel::from_jsonl(&panel.to_jsonl()).unwrap(), panel);
    let cell = plan.resolved_cells().unwrap().remove(0);
    let sent: Vec<u64> = cell_trace(&plan, &cell).unwrap().entries.iter().map(|e| e.prompt).collect();
    assert_eq!(sent, [0, 1, 2, 3, 4, 5, 0]);
}

/// `Words`, counting the texts it is asked to encode.
struct CountingWords(std::sync::atomic::AtomicUsize);

impl Encoder for CountingWords {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Words.encode(text)
    }
}

#[test]
fn sharegpt_encodes_each_distinct_text_once() {
    let tmp = tempfile::tempdir().unwrap();
    // Speech k is conversation k's answer and conversation k+1's prompt (as in the
    // play dialogue), and the file holds every conversation twice: 7 distinct texts.
    let speech = |k: usize| format!("s{k} {}", words(4 + k));
    let convs: Vec<String> = (0..6)
        .chain(0..6)
        .map(|k| {
            format!(
                r#"{{"conversations": [{{"from": "human", "value": "{}"}}, {{"from": "gpt", "value": "{}"}}]}}"#,
                speech(k),
                speech(k + 1)
            )
        })
        .collect();
    let path = write(tmp.path(), "sg.json", &format!("[{}]", convs.join(",")));
    let enc = CountingWords(Default::default());
    let got = sharegpt(&spec("sg.json"), &path, &enc, 3, 12, false).unwrap();
    assert_eq!(enc.0.load(std::sync::atomic::Ordering::Relaxed), 7);
    // The same entries as encoding every text anew.
    assert_eq!(got, sharegpt(&spec("sg.json"), &path, &Words, 3, 12, false).unwrap());
    for e in &got {
        assert_eq!((e.tokens.len(), e.output_tokens), (e.tokens.len(), Some(e.tokens.len() as u32 + 1)));
    }
}

/// `shuffle = false` (vLLM's `--disable-shuffle`): the conversations in file order,
/// whatever the seed; the default shuffles them.
#[test]
fn sharegpt_without_shuffle_keeps_file_order() {
    let tmp = tempfile::tempdir().unwrap();
    let path = sharegpt_file(tmp.path(), 12);
    let s = ShareGptSpec { shuffle: false, ..spec("sg.json") };
    for seed in [1, 2] {
        let got: Vec<String> =
            sharegpt(&s, &path, &Words, seed, 5, false).unwrap().into_iter().map(|e| e.source).collect();
        assert_eq!(got, (0..5).map(|i| format!("sg.json#{i}")).collect::<Vec<_>>());
    }
    let shuffled: Vec<String> =
        sharegpt(&spec("sg.json"), &path, &Words, 1, 5, false).unwrap().into_iter().map(|e| e.source).collect();
    assert_ne!(shuffled, (0..5).map(|i| format!("sg.json#{i}")).collect::<Vec<_>>());
}
