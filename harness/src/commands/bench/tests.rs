//! Tests of `harness bench`'s flags -> plan mapping (through the plan parser) and of
//! its summary block.

use clap::Parser;

use super::*;
use crate::plan::{LengthDist, Load, PanelSource, Server, SyntheticTokens};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

/// The flags, with the harness's own token-ID prompts unless a dataset is named
/// (vLLM's default `random` needs a tokenizer; most tests here are about loads).
fn args(flags: &[&str]) -> BenchArgs {
    let mut argv = vec!["bench"];
    if !flags.iter().any(|f| *f == "--dataset" || *f == "--dataset-name") {
        argv.extend(["--dataset-name", "random-ids"]);
    }
    argv.extend_from_slice(flags);
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).args
}

fn prepared(flags: &[&str]) -> BenchPlan {
    prepare(&args(flags), || 18555, 1_700_000_000).unwrap_or_else(|e| panic!("{e}"))
}

/// `base` followed by `extra`.
fn joined<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

fn error(flags: &[&str]) -> String {
    match prepare(&args(flags), || 18555, 0) {
        Ok(p) => panic!("expected an error, got the plan\n{}", p.text),
        // As the command line prints it: the error and its causes.
        Err(e) => format!("{:#}", anyhow::Error::new(e)),
    }
}

const ARGV: &str = "--argv=engine serve --model m --served-model-name {model} --port {port} --receipts {receipts}";

#[test]
fn a_spawned_arm_with_a_rate_and_a_concurrency_sweep_is_one_arm_descriptive_plan() {
    let p = prepared(&[ARGV, "--model", "synth", "--rate", "1,2.5", "--concurrency", "4", "--num-prompts", "7"]);
    let plan = &p.frozen.plan;
    assert_eq!(p.out, PathBuf::from("reports/bench-1700000000"));
    assert_eq!(plan.arms.len(), 1);
    let arm = &plan.arms[0];
    assert_eq!(arm.name, "server");
    match &arm.server {
        Server::Spawn { argv, port } => {
            assert_eq!(*port, 18555);
            assert_eq!(argv[..3], ["engine", "serve", "--model"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(arm.receipts.as_deref(), Some("{arm_dir}/receipts.jsonl"));
    let names: Vec<&str> = plan.cells.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["poisson-r1", "poisson-r2.5", "closed-c4"]);
    assert!(plan.cells.iter().all(|c| c.kind == crate::plan::CellKind::Descriptive));
    assert!(matches!(plan.cells[2].load, Load::Closed { concurrency: 4 }));
    assert_eq!((plan.blocks.count, plan.blocks.descriptive), (0, 1));
    assert_eq!(plan.request.model, "synth");
    assert!(plan.request.forced() && plan.request.output_tokens == 128);
    assert!(matches!(plan.prompts.source, PanelSource::Random { max_token_id: 255, .. }));
    assert_eq!((plan.prompts.lengths.as_slice(), plan.prompts.documents), (&[1024][..], 7), "vLLM's 1024");
    assert_eq!(plan.max_error_rate, 0.0);
    assert!(p.text.starts_with("# Written by `harness bench`"), "{}", p.text);
}

#[test]
fn a_url_arm_carries_the_key_variable_name_and_never_a_port() {
    let p = prepared(&[
        "--url",
        "http://127.0.0.1:8000",
        "--model",
        "m",
        "--concurrency",
        "1",
        "--api-key-env",
        "MY_KEY",
        "--input-len",
        "32",
        "--output-len",
        "5",
    ]);
    let arm = &p.frozen.plan.arms[0];
    assert_eq!(arm.server, Server::External { url: "http://127.0.0.1:8000".into() });
    assert_eq!(arm.api_key_env.as_deref(), Some("MY_KEY"));
    assert_eq!(p.frozen.plan.request.output_tokens, 5);
    assert_eq!(p.frozen.plan.prompts.lengths, [32]);
}

#[test]
fn dataset_flags_become_the_matching_panel_sources() {
    let common = ["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "2", "--num-prompts", "50"];
    let with = |extra: &[&str]| prepared(&joined(&common, extra)).frozen.plan;
    let sg =
        with(&["--dataset", "sharegpt", "--dataset-path", "d.json", "--tokenizer", "t.json", "--output-len", "64"]);
    assert!(matches!(&sg.prompts.source, PanelSource::ShareGpt(s) if s.path == "d.json" && s.tokenizer == "t.json"));
    assert!(matches!(&sg.prompts.source, PanelSource::ShareGpt(s) if s.shuffle));
    let in_order =
        with(&["--dataset", "sharegpt", "--dataset-path", "d.json", "--tokenizer", "t.json", "--disable-shuffle"]);
    assert!(matches!(&in_order.prompts.source, PanelSource::ShareGpt(s) if !s.shuffle), "vLLM's --disable-shuffle");
    assert_eq!(sg.prompts.documents, 50);
    assert!(!sg.request.forced(), "sharegpt outputs are natural unless --ignore-eos");
    assert_eq!(sg.request.max_output_tokens, Some(64));
    let forced = with(&["--dataset", "sharegpt", "--dataset-path", "d.json", "--tokenizer", "t.json", "--ignore-eos"]);
    assert!(forced.request.forced());
    assert_eq!(forced.request.max_output_tokens, Some(2048));
    let syn = with(&[
        "--dataset",
        "synthetic",
        "--dataset-path",
        "assets/texts",
        "--tokenizer",
        "t.json",
        "--input-len",
        "9",
    ]);
    match &syn.prompts.source {
        PanelSource::Synthetic(s) => {
            let text = SyntheticTokens::Text {
                texts: "assets/texts".into(),
                pattern: "*.txt".into(),
                tokenizer: "t.json".into(),
            };
            assert_eq!((&s.tokens, s.input, s.output), (&text, LengthDist::Fixed(9), LengthDist::Fixed(128)))
        }
        other => panic!("{other:?}"),
    }
    let req = with(&["--dataset", "requests", "--dataset-path", "r.jsonl"]);
    assert!(matches!(&req.prompts.source, PanelSource::Requests { path, tokenizer: None } if path == "r.jsonl"));
}

#[test]
fn bad_flags_are_named() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m"];
    let e = |extra: &[&str]| error(&joined(&base, extra));
    assert!(e(&["--rate", "0"]).contains("--rate: every rate must be a positive"), "{}", e(&["--rate", "0"]));
    assert!(e(&["--rate", "inf"]).contains("--rate"));
    assert!(e(&["--concurrency", "0"]).contains("--concurrency"));
    assert!(e(&["--rate", "1", "--num-prompts", "0"]).contains("--num-prompts"));
    assert!(e(&["--rate", "1", "--dataset", "sharegpt"]).contains("needs --dataset-path"));
    assert!(e(&["--rate", "1", "--dataset", "sharegpt", "--dataset-path", "d"]).contains("needs --tokenizer"));
    let path = e(&["--rate", "1", "--dataset-path", "d"]);
    assert!(path.contains("--dataset-path: --dataset-name random-ids reads no file"), "{path}");
    assert!(e(&["--request-rate", "0"]).contains("--request-rate: every rate must be positive"));
    // What the plan parser judges comes back as an invalid plan, naming the key.
    let bad_name = e(&["--rate", "1", "--name", "no spaces"]);
    assert!(bad_name.contains("study.name"), "{bad_name}");
    let bad_url = error(&["--url", "ftp://x", "--model", "m", "--rate", "1"]);
    assert!(bad_url.contains("arms[0].url"), "{bad_url}");
    let empty = error(&["--argv", "  ", "--model", "m", "--rate", "1"]);
    assert!(empty.contains("--argv: empty"), "{empty}");
    // Clap's own: both servers, a bad list.
    let parse = |f: &[&str]| {
        let mut v = vec!["bench"];
        v.extend_from_slice(f);
        Cli::try_parse_from(v).err().map(|e| (e.kind(), e.exit_code()))
    };
    assert!(parse(&["--url", "u", "--argv", "a", "--model", "m", "--rate", "1"]).is_some_and(|(_, c)| c == 2));
    assert!(parse(&["--url", "u", "--model", "m", "--rate", "1,x"]).is_some());
}

pub(crate) fn summary() -> CellSummary {
    let mut v = serde_json::json!({
        "cell": "poisson-r2", "block": 0, "arm": "server", "percentile_method": "nearest_rank",
        "requests": 10, "completed": 9, "failed": 1, "failed_by_class": {"timeout": 1},
        "observation_start_ns": 0, "observation_end_ns": 5_000_000_000u64, "duration_s": 5.0,
        "total_input_tokens": 900, "total_output_tokens": 90, "request_throughput_rps": 1.8,
        "output_token_throughput_tps": 18.0, "total_token_throughput_tps": 198.0, "peak_concurrent_requests": 3,
        "ttft_samples": 9, "ttft_mean_ms": 12.345, "ttft_p50_ms": 11.0, "ttft_p99_ms": 30.5,
        "tpot_samples": 9, "tpot_mean_ms": 4.0, "tpot_p50_ms": 3.9, "tpot_p99_ms": 6.0,
        "itl_samples": 81, "e2e_samples": 9, "e2e_mean_ms": 50.0, "e2e_p50_ms": 48.0, "e2e_p99_ms": 90.0,
        "dispatch_lag_samples": 9, "stream_events": 90, "empty_events": 0, "multi_token_events": 0,
        "requests_without_token_events": 0, "output_tokens_from_usage_requests": 9,
        "output_tokens_from_events_requests": 0, "usage_event_token_mismatch_requests": 0,
    });
    for k in ["ttft_p95_ms", "tpot_p95_ms", "itl_mean_ms", "itl_p50_ms", "itl_p95_ms", "itl_p99_ms", "e2e_p95_ms"] {
        v[k] = serde_json::Value::Null;
    }
    serde_json::from_value(v).expect("a CellSummary")
}

#[test]
fn vllms_percentile_flags_choose_the_blocks_sections_and_percentile_lines() {
    let facts = crate::metrics::LoadFacts::default();
    let plain = render_block(&summary(), "closed", facts, &Default::default(), false);
    for label in ["P95 TTFT (ms):", "P99 TPOT (ms):", "Median ITL (ms):", "Mean E2EL (ms):"] {
        assert!(plain.contains(label), "without the flags, every section with P95 and P99: {label}\n{plain}");
    }
    // --percentile-metrics ttft,tpot --metric-percentiles 50,99.9: vLLM's lines,
    // vLLM's names (P50, P99.9), in the order asked, only the sections asked.
    let pct = crate::metrics::BlockPercentiles {
        metrics: vec!["ttft".into(), "tpot".into()],
        lines: vec![(50.0, [Some(11.0), Some(3.0), None, Some(40.0)]), (99.9, [Some(19.5), None, None, None])],
    };
    let text = render_block(&summary(), "closed", facts, &pct, false);
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let at = |l: &str| lines.iter().position(|x| x.starts_with(l)).unwrap_or_else(|| panic!("no {l:?} in\n{text}"));
    assert_eq!(lines[at("Mean TTFT (ms):") + 1], format!("{:<40} 11.00", "Median TTFT (ms):"));
    assert_eq!(lines[at("Median TTFT (ms):") + 1], format!("{:<40} 11.00", "P50 TTFT (ms):"));
    assert_eq!(lines[at("P50 TTFT (ms):") + 1], format!("{:<40} 19.50", "P99.9 TTFT (ms):"));
    assert_eq!(lines[at("P99.9 TPOT (ms):")], format!("{:<40} n/a", "P99.9 TPOT (ms):"));
    for absent in ["P95 ", "P99 ", "Inter-token Latency", "ITL", "E2EL"] {
        assert!(!text.contains(absent), "{absent:?} was not asked for:\n{text}");
    }
}

#[test]
fn the_summary_block_names_the_cell_and_has_vllm_bench_lines() {
    let facts = crate::metrics::LoadFacts { rate_rps: Some(2.0), ..Default::default() };
    let text = render_block(&summary(), "open-loop 2 req/s poisson", facts, &Default::default(), false);
    let lines: Vec<&str> = text.lines().collect();
    // vLLM's order: the configured rate after the failures, before the duration.
    let at = |l: &str| lines.iter().position(|x| x.starts_with(l)).unwrap_or_else(|| panic!("no {l:?} in\n{text}"));
    assert!(
        at("Failed requests:") < at("Request rate configured (RPS):")
            && at("Request rate configured (RPS):") < at("Benchmark duration (s):")
    );
    let want = format!("{:<40} 2.00", "Request rate configured (RPS):");
    assert!(lines.iter().any(|l| l.trim_end() == want), "{text}");
    // Our extras only with --verbose; the definitions note always.
    assert!(!text.contains("From intended arrival") && !text.contains("Dispatch lag"), "{text}");
    assert!(text.contains("Percentiles: nearest rank"), "{text}");
    let closed = crate::metrics::LoadFacts { max_concurrency: Some(4), closed: true, ..Default::default() };
    let verbose = render_block(&summary(), "closed-loop concurrency 4", closed, &Default::default(), true);
    assert!(verbose.contains(&format!("{:<40} 4\n", "Maximum request concurrency:")), "{verbose}");
    assert!(
        verbose.contains("From intended arrival")
            && verbose.contains("(closed loop: every request is intended at the cell start"),
        "{verbose}"
    );
    // vLLM's peak output line, in its place, when the caller computed it.
    let peaked = crate::metrics::LoadFacts { rate_rps: Some(2.0), peak_output_tps: Some(37.0), ..Default::default() };
    let p = render_block(&summary(), "open-loop 2 req/s poisson", peaked, &Default::default(), false);
    let pl: Vec<&str> = p.lines().collect();
    let pat = |l: &str| pl.iter().position(|x| x.starts_with(l)).unwrap_or_else(|| panic!("no {l:?} in\n{p}"));
    assert!(pat("Output token throughput (tok/s):") < pat("Peak output token throughput (tok/s):"));
    assert!(pat("Peak output token throughput (tok/s):") < pat("Peak concurrent requests:"));
    assert!(
        p.contains(&format!("{:<40} 37.00\n", "Peak output token throughput (tok/s):"))
            && p.contains("Peaks: output tokens as vLLM")
    );
    assert!(!text.contains("Peak output token throughput"), "only when computed: {text}");
    assert_eq!(lines[0], "cell poisson-r2 (block 0, arm server): open-loop 2 req/s poisson");
    assert_eq!(lines[1], "============ Serving Benchmark Result ============");
    for want in [
        "Successful requests:                     9",
        "Failed requests:                         1",
        "Benchmark duration (s):                  5.00",
        "Request throughput (req/s):              1.80",
        "Output token throughput (tok/s):         18.00",
        "Mean TTFT (ms):                          12.35",
        "Median TTFT (ms):                        11.00",
        "P99 TTFT (ms):                           30.50",
        "Median TPOT (ms):                        3.90",
        "Mean ITL (ms):                           n/a",
        "P99 E2EL (ms):                           90.00",
    ] {
        assert!(lines.iter().any(|l| l.trim_end() == want), "no line {want:?} in\n{text}");
    }
}

/// A vLLM bench user's spelling of a random-dataset run writes the very plan our
/// spelling writes: --base-url, --dataset-name, --random-input-len/-output-len,
/// --ignore-eos (random outputs are always forced), --request-rate, --disable-tqdm;
/// `--request-rate inf` is a closed loop of --max-concurrency (or of every request).
#[test]
fn vllm_bench_flags_write_the_same_plan_as_ours() {
    let ours = prepared(&[
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--dataset",
        "random-ids",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--rate",
        "2,4",
        "--quiet",
    ]);
    let vllm = prepared(&[
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        "64",
        "--random-output-len",
        "16",
        "--ignore-eos",
        "--request-rate",
        "2,4",
        "--disable-tqdm",
    ]);
    assert_eq!(ours.text, vllm.text);
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "40"];
    let with = |extra: &[&str]| prepared(&joined(&base, extra)).text;
    assert_eq!(with(&["--request-rate", "inf", "--max-concurrency", "4"]), with(&["--concurrency", "4"]));
    // vLLM's default rate is inf: --max-concurrency alone is that closed loop too.
    assert_eq!(with(&["--max-concurrency", "4"]), with(&["--concurrency", "4"]));
    assert_eq!(with(&["--request-rate", "inf"]), with(&["--concurrency", "40"]));
    assert_eq!(
        with(&["--request-rate", "3,inf", "--concurrency", "2"]),
        with(&["--rate", "3", "--concurrency", "2,40"])
    );
}

/// The rest of vLLM bench's everyday flags map onto plan keys: --goodput onto
/// `[slo]`, --burstiness onto gamma arrivals, --num-warmups onto the warmup,
/// --served-model-name onto the requests' model, --backend/--endpoint onto the
/// route, --temperature, --header onto the arm's headers, and the flags whose
/// meaning the harness does not offer are refused naming why.
#[test]
fn vllm_goodput_burstiness_warmups_names_routes_and_headers_map_onto_plan_keys() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "Qwen/Qwen3-8B", "--request-rate", "4"];
    let with = |extra: &[&str]| prepared(&joined(&base, extra));
    let p = with(&["--goodput", "ttft:200", "tpot:50", "e2el:1000"]);
    let slo = p.frozen.plan.slo.expect("[slo]");
    assert_eq!((slo.ttft_ms, slo.tpot_ms, slo.e2e_ms), (Some(200.0), Some(50.0), Some(1000.0)));
    let p = with(&["--burstiness", "0.5"]);
    assert!(
        matches!(p.frozen.plan.cells[0].load, Load::Open { arrival: crate::plan::Arrival::Gamma { burstiness }, .. } if burstiness == 0.5)
    );
    // Burstiness 1.0 is vLLM's default: Poisson, the same plan as without it.
    assert_eq!(with(&["--burstiness", "1.0"]).text, with(&[]).text);
    let p = with(&["--num-warmups", "3", "--served-model-name", "qwen", "--temperature", "0.5", "--no-token-ids"]);
    let r = &p.frozen.plan.request;
    assert_eq!((p.frozen.plan.warmup.prompts, r.model.as_str(), r.temperature, r.token_ids), (3, "qwen", 0.5, false));
    let chat = prepared(&[
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--request-rate",
        "4",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        "d.json",
        "--tokenizer",
        "t.json",
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
    ]);
    assert_eq!(chat.frozen.plan.request.endpoint, crate::plan::Endpoint::Chat);
    let p = with(&["--header", "x-tenant=a", "x-trace=b=c"]);
    let h = &p.frozen.plan.arms[0].headers;
    assert_eq!((h["x-tenant"].as_str(), h["x-trace"].as_str()), ("a", "b=c"));
    // Accepted as vLLM's defaults (the export always writes the four metrics' p99).
    assert_eq!(
        with(&["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "99"]).text,
        with(&[]).text
    );
    let err = |extra: &[&str]| error(&joined(&base, extra));
    for (flags, want) in [
        (&["--goodput", "ttft=200"][..], "--goodput \"ttft=200\": expected KEY:VALUE"),
        (&["--goodput", "itl:5"], "--goodput: unknown key \"itl\""),
        (&["--burstiness", "0"], "--burstiness: must be a positive number"),
        (&["--extra-body", "[1]"], "--extra-body: must be a JSON object"),
        (&["--extra-body", "{top_p: 1}"], "--extra-body: not JSON"),
        (&["--extra-body", r#"{"max_tokens": 5}"#], "`max_tokens` is set by the harness itself"),
        (&["--extra-body", r#"{"stop": null}"#], "null values cannot be sent here"),
        (&["--extra-body", r#"{"temperature": "hot"}"#], "temperature must be a number"),
        (&["--top-p", "NaN"], "--top-p: must be a finite number"),
        (&["--random-range-ratio", "1.0"], "--random-range-ratio: must be in [0, 1)"),
        (
            &[
                "--random-prefix-len",
                "8",
                "--dataset-name",
                "sharegpt",
                "--dataset-path",
                "d.json",
                "--tokenizer",
                "t.json",
            ],
            "shape --dataset-name random",
        ),
        (&["--metric-percentiles", "50,101"], "--metric-percentiles 50,101: \"101\" is not a percentile in [0, 100]"),
        (&["--percentile-metrics", "ttft,foo"], "unknown metric \"foo\""),
        (&["--header", "x"], "--header \"x\": expected KEY=VALUE"),
        (&["--backend", "openai", "--endpoint", "/v1/chat/completions"], "name different routes"),
    ] {
        let e = err(flags);
        assert!(e.contains(want), "{flags:?}: want {want:?} in {e}");
    }
    let no_model = error(&["--url", "http://127.0.0.1:9", "--request-rate", "4"]);
    assert!(no_model.contains("--model: required"), "{no_model}");
}

/// vLLM's sampling flags and `--extra-body` become `request.extra_body`, merged as
/// vLLM merges them; `--random-range-ratio` and `--random-prefix-len` become a
/// synthetic panel of random token IDs with vLLM's length ranges.
#[test]
fn vllm_sampling_flags_extra_body_and_random_ranges_map_onto_plan_keys() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "4", "--num-prompts", "12"];
    let with = |extra: &[&str]| prepared(&joined(&base, extra)).frozen.plan;
    let p = with(&["--top-p", "0.9", "--top-k", "20", "--min-p", "0.05", "--extra-body", r#"{"top_k": 5, "seed": 3}"#]);
    let want = serde_json::json!({"top_p": 0.9, "top_k": 5, "min_p": 0.05, "seed": 3});
    assert_eq!(serde_json::Value::Object(p.request.extra_body.clone()), want, "--extra-body's keys win, as in vLLM");
    assert_eq!(p.request.temperature, 0.0);
    let p = with(&[
        "--temperature",
        "0.2",
        "--extra-body",
        r#"{"temperature": 0.7, "chat_template_kwargs": {"enable_thinking": false}}"#,
    ]);
    assert_eq!(p.request.temperature, 0.7, "the extra body's temperature wins, as in vLLM");
    assert_eq!(p.request.extra_body["chat_template_kwargs"], serde_json::json!({"enable_thinking": false}));
    assert!(with(&[]).request.extra_body.is_empty());

    let p = with(&["--random-input-len", "100", "--random-output-len", "10", "--random-range-ratio", "0.25"]);
    let PanelSource::Synthetic(s) = &p.prompts.source else { panic!("{:?}", p.prompts.source) };
    // vLLM: [floor(100 * 0.75), ceil(100 * 1.25)] and [floor(7.5), ceil(12.5)].
    assert_eq!(
        (s.input, s.output),
        (LengthDist::Uniform { min: 75, max: 125 }, LengthDist::Uniform { min: 7, max: 13 })
    );
    assert!(matches!(s.tokens, SyntheticTokens::Random { min_token_id: 0, prefix: 0, .. }));
    assert_eq!(p.prompts.documents, 12);
    let p = with(&["--random-input-len", "16", "--random-prefix-len", "8"]);
    let PanelSource::Synthetic(s) = &p.prompts.source else { panic!() };
    assert_eq!(
        (s.input, &s.tokens),
        (LengthDist::Fixed(16), &SyntheticTokens::Random { min_token_id: 0, max_token_id: s_max(s), prefix: 8 })
    );
    // A ratio of 0 and a prefix of 0 are vLLM's defaults: the fixed-length random panel.
    assert!(matches!(
        with(&["--random-range-ratio", "0", "--random-prefix-len", "0"]).prompts.source,
        PanelSource::Random { .. }
    ));
}

fn s_max(s: &crate::plan::SyntheticSpec) -> u32 {
    match s.tokens {
        SyntheticTokens::Random { max_token_id, .. } => max_token_id,
        SyntheticTokens::Text { .. } => panic!("text"),
    }
}

#[test]
fn a_left_out_model_is_the_first_one_the_server_lists() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/v1/models",
        axum::routing::get(|| async { axum::Json(serde_json::json!({"data": [{"id": "served-a"}, {"id": "b"}]})) }),
    );
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    let a = discover_model(&args(&["--url", &format!("{url}/v1"), "--request-rate", "1"])).unwrap();
    assert_eq!(a.model.as_deref(), Some("served-a"));
    let given = discover_model(&args(&["--url", &url, "--model", "x", "--request-rate", "1"])).unwrap();
    assert_eq!(given.model.as_deref(), Some("x"));
    let spawned = discover_model(&args(&[ARGV, "--request-rate", "1"])).unwrap_err().to_string();
    assert!(spawned.contains("--model is required with --argv"), "{spawned}");
}

pub(crate) fn summary_of(cell: &str, rps: f64) -> CellSummary {
    CellSummary { cell: cell.into(), request_throughput_rps: rps, ..summary() }
}

#[test]
fn the_default_evidence_directory_is_a_fresh_one_within_one_second() {
    let tmp = tempfile::tempdir().unwrap();
    let reports = tmp.path();
    assert_eq!(default_out(reports, 7), reports.join("bench-7"));
    std::fs::create_dir(reports.join("bench-7")).unwrap();
    assert_eq!(default_out(reports, 7), reports.join("bench-7-2"));
    // A sweep's anchors beside it count as taken too.
    std::fs::create_dir(reports.join("bench-7-2-anchors")).unwrap();
    assert_eq!(default_out(reports, 7), reports.join("bench-7-3"));
    assert_eq!(default_out(reports, 8), reports.join("bench-8"));
}

/// vLLM's `--max-concurrency` beside finite rates caps their open loops in flight;
/// beside `inf` it is the closed loop's concurrency.
#[test]
fn max_concurrency_caps_open_loops_and_sizes_the_infinite_rates_closed_loop() {
    let p =
        prepared(&["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "2,inf", "--max-concurrency", "4"]);
    let cells = p.frozen.plan.resolved_cells().unwrap();
    assert_eq!(cells.len(), 2, "{cells:?}");
    let open = cells.iter().find(|c| matches!(c.load, crate::plan::ResolvedLoad::Open { .. })).unwrap();
    assert_eq!((open.max_concurrency, open.in_flight_cap()), (Some(4), Some(4)));
    assert_eq!(open.cap_note(), ", at most 4 in flight");
    let closed = cells.iter().find(|c| matches!(c.load, crate::plan::ResolvedLoad::Closed { concurrency: 4 })).unwrap();
    assert_eq!((closed.max_concurrency, closed.in_flight_cap(), closed.cap_note().as_str()), (None, Some(4), ""));
    assert_eq!(load_facts(open).max_concurrency, Some(4), "vLLM's \"Maximum request concurrency\" line");
    assert!(p.text.contains("max_concurrency = 4"), "{}", p.text);
    // Without the cap nothing changes.
    let plain = prepared(&["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "2"]);
    assert!(plain.frozen.plan.cells.iter().all(|c| c.max_concurrency.is_none()));
}

/// Issue 52, item 7: a secret passed as a header (vLLM users pass auth as
/// `--header Authorization=Bearer X`) would be written into the evidence's
/// plan.toml: refused, pointing to `--api-key-env`, before anything is written.
#[test]
fn secret_bearing_headers_are_refused_pointing_to_api_key_env() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "4"];
    for h in [
        "Authorization=Bearer sk-123",
        "authorization=x",
        "api-key=k",
        "X-API-Key=k",
        "x-auth-token=t",
        "X-Client-Secret=s",
        "OpenAI-Key=k",
        "proxy-authorization=Basic x",
    ] {
        let e = error(&joined(&base, &["--header", h]));
        assert!(e.contains("--api-key-env") && e.contains("plan.toml"), "{h}: {e}");
        assert!(!e.contains("sk-123"), "the message must not repeat the secret: {e}");
    }
    // Ordinary headers stay, as in vLLM.
    let p = prepared(&joined(&base, &["--header", "x-tenant=blue", "x-request-source=ci"]));
    assert_eq!(p.frozen.plan.arms[0].headers.len(), 2);
}

/// Issue 52, item 14: `--save-result` whose result file cannot be written is bad
/// input, found before the study runs (it used to run the whole study, then exit 1).
#[test]
fn save_result_destinations_are_checked_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let f = file.display().to_string();
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "4", "--save-result"];
    for (extra, want) in [
        (&["--result-dir", f.as_str()][..], "--result-dir"),
        (&["--result-filename", ""], "--result-filename"),
        (&["--result-filename", "../../etc/x"], "--result-filename"),
        (&["--result-filename", "/etc/x"], "--result-filename"),
        (&["--result-filename", "."], "--result-filename"),
    ] {
        let e = error(&joined(&base, extra));
        assert!(e.contains(want), "{extra:?}: want {want:?} in {e}");
    }
    // vLLM's sweep passes names like `run=0.json`; a directory that does not
    // exist yet is created after the run, as vLLM does.
    let fresh = tmp.path().join("new/dir").display().to_string();
    prepared(&joined(&base, &["--result-dir", &fresh, "--result-filename", "run=0.json"]));
    assert!(!tmp.path().join("new").exists(), "nothing is created before the run");
}

/// Issue 52, item 16: an `--extra-body` too deeply nested for a plan is refused
/// naming the flag, not as a TOML parse error of the harness's own generated plan.
#[test]
fn a_deeply_nested_extra_body_is_refused_naming_the_flag() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "4"];
    let deep = format!("{}1{}", "{\"a\":".repeat(100), "}".repeat(100));
    let e = error(&joined(&base, &["--extra-body", &deep]));
    assert!(e.starts_with("--extra-body: nested 100 levels deep"), "{e}");
    assert!(!e.contains("invalid") && !e.contains("line 1"), "{e}");
    let deep_list = format!("{{\"a\":{}1{}}}", "[".repeat(99), "]".repeat(99));
    assert!(error(&joined(&base, &["--extra-body", &deep_list])).starts_with("--extra-body: nested"));
    // 32 levels, far beyond real bodies (chat_template_kwargs, response_format), pass.
    let ok = format!("{}1{}", "{\"a\":".repeat(32), "}".repeat(32));
    prepared(&joined(&base, &["--extra-body", &ok]));
}

/// vLLM's minimal command, `vllm bench serve --host H --port P --model M`: every
/// default is vLLM 0.34's (rate inf: all 1000 prompts at once; its random
/// dataset, 1024 in and 128 out, forced; no warmup; the block's ttft,tpot,itl).
#[test]
fn the_minimal_vllm_command_gets_vllms_defaults() {
    let p = prepared(&[
        "--dataset-name",
        "random",
        "--host",
        "10.1.2.3",
        "--port",
        "8123",
        "--model",
        "M",
        "--tokenizer",
        "tok.json",
    ]);
    let plan = &p.frozen.plan;
    assert_eq!(plan.arms[0].server, Server::External { url: "http://10.1.2.3:8123".into() });
    assert!(matches!(loads_of(&p)[..], [(ref n, Load::Closed { concurrency: 1000 }, 1000)] if n == "closed-c1000"));
    let PanelSource::VllmRandom(v) = &plan.prompts.source else { panic!("{:?}", plan.prompts.source) };
    assert_eq!((v.input_len, v.output_len, v.prefix_len, v.input_range_ratio), (1024, 128, 0, 0.0));
    assert_eq!((v.tokenizer.as_str(), plan.prompts.documents), ("tok.json", 1000));
    assert!(plan.request.forced() && plan.request.model == "M");
    assert_eq!((plan.warmup.prompts, plan.study.seed), (0, 0));
    let defaults = args(&["--model", "M"]);
    assert_eq!((defaults.port, defaults.host.as_str()), (None, "127.0.0.1"));
    assert_eq!(target_url(&defaults).as_deref(), Some("http://127.0.0.1:8000"));
    assert_eq!(target_url(&args(&["--host", "::1"])).as_deref(), Some("http://[::1]:8000"));
    // --base-url wins over --host and --port, as in vLLM.
    let b = prepared(&["--base-url", "http://h:1", "--port", "9", "--model", "M"]);
    assert_eq!(b.frozen.plan.arms[0].server, Server::External { url: "http://h:1".into() });
    // vLLM's random without a tokenizer says what to give (and names the harness's own).
    let e = error(&["--dataset-name", "random", "--model", "M"]);
    assert!(e.contains("--dataset-name random: needs --tokenizer") && e.contains("random-ids"), "{e}");
    // A directory means its tokenizer.json; --model naming such a directory is the default.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
    let dir = tmp.path().display().to_string();
    let p = prepared(&["--dataset-name", "random", "--model", &dir]);
    let PanelSource::VllmRandom(v) = &p.frozen.plan.prompts.source else { panic!() };
    assert_eq!(v.tokenizer, tmp.path().join("tokenizer.json").display().to_string());
    let p = prepared(&["--dataset-name", "random", "--model", "M", "--tokenizer", &dir]);
    let PanelSource::VllmRandom(v) = &p.frozen.plan.prompts.source else { panic!() };
    assert_eq!(v.tokenizer, tmp.path().join("tokenizer.json").display().to_string());
    // Per-side range ratios and vLLM's general --input-len/--output-len.
    let p = prepared(&[
        "--dataset-name",
        "random",
        "--model",
        "M",
        "--tokenizer",
        "t.json",
        "--input-len",
        "64",
        "--output-len",
        "8",
        "--random-range-ratio",
        r#"{"input": 0.25, "output": 0.5}"#,
        "--random-prefix-len",
        "4",
    ]);
    let PanelSource::VllmRandom(v) = &p.frozen.plan.prompts.source else { panic!() };
    assert_eq!((v.input_len, v.output_len, v.prefix_len), (64, 8, 4));
    assert_eq!((v.input_range_ratio, v.output_range_ratio), (0.25, 0.5));
}

fn loads_of(p: &BenchPlan) -> Vec<(String, Load, u64)> {
    let plan = &p.frozen.plan;
    plan.resolved_cells()
        .unwrap()
        .iter()
        .map(|c| (c.name.clone(), plan.cell(&c.name).unwrap().load.clone(), c.count))
        .collect()
}

/// Every flag of vLLM 0.34's `vllm bench serve` parser (serve.py and the dataset
/// parser, listed in harness/tests/reference/vllm_bench_serve_flags.txt from
/// vLLM's source) is either a flag of `harness bench` or refused with its reason,
/// and has its row in docs/bench.md.
#[test]
fn every_vllm_flag_is_taken_or_refused_and_documented() {
    use clap::CommandFactory;
    let flags = include_str!("../../../tests/reference/vllm_bench_serve_flags.txt");
    let cmd = Cli::command();
    let longs: Vec<String> = cmd.get_arguments().filter_map(|a| a.get_long().map(|l| format!("--{l}"))).collect();
    let docs = include_str!("../../../../docs/bench.md");
    let mut flags_seen = 0;
    for flag in flags.lines().map(str::trim).filter(|l| l.starts_with("--")) {
        flags_seen += 1;
        assert!(longs.iter().any(|l| l == flag), "{flag}: neither taken nor refused");
        assert!(docs.contains(&format!("`{flag}`")), "{flag}: no row in docs/bench.md");
    }
    assert_eq!(flags_seen, 101, "vLLM 0.34's parser has 101 flags");
    for r in refused::VLLM_REFUSED {
        let mut argv = vec!["--url", "http://127.0.0.1:9", "--model", "m", r.flag];
        if r.flag == "--profile" {
            argv.push("--request-rate");
            argv.push("1");
        }
        let e = error(&argv);
        assert_eq!(e, format!("{}: refused: {}", r.flag, r.why));
        // Refused before any request: no model is asked for.
        let a = args(&["--url", "http://127.0.0.1:9", r.flag, "x"]);
        assert!(discover_model(&a).unwrap_err().to_string().contains("refused"), "{}", r.flag);
    }
}

/// vLLM's dataset names that are not built are refused by the parser, each with
/// its reason; the harness's own keep their names.
#[test]
fn vllm_dataset_names_not_built_here_are_refused_with_the_reason() {
    let parse = |name: &str| Cli::try_parse_from(["bench", "--dataset-name", name]).err().map(|e| e.to_string());
    for (name, why) in [("hf", "offline"), ("sonnet", "no `sonnet`"), ("random-mm", "multimodal")] {
        let e = parse(name).unwrap_or_else(|| panic!("{name} accepted"));
        assert!(e.contains("refused") && e.contains(why), "{name}: {e}");
    }
    let built =
        ["random", "random-ids", "sharegpt", "custom", "synthetic", "requests", "burstgpt", "prefix_repetition"];
    for name in built {
        assert!(parse(name).is_none(), "{name}");
    }
}

/// vLLM's `custom` JSONL and the output-length overrides of sharegpt and custom.
#[test]
fn custom_and_the_output_length_overrides_map_onto_the_panel() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "t.json", "--request-rate", "2"];
    let with = |extra: &[&str]| prepared(&joined(&base, extra)).frozen.plan;
    let c = with(&["--dataset-name", "custom", "--dataset-path", "c.jsonl", "--skip-chat-template"]);
    assert!(matches!(&c.prompts.source, PanelSource::Requests { path, tokenizer: Some(_) } if path == "c.jsonl"));
    assert_eq!(c.prompts.output_len, Some(256), "vLLM's --custom-output-len default");
    let own = with(&[
        "--dataset-name",
        "custom",
        "--dataset-path",
        "c.jsonl",
        "--skip-chat-template",
        "--custom-output-len",
        "-1",
    ]);
    assert_eq!(own.prompts.output_len, None);
    let sg = with(&["--dataset-name", "sharegpt", "--dataset-path", "d.json", "--sharegpt-output-len", "50"]);
    assert_eq!(sg.prompts.output_len, Some(50));
    let sg = with(&["--dataset-name", "sharegpt", "--dataset-path", "d.json", "--output-len", "40"]);
    assert_eq!(sg.prompts.output_len, Some(40), "--output-len sets --sharegpt-output-len, as in vLLM");
    let e = error(&joined(&base, &["--dataset-name", "custom", "--dataset-path", "c.jsonl"]));
    assert!(e.contains("--skip-chat-template") && e.contains("openai-chat"), "{e}");
}

/// vLLM's burstgpt and prefix_repetition: their flags and defaults onto the
/// plan's vllm_burstgpt and vllm_prefix_repetition panels; outputs end naturally
/// unless --ignore-eos (vLLM sets ignore_eos for random only).
#[test]
fn burstgpt_and_prefix_repetition_map_onto_vllms_panels() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "t.json"];
    let with = |extra: &[&str]| prepared(&joined(&base, extra)).frozen.plan;
    let b = with(&["--dataset-name", "burstgpt", "--dataset-path", "b.csv", "--num-prompts", "7"]);
    let PanelSource::VllmBurstGpt(s) = &b.prompts.source else { panic!("{:?}", b.prompts.source) };
    assert_eq!((s.path.as_str(), s.tokenizer.as_str(), b.prompts.documents), ("b.csv", "t.json", 7));
    assert!(!b.request.forced());
    assert_eq!(b.request.max_tokens_for(Some(100_000)), 100_000, "each row's Response tokens, uncapped");
    let e = error(&joined(&base, &["--dataset-name", "burstgpt"]));
    assert!(e.contains("--dataset-name burstgpt: needs --dataset-path"), "{e}");
    let p = with(&["--dataset-name", "prefix_repetition", "--num-prompts", "20"]);
    let PanelSource::VllmPrefixRepetition(s) = &p.prompts.source else { panic!("{:?}", p.prompts.source) };
    assert_eq!((s.prefix_len, s.suffix_len, s.num_prefixes, s.output_len, s.shuffle), (256, 256, 10, 128, true));
    assert_eq!(p.prompts.documents, 20);
    assert!(!p.request.forced());
    assert_eq!(p.request.max_tokens_for(None), 128);
    let p = with(&[
        "--dataset-name",
        "prefix_repetition",
        "--num-prompts",
        "6",
        "--prefix-repetition-prefix-len",
        "5",
        "--prefix-repetition-suffix-len",
        "3",
        "--prefix-repetition-num-prefixes",
        "2",
        "--output-len",
        "9",
        "--disable-shuffle",
        "--ignore-eos",
    ]);
    let PanelSource::VllmPrefixRepetition(s) = &p.prompts.source else { panic!() };
    assert_eq!((s.prefix_len, s.suffix_len, s.num_prefixes, s.output_len, s.shuffle), (5, 3, 2, 9, false));
    assert!(p.request.forced());
    // vLLM would send only num_prefixes x floor(n / num_prefixes) prompts.
    let e = error(&joined(&base, &["--dataset-name", "prefix_repetition", "--num-prompts", "25"]));
    assert!(e.contains("not a multiple") && e.contains("only 20 prompts"), "{e}");
    let e = error(&joined(&base, &["--dataset-name", "prefix_repetition", "--dataset-path", "x"]));
    assert!(e.contains("reads no file"), "{e}");
}

/// vLLM's `--request-id-prefix`: the plan's `request.request_id_prefix`, so the
/// frozen plan states the ids sent; `harness bench` draws vLLM's default
/// (`bench-<8 hex>-`) once, before the plan is written; a bad prefix names the flag.
#[test]
fn the_request_id_prefix_is_a_plan_key_with_vllms_default_drawn_once() {
    let base = ["--url", "http://127.0.0.1:9", "--model", "m", "--request-rate", "2"];
    let p = prepared(&joined(&base, &["--request-id-prefix", "run7-"]));
    assert!(p.text.contains("\nrequest_id_prefix = \"run7-\"\n"), "{}", p.text);
    assert_eq!(p.frozen.plan.request.request_id(3).as_deref(), Some("run7-3"));
    // The other front doors fill `BenchArgs` without it: no header.
    assert_eq!(prepared(&base).frozen.plan.request.request_id_prefix, None);
    let drawn = with_vllm_request_ids(&args(&base));
    let prefix = drawn.request_id_prefix.clone().unwrap();
    let hex = prefix.strip_prefix("bench-").and_then(|r| r.strip_suffix('-')).unwrap_or_default();
    assert!(hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{prefix}");
    let p = prepare(&drawn, || 1, 0).unwrap();
    assert!(p.text.contains(&format!("request_id_prefix = \"{prefix}\"")), "{}", p.text);
    // Given, it is kept; an empty one is vLLM's too (ids "0", "1", ...).
    let kept = with_vllm_request_ids(&args(&joined(&base, &["--request-id-prefix", ""])));
    assert_eq!(kept.request_id_prefix.as_deref(), Some(""));
    let e = error(&joined(&base, &["--request-id-prefix", "caf\u{e9}-"]));
    assert!(e.starts_with("--request-id-prefix: printable ASCII"), "{e}");
}
