//! API fidelity against OpenAI and vLLM over real HTTP (issue 12): unsupported
//! fields are refused by name, `continuous_usage_stats` and cached prompt
//! tokens in usage, the sampled token in completions `top_logprobs`, 404/405
//! answers, vLLM's `/version`, `/tokenize`, `/detokenize`,
//! `/v1/models/{id}`, and out-of-range requests refused with 400 naming the
//! field and its limit.

use crate::common;

use common::server::Server;
use engine::synth::{SynthSpec, SynthTokenizer, write_model};
use serde_json::{Value, json};

fn synth() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, seed: 11, ..SynthSpec::default() };
    write_model(&spec, dir.path()).unwrap();
    dir
}

async fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(s.url(path)).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get(s: &Server, path: &str) -> (u16, Value) {
    let r = reqwest::get(s.url(path)).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn unsupported_fields_are_refused_by_name_and_their_off_values_accepted() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "1"]);
    let chat = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let tool = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    for (field, value) in [
        ("tools", tool),
        ("response_format", json!({"type": "json_object"})),
        ("logit_bias", json!({"5": 10})),
        ("frequency_penalty", json!(0.5)),
    ] {
        let (status, v) = post(&s, "/v1/chat/completions", chat(json!({ field: value }))).await;
        assert_eq!(status, 400, "{field}: {v}");
        assert_eq!(v["error"]["param"], field, "{v}");
    }
    let (status, v) = post(&s, "/v1/completions", json!({"prompt": "x", "max_tokens": 2, "suffix": "y"})).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("suffix")), "{v}");
    let off = json!({"tools": [], "response_format": {"type": "text"}, "frequency_penalty": 0, "user": "u1"});
    let (status, v) = post(&s, "/v1/chat/completions", chat(off)).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn continuous_usage_stats_and_cached_prompt_tokens() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2", "--enable-prefix-caching"]);
    let body = json!({"prompt": (0..48).map(|i| 3 + i * 5).collect::<Vec<u32>>(), "max_tokens": 5,
                      "temperature": 0, "ignore_eos": true});
    let (_, first) = post(&s, "/v1/completions", body.clone()).await;
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{first}");
    let (_, second) = post(&s, "/v1/completions", body.clone()).await;
    // Two full pages of 16 of the first 47 prompt tokens are cached.
    assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], 32, "{second}");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true, "continuous_usage_stats": true});
    let text = reqwest::Client::new().post(s.url("/v1/completions")).json(&streamed).send().await.unwrap();
    let text = text.text().await.unwrap();
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: Vec<&Value> = chunks.iter().filter(|c| !c["choices"].as_array().unwrap().is_empty()).collect();
    assert_eq!(content.len(), 5);
    for (i, c) in content.iter().enumerate() {
        assert_eq!(c["usage"]["completion_tokens"], i + 1, "usage on every chunk: {c}");
        assert_eq!(c["usage"]["prompt_tokens"], 48);
    }
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 5, "the final usage chunk stays");
}

#[tokio::test(flavor = "multi_thread")]
async fn completion_top_logprobs_include_the_sampled_token() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "1"]);
    // The synthetic model is sure of most tokens; its first token after "abc"
    // is close to a coin flip, so over a few seeds some sample the runner-up.
    let mut extra = 0;
    for seed in 0..16 {
        let body = json!({"prompt": "abc", "max_tokens": 4, "temperature": 2.0, "seed": seed, "logprobs": 1,
                          "ignore_eos": true});
        let (status, v) = post(&s, "/v1/completions", body).await;
        assert_eq!(status, 200, "{v}");
        let lp = &v["choices"][0]["logprobs"];
        let tokens = lp["tokens"].as_array().unwrap();
        let tops = lp["top_logprobs"].as_array().unwrap();
        for (t, top) in tokens.iter().zip(tops) {
            let top = top.as_object().unwrap();
            assert!(top.contains_key(t.as_str().unwrap()), "sampled {t} missing from {top:?}");
            extra += usize::from(top.len() == 2);
        }
    }
    assert!(extra > 0, "at temperature 2 some sampled token is not the most likely one");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_routes_404_wrong_methods_405_and_vllms_extra_routes() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "1", "--served-model-name", "synth"]);
    let (status, v) = get(&s, "/v2/nothing").await;
    assert_eq!(status, 404, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("/v2/nothing"), "{v}");
    let (status, v) = get(&s, "/v1/completions").await;
    assert_eq!(status, 405, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let (status, v) = get(&s, "/version").await;
    assert_eq!(status, 200);
    assert!(v["version"].is_string(), "{v}");
    let (status, v) = get(&s, "/v1/models/synth").await;
    assert_eq!((status, v["id"].as_str()), (200, Some("synth")), "{v}");
    let (status, v) = get(&s, "/v1/models/other").await;
    assert_eq!((status, v["error"]["code"].as_str()), (404, Some("model_not_found")), "{v}");

    let (status, v) = post(&s, "/tokenize", json!({"prompt": "hello", "add_special_tokens": false})).await;
    assert_eq!(status, 200, "{v}");
    let tokens = v["tokens"].clone();
    assert_eq!(v["count"].as_u64(), Some(tokens.as_array().unwrap().len() as u64));
    assert!(v["max_model_len"].as_u64().unwrap() > 0);
    let (_, d) = post(&s, "/detokenize", json!({"tokens": tokens})).await;
    assert_eq!(d["prompt"], "hello", "{d}");
    let (status, v) = post(&s, "/tokenize", json!({"messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["count"].as_u64().unwrap() > 0);
    let (status, v) = post(&s, "/tokenize", json!({"prompt": "x", "model": "other"})).await;
    assert_eq!(status, 404, "{v}");
}

/// Posts `body` as `content_type` (none when empty).
async fn post_as(s: &Server, path: &str, content_type: &str, body: &Value) -> (u16, Value) {
    let mut r = reqwest::Client::new().post(s.url(path)).body(body.to_string());
    if !content_type.is_empty() {
        r = r.header("content-type", content_type);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_range_requests_are_refused_with_400_naming_the_field_and_its_limit() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "1"]);
    let chat = |extra: Value| with(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}), extra);
    let cmpl = |extra: Value| with(json!({"prompt": "hi", "max_tokens": 1}), extra);
    let (c, t, j) = ("/v1/chat/completions", "/v1/completions", "application/json");
    let wizard = json!({"messages": [{"role": "wizard", "content": "hi"}]});
    let null_content = json!({"messages": [{"role": "user", "content": null}]});
    // (path, content type, body, the field the message names, words of the limit it states)
    let refused = [
        (c, j, chat(wizard.clone()), "messages[0].role", "system, user or assistant"),
        ("/tokenize", j, wizard, "messages[0].role", "system, user or assistant"),
        (c, j, chat(null_content), "messages[0].content", "a string or a list of text parts"),
        (c, j, chat(json!({"top_logprobs": 2})), "top_logprobs", "logprobs: true"),
        (c, j, chat(json!({"logprobs": true, "top_logprobs": 1000})), "top_logprobs", "at most 20"),
        (c, j, chat(json!({"top_k": -2})), "top_k", "-1 or 0 (no limit)"),
        (t, j, cmpl(json!({"top_k": -2})), "top_k", "-1 or 0 (no limit)"),
        (t, j, cmpl(json!({"stop_token_ids": [5, 1_000_000]})), "stop_token_ids", "vocabulary (size"),
        (t, "text/plain", cmpl(json!({})), "Content-Type", "application/json"),
        (c, "application/x-www-form-urlencoded", chat(json!({})), "Content-Type", "application/json"),
        (t, j, cmpl(json!({ "stop": vec!["x"; 10_000] })), "stop", "at most 64"),
        (t, j, cmpl(json!({ "stop": "y".repeat(1 << 20) })), "stop", "at most 1024 bytes"),
        (c, j, chat(json!({ "stop": ["ok", "z".repeat(1025)] })), "stop", "at most 1024 bytes"),
        (t, j, cmpl(json!({"temperature": 1e308})), "temperature", "[0, 2]"),
        (c, j, chat(json!({"temperature": 2.5})), "temperature", "[0, 2]"),
        (t, j, cmpl(json!({"min_p": 1.5})), "min_p", "[0, 1]"),
        (c, j, chat(json!({"min_p": -0.1})), "min_p", "[0, 1]"),
    ];
    // Every case is tried; the failures are listed together.
    let mut wrong = Vec::new();
    for (path, content_type, body, field, limit) in refused {
        let (status, v) = post_as(&s, path, content_type, &body).await;
        let shown: String = body.to_string().chars().take(100).collect();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        let param_ok = field == "Content-Type" || v["error"]["param"] == field;
        if status != 400
            || v["error"]["type"] != "invalid_request_error"
            || !(message.contains(field) && message.contains(limit) && param_ok)
        {
            let v: String = v.to_string().chars().take(200).collect();
            wrong.push(format!(
                "{path} {content_type} {shown}: want 400 naming {field} and {limit:?}, got {status} {v}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{} not refused as they should be:\n{}", wrong.len(), wrong.join("\n"));
    // The limits' own edges are accepted.
    let assistant_null = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null},
                                             {"role": "user", "content": "again"}]});
    let accepted = [
        (t, j, cmpl(json!({"top_k": -1}))),
        (t, j, cmpl(json!({"top_k": 0, "temperature": 2}))),
        (t, j, cmpl(json!({"min_p": 0.05, "top_p": 0.9, "top_k": 20, "temperature": 0.7}))),
        (t, j, cmpl(json!({ "stop": vec!["s".repeat(1024); 64] }))),
        (c, j, chat(json!({"logprobs": true, "top_logprobs": 2}))),
        (c, j, chat(assistant_null)),
        (t, "application/json; charset=utf-8", cmpl(json!({}))),
        (t, "", cmpl(json!({}))),
    ];
    for (path, content_type, body) in accepted {
        let (status, v) = post_as(&s, path, content_type, &body).await;
        let shown: String = body.to_string().chars().take(120).collect();
        assert_eq!(status, 200, "{path} {content_type} {shown}: {v}");
    }
}
