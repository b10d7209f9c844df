//! The server over real HTTP, against the `engine` binary: streaming framing,
//! forced lengths, isolation under batching, preemption, long-then-short
//! scheduling, requests sent together prefilled together, disconnects, bad
//! input, API keys (from the command line or the environment, never logged),
//! k16v8 inventory, SIGTERM.

use crate::common;

use common::server::Server;
use engine::synth::{SynthSpec, SynthTokenizer, write_model};
use serde_json::{Value, json};
use std::path::Path;

fn synth() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, seed: 11, ..SynthSpec::default() };
    write_model(&spec, dir.path()).unwrap();
    dir
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = client().post(s.url(path)).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// SSE `data:` payloads of a whole stream, in order.
async fn stream(s: &Server, path: &str, body: Value) -> Vec<String> {
    let text = client().post(s.url(path)).json(&body).send().await.unwrap().text().await.unwrap();
    text.split("\n\n").filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")).map(String::from)).collect()
}

async fn metric(s: &Server, name: &str) -> f64 {
    let text = client().get(s.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| {
            l.starts_with(name)
                && (l.as_bytes().get(name.len()) == Some(&b'{') || l.as_bytes().get(name.len()) == Some(&b' '))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found in:\n{text}"))
}

fn greedy(prompt: Value, max_tokens: usize) -> Value {
    json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true, "return_token_ids": true})
}

fn token_ids(v: &Value) -> Vec<u64> {
    v["choices"][0]["token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn prompt_ids(n: usize, salt: u64) -> Value {
    json!((0..n as u64).map(|i| 3 + (i * 31 + salt * 17) % 250).collect::<Vec<_>>())
}

#[tokio::test(flavor = "multi_thread")]
async fn streaming_framing_for_chat_and_completions() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2"]);
    let events = stream(
        &s,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6, "temperature": 0,
               "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant", "role marker first");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    let content: Vec<&Value> = chunks[1..chunks.len() - 1].iter().collect();
    assert_eq!(content.len(), 6, "one token per event");
    assert!(content[..5].iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
    assert_eq!(content[5]["choices"][0]["finish_reason"], "length", "finish_reason on the last content chunk");

    let events = stream(&s, "/v1/completions", json!({"prompt": "abc", "max_tokens": 3, "temperature": 0, "ignore_eos": true, "stream": true, "return_token_ids": true})).await;
    assert_eq!(events.len(), 4);
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["object"], "text_completion");
    assert!(first["choices"][0]["prompt_token_ids"].is_array(), "prompt ids in the first chunk");
    assert_eq!(first["choices"][0]["token_ids"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn forced_lengths_and_usage() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2"]);
    for p in [json!("a short prompt"), prompt_ids(40, 1)] {
        let (status, v) = post(&s, "/v1/completions", greedy(p, 32)).await;
        assert_eq!(status, 200, "{v}");
        let u = &v["usage"];
        assert_eq!(u["completion_tokens"], 32);
        assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap() + 32));
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(token_ids(&v).len(), 32);
    }
    // A list of prompts gives one choice per prompt.
    let (_, v) = post(&s, "/v1/completions", greedy(json!([prompt_ids(5, 1), prompt_ids(9, 2)]), 4)).await;
    assert_eq!(v["choices"].as_array().unwrap().len(), 2);
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(v["usage"]["prompt_tokens"], 14);
}

/// Solo outputs, then the same prompts 8 at a time.
async fn isolation(s: &Server, n_prompt: usize, n_out: usize) {
    let prompts: Vec<Value> = (0..8).map(|i| prompt_ids(n_prompt + i * 3, i as u64)).collect();
    let mut solo = Vec::new();
    for p in &prompts {
        let (_, v) = post(s, "/v1/completions", greedy(p.clone(), n_out)).await;
        solo.push(token_ids(&v));
    }
    let futs = prompts.iter().map(|p| post(s, "/v1/completions", greedy(p.clone(), n_out)));
    let together = futures_util::future::join_all(futs).await;
    for (i, (_, v)) in together.iter().enumerate() {
        assert_eq!(token_ids(v), solo[i], "request {i}: batched output differs from solo");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_get_their_solo_tokens() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2"]);
    isolation(&s, 20, 24).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_get_their_solo_tokens_on_the_real_model() {
    let s = Server::start(&common::smollm2(), &["--threads", "2", "--kv-budget", "64MiB"]);
    isolation(&s, 12, 12).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn preemption_keeps_outputs_equal_to_solo() {
    let dir = synth();
    let receipts = dir.path().join("receipts.jsonl");
    // 4 layers x 2 KV heads x 64 dims x 4 bytes = 2 KiB per token: 96 KiB = 48 tokens
    // of room per... 3 pages. Eight 20-token prompts growing by 24 cannot all fit.
    let s = Server::start(
        dir.path(),
        &["--threads", "2", "--kv-budget", "320KiB", "--receipts", receipts.to_str().unwrap()],
    );
    isolation(&s, 20, 24).await;
    let preemptions = metric(&s, "vllm:num_preemptions_total").await;
    assert!(preemptions > 0.0, "the KV budget was meant to force preemptions");
    let text = std::fs::read_to_string(&receipts).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let preempted: usize = lines.iter().map(|l| l["preempted"].as_array().unwrap().len()).sum();
    let resumed: usize = lines.iter().map(|l| l["resumed"].as_array().unwrap().len()).sum();
    assert_eq!(preempted as f64, preemptions, "receipts and the counter agree");
    assert_eq!(resumed, preempted, "every preempted request resumed");
    for l in &lines {
        let resumed_ids = l["resumed"].as_array().unwrap();
        let admitted_ids = l["admitted"].as_array().unwrap();
        assert!(resumed_ids.iter().all(|r| !admitted_ids.contains(r)));
        if !l["preempted"].as_array().unwrap().is_empty() {
            assert!(admitted_ids.is_empty() && resumed_ids.is_empty(), "no admissions in a preempting step");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn short_request_finishes_before_long_prefill() {
    let dir = synth();
    let s = Server::start(
        dir.path(),
        &[
            "--threads",
            "2",
            "--enable-chunked-prefill",
            "--max-num-batched-tokens",
            "64",
            "--debug-step-delay-us",
            "20000",
        ],
    );
    let long = async {
        let r = post(&s, "/v1/completions", greedy(prompt_ids(2000, 3), 4)).await;
        (r, std::time::Instant::now())
    };
    let short = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let r = post(&s, "/v1/completions", greedy(prompt_ids(8, 4), 4)).await;
        (r, std::time::Instant::now())
    };
    let (((ls, lv), long_done), ((ss, sv), short_done)) = tokio::join!(long, short);
    assert_eq!((ls, ss), (200, 200), "{lv} {sv}");
    assert!(short_done < long_done, "the short request must finish while the long prompt is still in prefill");
}

/// Counts of fresh admissions per admitting step, from a receipts file.
fn admissions_per_step(receipts: &Path) -> Vec<usize> {
    let text = std::fs::read_to_string(receipts).unwrap();
    let steps = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
    steps.map(|s| s["admitted"].as_array().unwrap().len()).filter(|&n| n > 0).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_sent_together_to_an_idle_server_share_one_prefill_step() {
    let dir = synth();
    let receipts = dir.path().join("receipts.jsonl");
    // Wait up to the whole expected prefill (at most 20 ms) for more requests.
    let args = ["--threads", "2", "--idle-gather-factor", "1", "--receipts", receipts.to_str().unwrap()];
    let s = Server::start(dir.path(), &args);
    // One request first: the wait scales with the measured prefill time.
    post(&s, "/v1/completions", greedy(prompt_ids(200, 1), 2)).await;
    let first = post(&s, "/v1/completions", greedy(prompt_ids(200, 2), 3));
    let second = async {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        post(&s, "/v1/completions", greedy(prompt_ids(200, 3), 3)).await
    };
    let ((a, _), (b, _)) = tokio::join!(first, second);
    assert_eq!((a, b), (200, 200));
    drop(s);
    // (With `--idle-gather-factor 0` this gave [1, 1, 1] five times in five
    // here: the first request's step starts at once, and the second, 2 ms later,
    // cannot join a step in flight.)
    assert_eq!(admissions_per_step(&receipts), [1, 2], "the pair shares one prefill step");
}

#[tokio::test(flavor = "multi_thread")]
async fn disconnected_clients_free_their_requests() {
    use futures_util::StreamExt;
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2"]);
    let one = |i: u64| {
        let url = s.url("/v1/completions");
        async move {
            let body = json!({"prompt": prompt_ids(10, i), "max_tokens": 500, "temperature": 0, "ignore_eos": true, "stream": true});
            let resp = client().post(url).json(&body).send().await.unwrap();
            let mut bytes = resp.bytes_stream();
            let mut seen = 0;
            let mut buf = String::new();
            while let Some(chunk) = bytes.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
                seen = buf.matches("\n\n").count();
                if seen >= 2 {
                    break;
                }
            }
            seen
            // dropping the stream closes the connection
        }
    };
    let seen = futures_util::future::join_all((0..200).map(one)).await;
    assert!(seen.iter().all(|&n| n >= 2));
    let (status, v) = post(&s, "/v1/completions", greedy(prompt_ids(10, 999), 16)).await;
    assert_eq!(status, 200);
    assert_eq!(v["usage"]["completion_tokens"], 16);
    let t0 = std::time::Instant::now();
    loop {
        let (run, wait, kv) = (
            metric(&s, "vllm:num_requests_running").await,
            metric(&s, "vllm:num_requests_waiting").await,
            metric(&s, "vllm:kv_cache_usage_perc").await,
        );
        if run == 0.0 && wait == 0.0 && kv == 0.0 {
            break;
        }
        assert!(t0.elapsed().as_secs() < 30, "still running {run}, waiting {wait}, kv usage {kv}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_openai_errors_and_the_server_keeps_serving() {
    let dir = synth();
    let s = Server::start(
        dir.path(),
        &["--threads", "2", "--max-model-len", "256", "--max-body", "64KiB", "--served-model-name", "synth"],
    );
    let raw = |body: &'static str| {
        let url = s.url("/v1/completions");
        async move {
            let r = client().post(url).header("content-type", "application/json").body(body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let cases: Vec<(u16, Value, &str)> = vec![
        (400, json!({"prompt": "x", "max_tokens": 0}), "max_tokens"),
        (400, json!({"prompt": "x", "max_tokens": "many"}), "max_tokens"),
        (400, json!({"max_tokens": 4}), "prompt"),
        (400, json!({"prompt": prompt_ids(250, 1), "max_tokens": 10}), "maximum context length"),
        (404, json!({"prompt": "x", "model": "gpt-9"}), "gpt-9"),
        (400, json!({"prompt": [1, 2, 99999], "max_tokens": 2}), "outside the vocabulary"),
        (400, json!({"prompt": (0..300).map(|_| json!([1])).collect::<Vec<_>>(), "max_tokens": 1}), "at most"),
        (400, json!({"prompt": "x", "temperature": -1}), "temperature"),
        (400, json!({"prompt": "x", "n": 3}), "n = 1"),
    ];
    for (want, body, needle) in cases {
        let (status, v) = post(&s, "/v1/completions", body.clone()).await;
        assert_eq!(status, want, "{body} -> {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{body}: message {msg:?} should mention {needle:?}");
        assert!(v["error"]["type"].is_string());
    }
    let (status, v) = raw("{not json").await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("malformed JSON"));
    let big = "x".repeat(70 * 1024);
    let r = client().post(s.url("/v1/completions")).json(&json!({"prompt": big})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let (status, v) = post(&s, "/v1/chat/completions", json!({"messages": [], "max_tokens": 2})).await;
    assert_eq!(status, 400, "{v}");
    // Still serving.
    let h = client().get(s.url("/health")).send().await.unwrap();
    assert_eq!(h.status().as_u16(), 200);
    let (status, v) = post(&s, "/v1/completions", json!({"prompt": "ok", "max_tokens": 3, "model": "synth"})).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_that_can_never_fit_is_refused() {
    let dir = synth();
    // 2 KiB per token slot: 64 KiB = 32 slots (2 pages).
    let s = Server::start(dir.path(), &["--threads", "1", "--kv-budget", "64KiB"]);
    let (status, v) = post(&s, "/v1/completions", greedy(prompt_ids(20, 1), 20)).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("whole cache holds 32"), "{v}");
    let (status, _) = post(&s, "/v1/completions", greedy(prompt_ids(10, 1), 10)).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn api_key_guards_the_api_but_not_health() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--api-key", "sekret"]);
    let r =
        client().post(s.url("/v1/completions")).json(&json!({"prompt": "a", "max_tokens": 1})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = client().get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = client()
        .post(s.url("/v1/completions"))
        .bearer_auth("sekret")
        .json(&json!({"prompt": "a", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_key_from_the_environment_guards_the_api_and_stays_out_of_the_log() {
    let dir = synth();
    let key = "env-sekret-4f2a9c";
    let log = dir.path().join("serve.log");
    // --api-key-env names the variable; with no flag, vLLM's VLLM_API_KEY.
    let starts: [(&[&str], (&str, &str)); 2] =
        [(&["--api-key-env", "ENGINE_TEST_API_KEY"], ("ENGINE_TEST_API_KEY", key)), (&[], ("VLLM_API_KEY", key))];
    for (args, var) in starts {
        let mut s = Server::start_logged(dir.path(), args, &[var], &log);
        let body = json!({"prompt": "a", "max_tokens": 1});
        let post = |auth: Option<&str>| {
            let mut r = client().post(s.url("/v1/completions")).json(&body);
            if let Some(k) = auth {
                r = r.bearer_auth(k);
            }
            async move { r.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(post(None).await, 401, "{args:?}: no key");
        assert_eq!(post(Some("env-sekret-4f2a9d")).await, 401, "{args:?}: a wrong key");
        assert_eq!(post(Some(key)).await, 200, "{args:?}: the key");
        s.terminate();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("requires the API key from") && text.contains(var.0), "{args:?}: {text}");
        assert!(!text.contains(key), "{args:?}: the key is in the log:\n{text}");
    }
}

fn calibrate(model: &Path, out: &Path) {
    let text = common::asset("texts/macbeth_gut.txt");
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_engine"))
        .args([
            "calibrate",
            "--model",
            model.to_str().unwrap(),
            "--text",
            text.to_str().unwrap(),
            "--max-tokens",
            "512",
            "--out",
            out.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn k16v8_uses_calibrated_scales_and_stores_a_quarter_less() {
    let dir = synth();
    let scales = dir.path().join("scales.json");
    calibrate(dir.path(), &scales);
    let inventory = |args: &[&str]| {
        let mut s = Server::start(dir.path(), args);
        use std::io::BufRead;
        let out = s.child.stdout.take().unwrap();
        let line = std::io::BufReader::new(out).lines().next().unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        (s, v)
    };
    let (_a, f16) = inventory(&["--kv-budget", "1MiB"]);
    let (b, k16v8) =
        inventory(&["--kv-budget", "1MiB", "--kv-format", "k16v8", "--kv-scales", scales.to_str().unwrap()]);
    assert_eq!(f16["event"], "kv_inventory");
    // The synthetic checkpoint is BF16: its 4 layers' 7 linears and the tied head stay 16-bit.
    assert_eq!(f16["weights"], serde_json::json!({"bf16": 29}), "{f16}");
    // The kernels the harness's identity checks read: the best CPU path here and the
    // activation-quantized matmul mode, unless the environment overrides them.
    let k = engine::kernels::Kernels::from_env().unwrap();
    let want = (Some(k.path().name()), Some(k.quant_matmul().name()));
    assert_eq!((f16["cpu_path"].as_str(), f16["quant_matmul"].as_str()), want, "{f16}");
    let (_c, scalar) = inventory(&["--kv-budget", "1MiB", "--cpu-path", "scalar", "--exact-quant-matmul"]);
    assert_eq!((scalar["cpu_path"].as_str(), scalar["quant_matmul"].as_str()), (Some("scalar"), Some("exact")));
    let (fb, kb) = (f16["kv"]["bytes_per_token"].as_u64().unwrap(), k16v8["kv"]["bytes_per_token"].as_u64().unwrap());
    assert_eq!(kb * 4, fb * 3, "k16v8 payload per token must be 75% of f16");
    assert_eq!(k16v8["kv"]["format"], "k16v8");
    let scale_count = serde_json::from_str::<Value>(&std::fs::read_to_string(&scales).unwrap()).unwrap()["scales"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(scale_count, 4);
    let (status, v) = post(&b, "/v1/completions", greedy(prompt_ids(20, 2), 8)).await;
    assert_eq!(status, 200, "{v}");
    // A scale file with a bad value is refused at startup with a clear message.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"scales": [1.0, 0.0, 1.0, 1.0]}"#).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_engine"))
        .args([
            "serve",
            "--model",
            dir.path().to_str().unwrap(),
            "--kv-format",
            "k16v8",
            "--kv-scales",
            bad.to_str().unwrap(),
            "--port",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("layer 1"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_zero() {
    let dir = synth();
    let mut s = Server::start(dir.path(), &[]);
    let (status, _) = post(&s, "/v1/completions", greedy(prompt_ids(5, 1), 2)).await;
    assert_eq!(status, 200);
    let st = s.terminate();
    assert_eq!(st.code(), Some(0), "{st}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prefix_caching_reuses_pages_without_changing_outputs() {
    let dir = synth();
    let plain = Server::start(dir.path(), &["--threads", "2"]);
    let cached = Server::start(dir.path(), &["--threads", "2", "--enable-prefix-caching"]);
    let base = prompt_ids(48, 5);
    let mut variant = base.as_array().unwrap()[..40].to_vec();
    variant.extend([json!(7), json!(8), json!(9)]);
    for p in [base.clone(), base.clone(), json!(variant)] {
        let (_, want) = post(&plain, "/v1/completions", greedy(p.clone(), 12)).await;
        let (_, got) = post(&cached, "/v1/completions", greedy(p, 12)).await;
        assert_eq!(token_ids(&got), token_ids(&want), "prefix caching changed the output");
    }
    let hits = metric(&cached, "vllm:prefix_cache_hits_total").await;
    // Second identical prompt: 2 full pages of its first 47 tokens; variant: 2 pages (first 40 shared).
    assert_eq!(hits, 64.0, "cached prompt tokens");
    assert_eq!(metric(&plain, "vllm:prefix_cache_hits_total").await, 0.0);
}

/// GET /metrics answers in the format the scraper asks for, as Prometheus client
/// libraries negotiate it, and prometheus_client's own parsers read each with the
/// same families, types and values (engine/tests/reference/metrics_check.py).
#[tokio::test(flavor = "multi_thread")]
async fn metrics_negotiate_openmetrics_or_the_prometheus_text_format() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2"]);
    let (status, _) = post(&s, "/v1/completions", greedy(prompt_ids(8, 1), 3)).await;
    assert_eq!(status, 200);
    let get = |accept: Option<&'static str>| {
        let mut r = client().get(s.url("/metrics"));
        if let Some(a) = accept {
            r = r.header("accept", a);
        }
        async move {
            let r = r.send().await.unwrap();
            let kind = r.headers()["content-type"].to_str().unwrap().to_string();
            (kind, r.text().await.unwrap())
        }
    };
    // The response can end before the scheduler has retired the request (its
    // gauges then still count it): wait until no request is running.
    let idle = |text: &str| text.lines().any(|l| l.starts_with("vllm:num_requests_running{") && l.ends_with("} 0"));
    let (mut kind, mut text) = get(None).await;
    for _ in 0..200 {
        if idle(&text) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        (kind, text) = get(None).await;
    }
    assert!(idle(&text), "a request still runs long after its response ended:\n{text}");
    // curl and prometheus_client's text parser: no Accept, or text/plain 0.0.4.
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!text.contains("# EOF") && text.contains("# TYPE vllm:request_success_total counter"), "{text}");
    assert_eq!(get(Some("text/plain;version=0.0.4")).await, (kind.clone(), text.clone()));
    // A Prometheus server's Accept header names OpenMetrics first.
    let prometheus_server = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;\
                             q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (om_kind, om) = get(Some(prometheus_server)).await;
    assert_eq!(om_kind, "application/openmetrics-text; version=1.0.0; charset=utf-8");
    assert!(om.trim_end().ends_with("# EOF") && om.contains("# TYPE vllm:request_success counter"), "{om}");

    let tmp = tempfile::tempdir().unwrap();
    let (p, o) = (tmp.path().join("prometheus.txt"), tmp.path().join("openmetrics.txt"));
    std::fs::write(&p, &text).unwrap();
    std::fs::write(&o, &om).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/metrics_check.py");
    let run = std::process::Command::new("python3").arg(&script).arg(&p).arg(&o).output().expect("python3");
    assert!(
        run.status.success(),
        "prometheus_client parsers (pip install -r engine/tests/reference/requirements.txt):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let v: Value = serde_json::from_slice(&run.stdout).unwrap();
    let (prom, open) = (v["prometheus"].as_object().unwrap(), v["openmetrics"].as_object().unwrap());
    // The 0.0.4 parser names a counter family without `_total`, as the OpenMetrics one does.
    assert_eq!(prom.keys().collect::<Vec<_>>(), open.keys().collect::<Vec<_>>(), "{v}");
    for (name, f) in prom {
        assert_ne!(f[0], "unknown", "{name}: {f}");
        assert_eq!(f[0], open[name][0], "{name}");
        assert_eq!(f[1], open[name][1], "{name}: the same samples and values");
    }
    assert_eq!(prom["vllm:request_success"][0], "counter");
    let success = prom["vllm:request_success"][1].as_object().unwrap();
    let length: Vec<_> = success.iter().filter(|(k, _)| k.contains("finished_reason=length")).collect();
    assert!(matches!(length[..], [(k, v)] if k.starts_with("vllm:request_success_total{") && v == 1.0), "{success:?}");
    assert_eq!(prom["vllm:time_to_first_token_seconds"][0], "histogram");
}
