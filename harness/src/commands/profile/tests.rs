//! Tests of `harness profile`: AIPerf 0.13's flags onto the engine's plan (through
//! the plan parser), and what is refused.

use clap::Parser;

use super::*;
use crate::commands::bench::{BenchPlan, prepare};
use crate::plan::Load;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ProfileArgs,
}

#[derive(Parser)]
struct Defaults {
    #[command(flatten)]
    bench: BenchArgs,
}

fn translated(flags: &[&str]) -> Result<Translated, BenchError> {
    let mut argv = vec!["profile", "-m", "m", "--url", "127.0.0.1:9"];
    argv.extend_from_slice(flags);
    let a = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).args;
    translate(&a, Defaults::try_parse_from(["bench"]).unwrap().bench)
}

fn prepared(flags: &[&str]) -> BenchPlan {
    let t = translated(flags).unwrap_or_else(|e| panic!("{e}"));
    prepare(&t.bench, || 18555, 0).unwrap_or_else(|e| panic!("{e}"))
}

fn error(flags: &[&str]) -> String {
    match translated(flags).and_then(|t| prepare(&t.bench, || 1, 0)) {
        Ok(p) => panic!("expected an error, got\n{}", p.text),
        Err(e) => e.to_string(),
    }
}

fn loads(p: &BenchPlan) -> Vec<(Load, u64)> {
    let plan = &p.frozen.plan;
    plan.resolved_cells().unwrap().iter().map(|c| (plan.cell(&c.name).unwrap().load.clone(), c.count)).collect()
}

/// AIPerf's loads: concurrency a closed loop, a rate an open one capped by a
/// concurrency beside it, neither one at a time; the count AIPerf's default.
#[test]
fn aiperf_loads_and_counts_map_onto_cells() {
    let base = ["--endpoint-type", "completions"];
    let p = prepared(&base);
    assert!(matches!(loads(&p)[..], [(Load::Closed { concurrency: 1 }, 10)]), "{}", p.text);
    let p = prepared(&[&base[..], &["--concurrency", "8"]].concat());
    assert!(matches!(loads(&p)[..], [(Load::Closed { concurrency: 8 }, 16)]), "{}", p.text);
    let p = prepared(&[&base[..], &["--concurrency", "2,4", "--request-count", "12"]].concat());
    assert_eq!(loads(&p).iter().map(|(_, n)| *n).collect::<Vec<_>>(), [12, 12]);
    let p = prepared(&[&base[..], &["--request-rate", "5", "--concurrency", "3", "--request-count", "7"]].concat());
    assert!(p.text.contains("load = \"open\"") && p.text.contains("max_concurrency = 3"), "{}", p.text);
    assert_eq!(loads(&p)[0].1, 7);
    let p = prepared(&[&base[..], &["--request-rate", "4", "--benchmark-duration", "5"]].concat());
    assert_eq!(loads(&p)[0].1, 20);
    let p = prepared(&[&base[..], &["--request-rate", "4", "--arrival-pattern", "constant"]].concat());
    assert!(p.text.contains("load = \"constant\""), "{}", p.text);
    let p = prepared(&[&base[..], &["--request-rate", "4", "--arrival-smoothness", "0.5"]].concat());
    assert!(p.text.contains("burstiness = 0.5"), "{}", p.text);
}

/// --isl/--osl and their stddevs are the synthetic panel's length distributions;
/// outputs end naturally at most at --osl unless ignore_eos forces them.
#[test]
fn aiperf_lengths_are_the_synthetic_panels_distributions() {
    let p = prepared(&[
        "--endpoint-type",
        "completions",
        "--isl",
        "100",
        "--isl-stddev",
        "10",
        "--osl",
        "20",
        "--num-dataset-entries",
        "5",
        "--random-seed",
        "7",
    ]);
    let t = &p.text;
    assert!(t.contains("input_tokens = { dist = \"normal\", mean = 100.0, sd = 10.0, min = 1, max = 200 }"), "{t}");
    assert!(t.contains("output_tokens = { dist = \"fixed\", value = 20 }"), "{t}");
    assert!(t.contains("output = \"natural\"") && t.contains("max_output_tokens = 20"), "{t}");
    assert!(t.contains("num_requests = 5") && t.contains("seed = 7"), "{t}");
    let forced =
        prepared(&["--endpoint-type", "completions", "--osl", "20", "--extra-inputs", "ignore_eos:true", "top_p:0.9"]);
    assert!(forced.text.contains("output = \"forced\""), "{}", forced.text);
    assert!(forced.text.contains("extra_body = { \"top_p\" = 0.9 }"), "{}", forced.text);
    let shape = translated(&[
        "--endpoint-type",
        "completions",
        "--streaming",
        "--goodput",
        "time_to_first_token:100 request_latency:300",
    ])
    .unwrap()
    .shape;
    assert!(shape.streaming && shape.closed_loop);
    assert_eq!(shape.goodput, [("time_to_first_token".to_string(), 100.0), ("request_latency".to_string(), 300.0)]);
}

/// What the harness does not do is refused with the reason, before anything runs.
#[test]
fn aiperf_flags_not_built_are_refused_with_their_reason() {
    assert!(error(&["--reset-kv-cache"]).contains("--reset-kv-cache: refused: a KV-cache reset"));
    assert!(error(&["--public-dataset", "sharegpt"]).contains("Hugging Face hub"));
    assert!(error(&["-f", "x.yaml"]).contains("-f: refused"));
    let e = error(&[]);
    assert!(e.contains("--endpoint-type chat with synthetic prompts: refused: no tokenizer resolves"), "{e}");
    assert!(error(&["--endpoint-type", "embeddings"]).contains("refused"));
    assert!(error(&["--endpoint-type", "completions", "--goodput", "bogus:1"]).contains("not an AIPerf metric tag"));
    let e = error(&["--input-file", "x.jsonl", "--custom-dataset-type", "multi_turn"]);
    assert!(e.contains("--custom-dataset-type multi_turn: refused") && e.contains("prompts.max_turns"), "{e}");
    let e = error(&["--input-file", "x", "--custom-dataset-type", "random_pool"]);
    assert!(e.contains("random_pool: refused") && e.contains("directory"), "{e}");
    assert!(error(&["--endpoint-type", "completions", "--extra-inputs", "max_tokens:5"]).contains("give --osl"));
}

/// AIPerf's default endpoint with synthetic prompts: with a tokenizer (here
/// `--model`, a local directory holding tokenizer.json, as AIPerf loads the
/// model's) the synthetic panel is text cut from `--texts`, sent on the chat route.
#[test]
fn chat_with_synthetic_prompts_is_a_text_panel_when_a_tokenizer_resolves() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
    let model = tmp.path().to_str().unwrap();
    let a = Cli::try_parse_from(["profile", "-m", model, "--url", "127.0.0.1:9", "--streaming", "--isl", "64"])
        .unwrap()
        .args;
    let t = translate(&a, Defaults::try_parse_from(["bench"]).unwrap().bench).unwrap_or_else(|e| panic!("{e}"));
    let p = prepare(&t.bench, || 1, 0).unwrap_or_else(|e| panic!("{e}"));
    let text = &p.text;
    assert!(text.contains("source = \"synthetic\"") && text.contains("texts = \"assets/texts\""), "{text}");
    assert!(text.contains("endpoint = \"chat\"") && text.contains("tokenizer.json"), "{text}");
    assert_eq!(p.frozen.plan.request.endpoint, crate::plan::Endpoint::Chat);
    // Every request carries an id, as AIPerf's do: a prefix drawn once, frozen in the plan.
    let id = p.frozen.plan.request.request_id(3).unwrap();
    assert!(id.starts_with("profile-") && id.ends_with("-3") && id.len() == "profile-01234567-3".len(), "{id}");
}

/// A single_turn input file (AIPerf's `text`, `output_length`) is a requests panel
/// sent as chat messages; the count is its rows.
#[test]
fn a_single_turn_file_is_a_requests_panel_on_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("in.jsonl");
    std::fs::write(&f, "{\"text\": \"hello there\", \"output_length\": 3}\n{\"text\": \"bye\"}\n\n").unwrap();
    let p = prepared(&["--input-file", f.to_str().unwrap(), "--custom-dataset-type", "single_turn", "--osl", "9"]);
    assert!(p.text.contains("source = \"requests\"") && p.text.contains("endpoint = \"chat\""), "{}", p.text);
    assert!(p.text.contains("max_output_tokens = 9"), "{}", p.text);
    assert_eq!(loads(&p)[0].1, 2);
}

/// A Mooncake trace (AIPerf's fixed schedule: its rows at their timestamps, the
/// count its rows) is one trace cell replaying the file with each row's lengths,
/// from a fixed-length panel of the rows' input lengths; --request-count takes
/// the first rows, --concurrency caps in flight.
#[test]
fn a_mooncake_trace_is_one_trace_cell_of_the_rows_lengths() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("m.jsonl");
    let rows = "{\"timestamp\": 1000, \"input_length\": 12, \"output_length\": 3, \"hash_ids\": [1]}\n\
                {\"timestamp\": 1250, \"input_length\": 20, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
                {\"timestamp\": 1600, \"input_length\": 12, \"output_length\": 4}\n";
    std::fs::write(&f, rows).unwrap();
    let file = f.to_str().unwrap();
    let base = ["--endpoint-type", "completions", "--input-file", file, "--custom-dataset-type", "mooncake_trace"];
    let t = translated(&base).unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.shape.closed_loop && t.shape.requested_osl);
    assert!(t.artifact_dir.ends_with("m-openai-completions-fixed_schedule"), "{:?}", t.artifact_dir);
    let p = prepared(&base);
    let text = &p.text;
    assert!(text.contains("source = \"random\"\nlengths = [12, 20]\ndocuments = 2\n"), "{text}");
    assert!(text.contains("output = \"natural\"\noutput_tokens = 5\n"), "{text}");
    assert!(text.contains("trace_lengths = true") && text.contains(&format!("trace = {file:?}")), "{text}");
    let cell = |p: &BenchPlan| p.frozen.plan.cells[0].clone();
    assert_eq!(p.frozen.plan.cells.len(), 1);
    assert_eq!(cell(&p).load, Load::Trace { path: file.into(), time_scale: 1.0, lengths: true });
    assert_eq!((loads(&p)[0].1, cell(&p).max_concurrency), (3, None));
    let p = prepared(&[&base[..], &["--request-count", "2", "--concurrency", "4"]].concat());
    assert_eq!((loads(&p)[0].1, cell(&p).max_concurrency), (2, Some(4)));
    let p = prepared(&[&base[..], &["--extra-inputs", "ignore_eos:true"]].concat());
    assert!(p.text.contains("output = \"forced\""), "{}", p.text);

    let e = error(&[&base[..], &["--request-count", "4"]].concat());
    assert!(e.contains("--request-count 4:") && e.contains("has 3 rows"), "{e}");
    let e = error(&[&base[..], &["--request-rate", "2"]].concat());
    assert!(e.contains("--request-rate with --custom-dataset-type mooncake_trace: refused"), "{e}");
    let e = error(&base[2..]);
    assert!(e.contains("--endpoint-type chat: refused") && e.contains("--endpoint-type completions"), "{e}");
    for (row, why) in [
        ("{\"timestamp\": 1, \"text_input\": \"hi\", \"output_length\": 2}", "`text_input` refused"),
        ("{\"session_id\": \"a\", \"input_length\": 3, \"output_length\": 2}", "`session_id` refused"),
        ("{\"input_length\": 3, \"output_length\": 2}", "no `timestamp`: refused"),
        ("{\"timestamp\": 5, \"input_length\": 3}", "missing field \"output_length\""),
    ] {
        std::fs::write(&f, format!("{row}\n")).unwrap();
        let e = error(&base);
        assert!(e.contains(why) && e.contains("line 1"), "{row}: {e}");
    }
}

/// Every name of every `aiperf profile` flag (AIPerf 0.13.0's `--help`, in
/// harness/tests/reference/aiperf_profile_flags.txt) is taken or refused here,
/// and has a row in docs/bench.md.
#[test]
fn every_aiperf_flag_is_taken_or_refused_and_documented() {
    use clap::CommandFactory;
    let flags = include_str!("../../../tests/reference/aiperf_profile_flags.txt");
    let cmd = Cli::command();
    let mut names: Vec<String> = Vec::new();
    for a in cmd.get_arguments() {
        names.extend(a.get_long_and_visible_aliases().unwrap_or_default().iter().map(|l| format!("--{l}")));
        names.extend(a.get_all_aliases().unwrap_or_default().iter().map(|l| format!("--{l}")));
        names.extend(a.get_short().map(|c| format!("-{c}")));
    }
    names.push("--help".into());
    names.push("-h".into());
    names.push("--version".into());
    let docs = include_str!("../../../../docs/bench.md");
    let mut seen = 0;
    for flag in flags.lines().filter(|l| !l.starts_with('#')).flat_map(str::split_whitespace) {
        seen += 1;
        if flag == "-vv" {
            // -vv is -v twice (a count), as in AIPerf.
            continue;
        }
        assert!(names.iter().any(|n| n == flag), "{flag}: neither taken nor refused");
        if !matches!(flag, "--help" | "-h" | "--version") {
            assert!(docs.contains(&format!("`{flag}`")), "{flag}: no row in docs/bench.md");
        }
    }
    assert_eq!(seen, 321, "AIPerf 0.13.0's profile has 321 flag names");
    let a = Cli::try_parse_from(["profile", "-m", "m", "-vv"]).unwrap().args;
    assert_eq!(a.verbose, 2);
}
