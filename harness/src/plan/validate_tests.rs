//! Table tests of plan validation: each malformed plan is the valid `BASE` with one
//! edit, and the test asserts on the message naming the key.

use super::*;

pub(super) const BASE: &str = r#"
[study]
name = "t"
seed = 7

[request]
model = "m"
output_tokens = 16

[prompts]
source = "random"
lengths = [64]
documents = 4
max_token_id = 255

[warmup]
prompts = 2

[timing]
settle_s = 1.0
request_timeout_s = 30
drain_timeout_s = 30

[blocks]
count = 2
arm_order = "alternate"
cell_order = "alternate"

[[arms]]
name = "cand"
role = "candidate"
argv = ["engine", "serve", "--port", "{port}"]
port = 18001

[[arms]]
name = "ctrl"
role = "control"
argv = ["engine", "serve", "--port", "{port}"]
port = 18002

[[cells]]
name = "closed"
kind = "confirmation"
load = "closed"
concurrency = 4
count = 16

[[cells]]
name = "open"
kind = "confirmation"
load = "open"
rate = 2.5
count = 16

[analysis]
alpha = 0.05

[[hypotheses]]
metric = "throughput_rps"
cell = "closed"
candidate = "cand"
control = "ctrl"
threshold = 0.01
"#;

pub(super) const DERIVE: &str = r#"
[derive]
pilot_rates = [16.6504, 16.8997]
near_fraction = 0.9
fractions = { low = 0.25, moderate = 0.55 }
count_floor = 512
count_duration_s = 45
count_multiple = 32
"#;

pub(super) fn edit(find: &str, replace: &str) -> String {
    assert!(BASE.contains(find), "BASE lacks {find:?}");
    BASE.replacen(find, replace, 1)
}

#[test]
fn base_plan_is_valid() {
    let plan = parse(BASE).unwrap();
    assert_eq!(plan.cells.len(), 2);
    assert_eq!(plan.hypotheses[0].name, "throughput_rps:closed:cand-vs-ctrl");
    assert_eq!(plan.warmup.input_tokens, Some(64));
    assert_eq!(plan.timing.request_timeout_s, 30.0);
    assert!(plan.request.ignore_eos);
    assert_eq!(plan.arms[0].health, "/health");
    assert_eq!(plan.arms[0].stop_grace_s, DEFAULT_STOP_GRACE_S);
    assert_eq!(plan.arms[0].stop_grace(), std::time::Duration::from_secs(30));
    let plan = parse(&edit("port = 18001", "port = 18001\nstop_grace_s = 2.5")).unwrap();
    assert_eq!(plan.arms[0].stop_grace(), std::time::Duration::from_millis(2500));
    let text = plan.render_check("0");
    assert!(text.contains("stop grace 2.5 s"), "{text}");
    assert_eq!(plan.client.cpus, None);
    assert_eq!(plan.arms[0].cpus, None);
    // CPU sets: sorted, named in the schedule; unpinned arms of a plan that pins its
    // client are started on every CPU, not on the client's.
    let pinned = edit("port = 18001", "port = 18001\ncpus = [3, 1, 2]") + "\n[client]\ncpus = [0]\n";
    let plan = parse(&pinned).unwrap();
    assert_eq!((plan.arms[0].cpus.as_deref(), plan.client.cpus.as_deref()), (Some(&[1, 2, 3][..]), Some(&[0][..])));
    let text = plan.render_check("0");
    assert!(
        text.contains("client pinned to CPUs 0 (client.cpus)") && text.contains("arm cand pinned to CPUs 1-3"),
        "{text}"
    );
    let dir = std::path::Path::new("/ev");
    assert_eq!(plan.arm_command(&plan.arms[0], 0, dir).unwrap().unwrap().cpus, Some(vec![1, 2, 3]));
    assert_eq!(plan.arm_command(&plan.arms[1], 0, dir).unwrap().unwrap().cpus.map(|c| c.len()), Some(1024));
    assert_eq!(
        plan.cpu_problems(&[0, 1]).iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        ["arms[0].cpus: CPU(s) 2-3 are not among the CPUs this harness may use here (0-1)"]
    );
    assert!(parse(BASE).unwrap().arm_command(&plan.arms[1], 0, dir).unwrap().unwrap().cpus.is_none());
}

#[test]
fn malformed_plans_are_rejected_with_named_keys() {
    let port1 = "\"{port}\"]\nport = 18001";
    let cases: Vec<(String, &str)> = vec![
        (
            edit("argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18002", "argv = []\nport = 18002"),
            "arms[1].argv: must be a non-empty array",
        ),
        (edit("rate = 2.5", "rate = -1.0"), "cells[1].rate: must be positive"),
        (edit("rate = 2.5", "rate = 0"), "cells[1].rate: must be positive"),
        (edit("rate = 2.5", "rate = 2.5\nmax_concurrency = 0"), "cells[1].max_concurrency: must be at least 1"),
        (
            edit("concurrency = 4", "concurrency = 4\nmax_concurrency = 2"),
            "cells[0].max_concurrency: only open, constant and trace cells take this key (load = \"closed\"",
        ),
        (edit("count = 16", "count = 16\nretries = 1"), "cells[0].retries: confirmation cells must have retries = 0"),
        (edit("seed = 7", "seed = 7\nsed = 8"), "unknown field `sed`"),
        (edit("concurrency = 4", "concurrency = 4\nconcurency = 4"), "unknown field `concurency`"),
        (edit("name = \"ctrl\"", "name = \"cand\""), "arms[1].name: duplicate arm name \"cand\" (also arms[0])"),
        (edit("name = \"open\"", "name = \"closed\""), "cells[1].name: duplicate cell name \"closed\" (also cells[0])"),
        (edit("cell = \"closed\"", "cell = \"nope\""), "hypotheses[0].cell: unknown cell \"nope\""),
        (edit("control = \"ctrl\"", "control = \"x\""), "hypotheses[0].control: unknown arm \"x\""),
        (
            edit("control = \"ctrl\"", "control = \"cand\""),
            "hypotheses[0]: candidate and control are the same arm \"cand\"",
        ),
        (
            edit("candidate = \"cand\"", "candidate = \"ctrl\""),
            "hypotheses[0].candidate: arm \"ctrl\" has role control, not candidate",
        ),
        (
            edit("metric = \"throughput_rps\"", "metric = \"engine_tpot\""),
            "hypotheses[0].metric: engine_tpot is measured from the server's receipts, and arm \"cand\" has no `receipts`",
        ),
        (edit("alpha = 0.05", "alpha = 1.5"), "analysis.alpha: must be in (0, 1), got 1.5"),
        (edit("alpha = 0.05", "alpha = 0.0"), "analysis.alpha: must be in (0, 1), got 0"),
        (edit("[analysis]\nalpha = 0.05\n", ""), "analysis.alpha: required when the plan states hypotheses"),
        (edit("threshold = 0.01", "threshold = 5.0"), "hypotheses[0].threshold: must be in [0, 1)"),
        (edit("metric = \"throughput_rps\"", "metric = \"tput\""), "unknown variant `tput`"),
        (
            edit("kind = \"confirmation\"", "kind = \"descriptive\""),
            "hypotheses[0].cell: \"closed\" is a descriptive cell",
        ),
        (edit(port1, "\"{port}\"]"), "arms[0].port: required for a server the harness starts"),
        (edit(port1, "\"{port}\"]\nport = 70000"), "arms[0].port: must be in 1..=65535, got 70000"),
        (edit(port1, "\"{prot}\"]\nport = 18001"), "arms[0].argv[3]: unknown placeholder {prot}"),
        (edit(port1, "\"{receipts}\"]\nport = 18001"), "arms[0].argv[3]: {receipts} needs the arm's `receipts` key"),
        (edit(port1, "\"{port}\"]\nport = 18001\nreceipts = \"{receipts}.x\""), "arms[0].receipts: {receipts} needs"),
        (
            edit(port1, "\"{port}\"]\nport = 18001\nenv = { X = \"{nope}\" }"),
            "arms[0].env.X: unknown placeholder {nope}",
        ),
        (edit(port1, "\"{port}\"]\nport = 18001\nurl = \"http://h:1\""), "arms[0]: set either argv"),
        (
            edit(port1, "\"{port}\"]\nport = 18001\nstop_grace_s = -1.0"),
            "arms[0].stop_grace_s: must be zero or positive and finite, got -1",
        ),
        (
            edit(
                "argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18002",
                "url = \"http://127.0.0.1:9\"\nstop_grace_s = 5",
            ),
            "arms[1].stop_grace_s: the harness never stops an external server",
        ),
        (
            edit(
                "argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18002",
                "url = \"http://127.0.0.1:9\"\ncpus = [0]",
            ),
            "arms[1].cpus: an external server runs where its owner started it",
        ),
        (
            edit(port1, "\"{port}\"]\nport = 18001\nhealth = \"health\""),
            "arms[0].health: \"health\" must be a path starting with /",
        ),
        (edit("role = \"candidate\"", "role = \"treatment\""), "unknown variant `treatment`"),
        (
            edit("concurrency = 4", "concurrency = 4\nrate = 3.0"),
            "cells[0].rate: only open-loop and constant cells take this key",
        ),
        (edit("concurrency = 4\n", ""), "cells[0].concurrency: required for a closed-loop cell"),
        (edit("concurrency = 4", "concurrency = 0"), "cells[0].concurrency: must be at least 1, got 0"),
        (edit("count = 16", "count = 0"), "cells[0].count: must be at least 1, got 0"),
        (
            edit("count = 16", "count = \"derived:cnt\""),
            "cells[0].count: \"derived:cnt\": use an integer or \"derived:count\"",
        ),
        (edit("count = 16", "count = \"derived:count\""), "cells[0].count: derived:count needs [derive]"),
        (
            edit("rate = 2.5", "rate = \"derived:near\""),
            "cells[1].rate: refers to \"derived:near\" but the plan has no [derive] table",
        ),
        (
            edit("rate = 2.5", "rate = \"derived:high\"") + DERIVE,
            "cells[1].rate: \"derived:high\" is not a derived load",
        ),
        (edit("rate = 2.5", "rate = 2.5\narrival = \"gamma\""), "cells[1].burstiness: required for gamma arrivals"),
        (
            edit("rate = 2.5", "rate = 2.5\nburstiness = 2.0"),
            "cells[1].burstiness: only gamma arrivals take a burstiness",
        ),
        (edit("rate = 2.5", "rate = 2.5\narrival = \"uniform\""), "cells[1].arrival: unknown arrival \"uniform\""),
        (edit("load = \"open\"", "load = \"burst\""), "cells[1].load: unknown load \"burst\""),
        (
            edit("count = 16", "count = 16\ninput_tokens = 100"),
            "cells[0].input_tokens: 100 is not one of prompts.lengths [64]",
        ),
        (edit("arm_order = \"alternate\"", "arm_order = \"zigzag\""), "blocks.arm_order: unknown scheme \"zigzag\""),
        (edit("cell_order = \"alternate\"", "cell_order = \"alternate\"\nrounds = 1001"), "blocks.rounds: "),
        (
            edit("cell_order = \"alternate\"", "cell_order = \"alternate\"\nrandomize_setup = true").replacen(
                "port = 18001\n",
                "port = 18001\nenv = { HARNESS_SETUP_PAD = \"x\" }\n",
                1,
            ),
            "set by the harness when blocks.randomize_setup is true",
        ),
        (edit("port = 18001\n", "port = 18001\ncpus = []\n"), "arms[0].cpus: an empty CPU set"),
        (edit("port = 18001\n", "port = 18001\ncpus = [1, 1]\n"), "arms[0].cpus: CPU 1 is listed twice"),
        (edit("port = 18001\n", "port = 18001\ncpus = [-1]\n"), "arms[0].cpus: must be in 0..=1023, got -1"),
        (
            edit("count = 2\narm_order", "count = 2\narm_order") + "\n[client]\ncpus = [1024]\n",
            "client.cpus: must be in 0..=1023",
        ),
        (
            edit("arm_order = \"alternate\"", "arm_order = [[\"cand\"]]"),
            "blocks.arm_order[0]: must list every arm exactly once",
        ),
        (edit("count = 2", "count = 0"), "blocks.count: the plan has confirmation cells but no confirmation blocks"),
        (
            edit("count = 2", "count = 2\ndescriptive = 1"),
            "blocks.descriptive: 1 descriptive blocks but no descriptive cell",
        ),
        (edit("seed = 7", "seed = -7"), "study.seed: must be in 0..="),
        (edit("name = \"t\"", "name = \"a/b\""), "study.name: \"a/b\" must match"),
        (edit("output_tokens = 16", "output_tokens = 0"), "request.output_tokens: must be at least 1"),
        (edit("documents = 4", "documents = 0"), "prompts.documents: must be at least 1"),
        (edit("lengths = [64]", "lengths = [64, 64]"), "prompts.lengths[1]: duplicate length 64"),
        (
            edit("max_token_id = 255", "max_token_id = 255\npath = \"x.jsonl\""),
            "prompts.path: only jsonl panels take this key",
        ),
        (
            edit("source = \"random\"", "source = \"text\"\ntexts = \"t\""),
            "prompts.max_token_id: only random panels take this key",
        ),
        (
            edit(
                "source = \"random\"\nlengths = [64]\ndocuments = 4\nmax_token_id = 255",
                "source = \"text\"\ntexts = \"t\"\nlengths = [64]\ndocuments = 4",
            ),
            "prompts.tokenizer: a text panel needs a tokenizer",
        ),
        (edit("source = \"random\"", "source = \"web\""), "prompts.source: unknown source \"web\""),
        (edit("settle_s = 1.0", "settle_s = -1.0"), "timing.settle_s: must be zero or positive"),
        (edit("request_timeout_s = 30", "request_timeout_s = 0"), "timing.request_timeout_s: must be positive"),
        (
            BASE.to_string() + DERIVE + "\n[derived]\nnear = 15.0\nlow = 3.7\nmoderate = 8.1\ncount = 768\n",
            "derived.near: 15.0 does not match the [derive] formula (14.9)",
        ),
        (BASE.to_string() + DERIVE + "\n[derived]\nnear = 14.9\nlow = 3.7\nmoderate = 8.1\n", "derived.count: missing"),
        (
            BASE.to_string()
                + DERIVE
                + "\n[derived]\nnear = 14.9\nlow = 3.7\nmoderate = 8.1\ncount = 768\nhigh = 1.0\n",
            "derived.high: not a load or count",
        ),
        (
            BASE.to_string() + DERIVE.replace("count_multiple = 32\n", "").as_str(),
            "derive.count_floor: count_floor, count_duration_s and count_multiple go together",
        ),
        (
            BASE.to_string() + DERIVE.replace("near_fraction = 0.9", "near_fraction = 1.5").as_str(),
            "derive.near_fraction: must be in (0, 1]",
        ),
        (
            BASE.to_string() + DERIVE.replace("low = 0.25", "near = 0.25").as_str(),
            "derive.fractions.near: `near` and `count` are reserved",
        ),
        (
            BASE.to_string() + DERIVE.replace("[16.6504, 16.8997]", "[16.6504, -1.0]").as_str(),
            "derive.pilot_rates[1]: must be positive",
        ),
    ];
    for (text, want) in cases {
        match parse(&text) {
            Ok(_) => panic!("accepted a plan that should fail with {want:?}"),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(want), "wanted {want:?} in:\n{msg}");
            }
        }
    }
}

#[test]
fn all_problems_are_reported_together() {
    let text = edit("rate = 2.5", "rate = -1.0").replace("alpha = 0.05", "alpha = 2.0");
    let err = parse(&text).unwrap_err();
    let keys: Vec<&str> = err.issues().iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["cells[1].rate", "analysis.alpha"]);
    // An invalid cell or arm is still known by name: no cascade of "unknown" errors.
    let text = edit("rate = 2.5", "rate = -1.0").replace("cell = \"closed\"", "cell = \"open\"");
    let text = text.replacen("port = 18001", "port = 0", 1);
    let err = parse(&text).unwrap_err();
    let keys: Vec<&str> = err.issues().iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["arms[0].port", "cells[1].rate"]);
}

#[test]
fn arm_access_keys_start_failures_and_the_error_rate_limit_are_validated() {
    let plan = parse(BASE).unwrap();
    assert_eq!((plan.arms[0].max_start_failures, plan.max_error_rate), (2, 0.0));
    assert!(plan.arms[0].api_key_env.is_none() && plan.arms[0].headers.is_empty());
    let keyed =
        "port = 18001\nmax_start_failures = 5\napi_key_env = \"OPENAI_API_KEY\"\nheaders = { X-Tenant = \"a\" }";
    let text = edit("port = 18001", keyed) + "\n[limits]\nmax_error_rate = 0.01\n";
    let plan = parse(&text).unwrap();
    assert_eq!((plan.arms[0].max_start_failures, plan.max_error_rate), (5, 0.01));
    assert_eq!(plan.arms[0].api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert_eq!(plan.arms[0].headers.get("X-Tenant").map(String::as_str), Some("a"));
    let cases: Vec<(String, &str)> = vec![
        (
            edit("port = 18001", "port = 18001\nmax_start_failures = 0"),
            "arms[0].max_start_failures: must be at least 1",
        ),
        (
            edit("port = 18001", "port = 18001\napi_key_env = \"sk-abc123\""),
            "arms[0].api_key_env: \"sk-abc123\" is not an environment variable name",
        ),
        (
            edit("port = 18001", "port = 18001\nheaders = { \"bad header\" = \"x\" }"),
            "arms[0].headers: \"bad header\" is not a valid HTTP header name",
        ),
        (
            edit("port = 18001", "port = 18001\napi_key_env = \"K\"\nheaders = { Authorization = \"Bearer x\" }"),
            "arms[0].headers.Authorization: set by api_key_env",
        ),
        (BASE.to_string() + "\n[limits]\nmax_error_rate = 1.5\n", "limits.max_error_rate: must be in 0..=1"),
        (BASE.to_string() + "\n[limits]\nmax_eror_rate = 0.1\n", "unknown field `max_eror_rate`"),
    ];
    for (text, want) in cases {
        let msg = parse(&text).map(|_| String::new()).unwrap_or_else(|e| e.to_string());
        assert!(msg.contains(want), "wanted {want:?} in:\n{msg}");
    }
}

#[test]
fn every_duration_and_rate_is_bounded_so_nothing_overflows_later() {
    // Each passed validation before and then panicked (a Duration of 1e20 s) or hung
    // (a trace whose offsets saturate at u64::MAX).
    let cases: Vec<(String, &str)> = vec![
        (edit("settle_s = 1.0", "settle_s = 1e20"), "timing.settle_s: must be at most 604800 s (7 days), got 1e20"),
        (edit("request_timeout_s = 30", "request_timeout_s = 1e20"), "timing.request_timeout_s: must be at most"),
        (edit("drain_timeout_s = 30", "drain_timeout_s = 1e308"), "timing.drain_timeout_s: must be at most"),
        (edit("port = 18001", "port = 18001\nstartup_timeout_s = 1e20"), "arms[0].startup_timeout_s: must be at most"),
        (edit("port = 18001", "port = 18001\nstop_grace_s = 1e19"), "arms[0].stop_grace_s: must be at most"),
        (edit("rate = 2.5", "rate = 1e-300"), "cells[1].rate: must be in 0.001..=1000000 requests/s, got 1e-300"),
        (edit("rate = 2.5", "rate = 1e9"), "cells[1].rate: must be in 0.001..=1000000"),
    ];
    for (text, want) in cases {
        let msg = parse(&text).map(|_| String::new()).unwrap_or_else(|e| e.to_string());
        assert!(msg.contains(want), "wanted {want:?} in:\n{msg}");
    }
    // The bounds themselves are accepted.
    let week = edit("request_timeout_s = 30", "request_timeout_s = 604800.0").replace("rate = 2.5", "rate = 0.001");
    parse(&week).unwrap();
}

#[test]
fn an_external_url_ending_in_v1_names_the_same_server() {
    // The OpenAI SDK habit: base_url = ".../v1". Health polls went to /v1/health.
    for url in ["http://127.0.0.1:9", "http://127.0.0.1:9/", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1/"] {
        let text =
            edit("argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18001", &format!("url = {url:?}"));
        let plan = parse(&text).unwrap();
        assert_eq!(plan.arms[0].base_url(), "http://127.0.0.1:9", "{url}");
    }
}

#[test]
fn two_arms_on_one_port_or_url_and_empty_lengths_on_a_dataset_panel_are_refused() {
    // Each passed `plan check` without a word.
    let cases: Vec<(String, &str)> = vec![
        (edit("port = 18002", "port = 18001"), "arms[1].port: 18001 is also arms[0]'s port"),
        (
            edit("argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18001", "url = \"http://h:1/v1\"")
                .replace(
                    "argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18002",
                    "url = \"http://h:1\"",
                ),
            "arms[1].url: http://h:1 is also arms[0]'s url",
        ),
        (
            edit(
                "source = \"random\"\nlengths = [64]\ndocuments = 4\nmax_token_id = 255",
                "source = \"requests\"\npath = \"r.jsonl\"\nlengths = []\nnum_requests = 4",
            ),
            "prompts.lengths: a dataset panel's entries have their own lengths",
        ),
    ];
    for (text, want) in cases {
        let msg = parse(&text).map(|_| String::new()).unwrap_or_else(|e| e.to_string());
        assert!(msg.contains(want), "wanted {want:?} in:\n{msg}");
    }
}

#[test]
fn vllm_variables_that_current_vllm_ignores_are_refused_with_the_flag_to_use() {
    // The FlashInfer control of a GPU plan set VLLM_ATTENTION_BACKEND: vLLM 0.34
    // ignores it and runs its default backend under the arm's name.
    let text = edit("port = 18002", "port = 18002\nenv = { VLLM_ATTENTION_BACKEND = \"FLASHINFER\" }");
    let msg = parse(&text).unwrap_err().to_string();
    assert!(msg.contains("arms[1].env.VLLM_ATTENTION_BACKEND: current vLLM (0.34) no longer reads"), "{msg}");
    assert!(msg.contains("--attention-backend NAME"), "{msg}");
    let text = edit("port = 18002", "port = 18002\nenv = { VLLM_FLASH_ATTN_VERSION = \"3\" }");
    let msg = parse(&text).unwrap_err().to_string();
    assert!(msg.contains("--attention-config.flash_attn_version=3"), "{msg}");
    parse(&edit("port = 18002", "port = 18002\nenv = { VLLM_USE_V1 = \"1\" }")).unwrap();
}

#[test]
fn a_sequential_section_is_validated_against_the_blocks_and_hypotheses() {
    let seq = |body: &str| edit("[analysis]", &format!("[sequential]\n{body}\n\n[analysis]"));
    let ok = parse(&seq("looks = [3, 5]\nmargin = 0.05").replacen("count = 2\n", "count = 5\n", 1)).expect("valid");
    let s = ok.sequential.expect("sequential");
    assert_eq!((s.looks, s.margin, s.alpha, s.beta), (vec![3, 5], 0.05, 0.05, 0.10));
    let cases = [
        (seq("looks = [3]"), "sequential.looks: the last look (Some(3)) must equal blocks.count (2), the cap"),
        (seq("looks = [2]"), "sequential.looks[0]: must be in 3..="),
        (
            seq("looks = [4, 3]").replacen("count = 2\n", "count = 3\n", 1),
            "sequential.looks: must be strictly increasing",
        ),
        (seq("looks = []"), "sequential.looks: at least one look"),
        (
            seq("looks = [3]\nmargin = 1.5").replacen("count = 2\n", "count = 3\n", 1),
            "sequential.margin: must be in (0, 1)",
        ),
        (
            seq("looks = [3]\nalpha = 0.5").replacen("count = 2\n", "count = 3\n", 1),
            "sequential.alpha: must be in (0, 0.5)",
        ),
        (
            seq("looks = [3]\nmargins = { nosuch = 0.1 }").replacen("count = 2\n", "count = 3\n", 1),
            "sequential.margins.nosuch: no hypothesis is named \"nosuch\"",
        ),
        (
            seq("looks = [3]\nmax_minutes = 0").replacen("count = 2\n", "count = 3\n", 1),
            "sequential.max_minutes: must be positive",
        ),
        (seq("looks = [3]\nrule = 1").replacen("count = 2\n", "count = 3\n", 1), "unknown field `rule`"),
    ];
    for (text, want) in cases {
        let msg = parse(&text).map(|_| String::new()).unwrap_or_else(|e| e.to_string());
        assert!(msg.contains(want), "wanted {want:?} in:\n{msg}");
    }
}

#[test]
fn arm_identity_claims_are_validated_and_kept() {
    let with = |identity: &str| edit("port = 18002", &format!("port = 18002\nidentity = {identity}"));
    let p = parse(&with(r#"{ preset = "engine", kv_format = "k16v8", cpu_path = "avx2", max_model_len = 256 }"#))
        .expect("valid");
    let id = p.arms[1].identity.clone().expect("identity kept");
    assert_eq!(id.preset, Some(IdentityPreset::Engine));
    assert_eq!(
        (id.kv_format.as_deref(), id.cpu_path.as_deref(), id.max_model_len),
        (Some("k16v8"), Some("avx2"), Some(256))
    );
    assert!(p.arms[0].identity.is_none());
    let cases = [
        (
            with(r#"{ preset = "tgi" }"#),
            "arms[1].identity.preset: \"tgi\" is not a preset; one of engine, vllm, sglang, llama-cpp",
        ),
        (
            with(r#"{ preset = "vllm", kv_format = "k16v8" }"#),
            "arms[1].identity.kv_format: is read from this engine's startup line",
        ),
        (
            with(r#"{ preset = "engine", kv_format = "fp8" }"#),
            "arms[1].identity.kv_format: \"fp8\" is not one of f16, bf16, k16v8",
        ),
        (with(r#"{ preset = "engine", weights = "q3_k" }"#), "arms[1].identity.weights: \"q3_k\" is not one of"),
        (with("{ max_model_len = 0 }"), "arms[1].identity.max_model_len: must be at least 1"),
        (with(r#"{ log_has = [""] }"#), "arms[1].identity.log_has[0]: must be one non-empty line"),
        (
            with(r#"{ metrics_have = ["vllm: x"] }"#),
            "arms[1].identity.metrics_have[0]: \"vllm: x\" is not a metric name",
        ),
        (with(r#"{ version = " " }"#), "arms[1].identity.version: must not be empty"),
        (with("{}"), "arms[1].identity: declares nothing"),
        (with(r#"{ preset = "vllm", attention = "x" }"#), "unknown field `attention`"),
    ];
    // An external server's log is never read: its claims are what it answers.
    let url =
        edit("argv = [\"engine\", \"serve\", \"--port\", \"{port}\"]\nport = 18001", "url = \"http://127.0.0.1:9\"");
    let url =
        url.replacen("name = \"cand\"", "name = \"cand\"\nidentity = { preset = \"engine\", kv_format = \"f16\" }", 1);
    let msg = parse(&url).unwrap_err().to_string();
    assert!(msg.contains("arms[0].identity.kv_format: is read from the server's log"), "{msg}");
    let ok = url.replace(", kv_format = \"f16\"", ", served_model = \"m\"");
    assert!(parse(&ok).unwrap().arms[0].identity.is_some());
    for (text, want) in cases {
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains(want), "want {want:?} in:\n{msg}");
    }
}

#[test]
fn a_cell_may_leave_out_token_ids_except_on_a_session_panel() {
    let text = edit("[[cells]]\nname = \"closed\"", "[[cells]]\nname = \"closed\"\ntoken_ids = false");
    let p = parse(&text).expect("valid");
    let kinds = p.body_kinds();
    assert_eq!(kinds.iter().map(|k| k.key()).collect::<Vec<_>>(), ["completions", "completions-no-token-ids"]);
    assert!(!p.body_kind_of("closed").token_ids && p.body_kind_of("open").token_ids);
}

#[test]
fn an_open_cell_may_cap_its_requests_in_flight() {
    let p = parse(&edit("rate = 2.5", "rate = 2.5\nmax_concurrency = 3")).unwrap();
    assert_eq!(p.cells[1].max_concurrency, Some(3));
    assert_eq!(p.cells[0].max_concurrency, None);
    let r = p.resolved_cells().unwrap();
    assert_eq!((r[1].in_flight_cap(), r[0].in_flight_cap()), (Some(3), Some(4)));
    assert!(p.render_check("x").contains("at most 3 in flight"), "{}", p.render_check("x"));
}
