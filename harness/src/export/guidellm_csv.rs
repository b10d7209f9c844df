//! guidellm 0.8.1's `benchmarks.csv` (`GenerativeBenchmarkerCSV`,
//! guidellm/benchmark/outputs/csv.py) written from our guidellm report (the JSON
//! document `guidellm_report` builds): its three header rows (group, field,
//! unit/statistic), one row per benchmark, columns in its order and left out by its
//! rules (a status whose `total_sum` is 0, a modality without data, a metric that is
//! null), values as Python prints them (`export::pyfmt`). Owns the column layout
//! only; every number is the report's.
//!
//! Differs from guidellm's own writer in two documented cells: the timestamps are
//! UTC (guidellm formats them in the machine's local zone), and `Runtime Info /
//! Arguments` is the report's `config` as written (guidellm dumps its config model
//! with every default filled in, including its default output paths under the
//! working directory).

use serde_json::{Map, Value};

use super::pyfmt;

/// guidellm's modalities and their metrics (`MODALITY_METRICS`; its CSV and HTML
/// writers both walk them).
pub(super) const MODALITIES: &[(&str, &[(&str, &str)])] = &[
    ("text", &[("tokens", "Tokens"), ("words", "Words"), ("characters", "Characters")]),
    ("image", &[("tokens", "Tokens"), ("images", "Images"), ("pixels", "Pixels"), ("bytes", "Bytes")]),
    ("video", &[("tokens", "Tokens"), ("frames", "Frames"), ("seconds", "Seconds"), ("bytes", "Bytes")]),
    ("audio", &[("tokens", "Tokens"), ("samples", "Samples"), ("seconds", "Seconds"), ("bytes", "Bytes")]),
    ("tool_call", &[("tokens", "Tokens"), ("mixed_tokens", "Mixed Tokens"), ("count", "Count")]),
];

const STATUSES: [&str; 3] = ["successful", "incomplete", "errored"];

/// One benchmark's columns: (group, field, unit) and the cell's text.
#[derive(Default)]
struct Row {
    cols: Vec<([String; 3], String)>,
}

fn f(v: &Value) -> String {
    pyfmt::float(v.as_f64().unwrap_or(0.0))
}

fn int(v: &Value) -> String {
    v.as_i64().map_or_else(|| f(v), |i| i.to_string())
}

/// `str(value)` of a field typed `Any` (int, float, string).
fn any(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => pyfmt::number(n),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        other => pyfmt::dumps(other),
    }
}

impl Row {
    fn add(&mut self, group: &str, field: &str, unit: &str, value: String) {
        self.cols.push(([group.into(), field.into(), unit.into()], value));
    }

    /// `_add_distribution_stats`.
    fn dist(&mut self, d: &Value, group: &str, units: &str, status: Option<&str>) {
        let prefix = status.map(|s| format!("{}{} ", s[..1].to_uppercase(), &s[1..])).unwrap_or_default();
        let field = format!("{prefix}{units}");
        self.add(group, &field, "Mean", f(&d["mean"]));
        self.add(group, &field, "Median", f(&d["median"]));
        self.add(group, &field, "Std Dev", f(&d["std_dev"]));
        let p = &d["percentiles"];
        let list: Vec<String> = [&d["min"], &p["p001"], &p["p01"], &p["p05"], &p["p10"], &p["p25"]]
            .into_iter()
            .chain([&p["p75"], &p["p90"], &p["p95"], &p["p99"], &d["max"]])
            .map(f)
            .collect();
        self.add(group, &field, "Percentiles", format!("[{}]", list.join(", ")));
    }

    /// `_add_stats_for_metric` of a status distribution (statuses with data).
    fn stats(&mut self, m: &Value, group: &str, units: &str) {
        for s in STATUSES {
            let d = &m[s];
            if d.is_object() && d["total_sum"].as_f64().unwrap_or(0.0) != 0.0 {
                self.dist(d, group, units, Some(s));
            }
        }
    }
}

/// A `DistributionSummary` of no values (guidellm's default generation delay).
fn empty_dist() -> Value {
    let p: Map<String, Value> = ["p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999"]
        .into_iter()
        .map(|k| (k.to_string(), Value::from(0.0)))
        .collect();
    serde_json::json!({"mean": 0.0, "median": 0.0, "std_dev": 0.0, "min": 0.0, "max": 0.0, "percentiles": p})
}

fn benchmark_row(report: &Value, b: &Value) -> Row {
    let mut r = Row::default();
    let (c, m, sm, ss) = (&b["config"], &b["metrics"], &b["scheduler_metrics"], &b["scheduler_state"]);
    r.add("Run Info", "Run ID", "", any(&c["run_id"]));
    r.add("Run Info", "Run Index", "", int(&c["run_index"]));
    for (field, key) in [("Profile", "profile"), ("Requests", "requests"), ("Backend", "backend")] {
        r.add("Run Info", field, "", pyfmt::dumps(&c[key]));
    }
    r.add("Run Info", "Environment", "", pyfmt::dumps(&c["environment"]));
    r.add("Benchmark", "Type", "", any(&b["type_"]));
    r.add("Benchmark", "ID", "", any(&c["id_"]));
    r.add("Benchmark", "Strategy", "", strategy_label(&c["strategy"]));
    r.add("Benchmark", "Constraints", "", pyfmt::dumps(&c["constraints"]));
    for (field, key) in [
        ("Start Time", "start_time"),
        ("Request Start Time", "request_start_time"),
        ("Measure Start Time", "measure_start_time"),
        ("Measure End Time", "measure_end_time"),
        ("Request End Time", "request_end_time"),
        ("End Time", "end_time"),
    ] {
        r.add("Timings", field, "", timestamp(sm[key].as_f64()));
    }
    let t = |k: &str| sm[k].as_f64().unwrap_or(0.0);
    r.add("Timings", "Duration", "Sec", pyfmt::float(t("measure_end_time") - t("measure_start_time")));
    r.add("Timings", "Warmup", "Sec", pyfmt::float(t("measure_start_time") - t("request_start_time")));
    r.add("Timings", "Cooldown", "Sec", pyfmt::float(t("request_end_time") - t("measure_end_time")));
    for s in ["successful", "incomplete", "errored", "total"] {
        r.add("Request Counts", &format!("{}{}", s[..1].to_uppercase(), &s[1..]), "", int(&m["request_totals"][s]));
    }
    r.stats(&m["request_latency"], "Request Latency", "Sec");
    for (key, group) in [
        ("request_dispatch_delay", "Dispatch Delay"),
        ("turn_predecessor_delay", "Turn Predecessor Delay"),
        ("turn_scheduling_delay", "Turn Scheduling Delay"),
        ("request_scheduled_latency", "Scheduled Latency"),
    ] {
        if !m[key].is_null() {
            r.stats(&m[key], group, "Sec");
        }
    }
    for (key, group, units) in [
        ("request_streaming_iterations_count", "Streaming Iterations", "Count"),
        ("time_to_first_token_ms", "Time to First Token", "ms"),
        ("time_to_first_output_token_ms", "Time to First Output Token", "ms"),
        ("time_per_output_token_ms", "Time per Output Token", "ms"),
        ("inter_token_latency_ms", "Inter Token Latency", "ms"),
        ("time_to_last_round_trip_ms", "Time To Last Round Trip", "ms"),
        ("avg_round_trip_time_ms", "Avg Round Trip Time", "ms"),
        ("requests_per_second", "Server Throughput", "Requests/Sec"),
        ("request_concurrency", "Server Throughput", "Concurrency"),
    ] {
        r.stats(&m[key], group, units);
    }
    if !c["slo"].is_null() {
        let goodput = &m["request_goodput"];
        let mean = if goodput.is_null() { String::new() } else { f(&goodput["successful"]["mean"]) };
        r.add("Server Throughput", "Successful Goodput/Sec", "mean", mean);
        let att = &m["slo_attainment"];
        r.add("Server Throughput", "SLO Attainment", "", if att.is_null() { String::new() } else { f(att) });
    }
    for (key, group, units) in [
        ("prompt_token_count", "Token Metrics", "Input Tokens"),
        ("output_token_count", "Token Metrics", "Output Tokens"),
        ("total_token_count", "Token Metrics", "Total Tokens"),
        ("prompt_tokens_per_second", "Token Throughput", "Input Tokens/Sec"),
        ("output_tokens_per_second", "Token Throughput", "Output Tokens/Sec"),
        ("tokens_per_second", "Token Throughput", "Total Tokens/Sec"),
        ("output_tokens_per_iteration", "Token Streaming", "Output Tokens/Iter"),
        ("iter_tokens_per_iteration", "Token Streaming", "Iter Tokens/Iter"),
    ] {
        r.stats(&m[key], group, units);
    }
    for (modality, metrics) in MODALITIES {
        for (name, label) in *metrics {
            let metric = &m[*modality][*name];
            for io in ["input", "output", "total"] {
                let d = &metric[io];
                let has_data = STATUSES.iter().any(|s| d[s]["count"].as_u64().unwrap_or(0) > 0);
                if has_data {
                    let title: Vec<String> =
                        modality.split('_').map(|w| format!("{}{}", w[..1].to_uppercase(), &w[1..])).collect();
                    let io_title = format!("{}{}", io[..1].to_uppercase(), &io[1..]);
                    r.stats(d, &format!("{} {label}", title.join(" ")), &io_title);
                }
            }
        }
    }
    let state_int = |k: &str, default: i64| ss[k].as_i64().unwrap_or(default).to_string();
    r.add("Scheduler State", "Node ID", "", state_int("node_id", -1));
    r.add("Scheduler State", "Num Processes", "", state_int("num_processes", -1));
    for (field, key) in [
        ("Created Requests", "created_requests"),
        ("Processed Requests", "processed_requests"),
        ("Successful Requests", "successful_requests"),
        ("Errored Requests", "errored_requests"),
        ("Cancelled Requests", "cancelled_requests"),
    ] {
        r.add("Scheduler State", field, "", state_int(key, 0));
    }
    for (key, field) in [("end_queuing", "End Queuing"), ("end_processing", "End Processing")] {
        if let Some(t) = ss[format!("{key}_time")].as_f64().filter(|t| *t != 0.0) {
            r.add("Scheduler State", &format!("{field} Time"), "", timestamp(Some(t)));
            let constraints =
                ss.get(format!("{key}_constraints")).cloned().unwrap_or_else(|| Value::Object(Map::new()));
            r.add("Scheduler State", &format!("{field} Constraints"), "", pyfmt::dumps(&constraints));
        }
    }
    for s in ["successful", "incomplete", "errored", "total"] {
        let field = format!("Requests Made {}{}", s[..1].to_uppercase(), &s[1..]);
        r.add("Scheduler Metrics", &field, "", int(&sm["requests_made"][s]));
    }
    for (field, key) in [
        ("Queued Time Avg", "queued_time_avg"),
        ("Resolve Start Delay Avg", "resolve_start_delay_avg"),
        ("Resolve Targeted Start Delay Avg", "resolve_targeted_start_delay_avg"),
        ("Request Start Delay Avg", "request_start_delay_avg"),
        ("Request Targeted Start Delay Avg", "request_targeted_start_delay_avg"),
        ("Request Time Avg", "request_time_avg"),
        ("Resolve End Delay Avg", "resolve_end_delay_avg"),
        ("Resolve Time Avg", "resolve_time_avg"),
        ("Finalized Delay Avg", "finalized_delay_avg"),
        ("Processed Delay Avg", "processed_delay_avg"),
    ] {
        r.add("Scheduler Metrics", field, "Sec", f(&sm[key]));
    }
    let delay = if sm["generation_delay"].is_object() { sm["generation_delay"].clone() } else { empty_dist() };
    r.dist(&delay, "Generation Delay", "Sec", None);
    r.add("Runtime Info", "Metadata", "", metadata_json(&report["metadata"]));
    r.add("Runtime Info", "Arguments", "", serde_json::to_string(&report["config"]).unwrap_or_default());
    intervals(&mut r, c, m);
    r
}

/// `_add_interval_columns`: the confidence level, then each per-request metric's
/// mean and percentile intervals (empty when not estimated).
fn intervals(r: &mut Row, c: &Value, m: &Value) {
    let level = if c["confidence"].is_null() { String::new() } else { f(&c["confidence"]) };
    r.add("Measurement Uncertainty", "Confidence Level", "", level);
    for (key, group, units) in [
        ("request_latency", "Request Latency", "Sec"),
        ("request_dispatch_delay", "Dispatch Delay", "Sec"),
        ("request_scheduled_latency", "Scheduled Latency", "Sec"),
        ("request_streaming_iterations_count", "Streaming Iterations", "Count"),
        ("time_to_first_token_ms", "Time to First Token", "ms"),
        ("time_to_first_output_token_ms", "Time to First Output Token", "ms"),
        ("time_to_last_round_trip_ms", "Time To Last Round Trip", "ms"),
        ("avg_round_trip_time_ms", "Avg Round Trip Time", "ms"),
        ("prompt_token_count", "Token Metrics", "Input Tokens"),
        ("output_token_count", "Token Metrics", "Output Tokens"),
        ("total_token_count", "Token Metrics", "Total Tokens"),
    ] {
        if m[key].is_null() {
            continue;
        }
        for s in STATUSES {
            let d = &m[key][s];
            if d["total_sum"].as_f64().unwrap_or(0.0) == 0.0 {
                continue;
            }
            let field = format!("{}{} {units}", s[..1].to_uppercase(), &s[1..]);
            let ci = &d["mean_ci"];
            let mean_ci =
                if ci.is_null() { String::new() } else { format!("[{}, {}]", f(&ci["lower"]), f(&ci["upper"])) };
            r.add(group, &field, "Mean CI", mean_ci);
            let pcis = match d["percentile_cis"].as_object() {
                None => String::new(),
                Some(p) => {
                    let mut out = Map::new();
                    for (k, b) in p {
                        let v = if b.is_null() { Value::Null } else { serde_json::json!([b["lower"], b["upper"]]) };
                        out.insert(k.clone(), v);
                    }
                    pyfmt::dumps_compact(&Value::Object(out))
                }
            };
            r.add(group, &field, "Percentile CIs", pcis);
        }
    }
}

/// `str(strategy)` of guidellm's scheduling strategies.
pub(super) fn strategy_label(s: &Value) -> String {
    let rate = |k: &str| format!("{:.2}", s[k].as_f64().unwrap_or(0.0));
    match s["type_"].as_str().unwrap_or("") {
        "synchronous" => "synchronous".into(),
        "concurrent" => format!("concurrent@{}", int(&s["streams"])),
        "throughput" => match s["max_concurrency"].as_u64().filter(|n| *n > 0) {
            Some(n) => format!("throughput@{n}"),
            None => "throughput@unlimited".into(),
        },
        "constant" => format!("constant@{}", rate("rate")),
        "poisson" => format!("poisson@{}", rate("rate")),
        "trace" => format!("trace@{}", rate("time_scale")),
        other => other.into(),
    }
}

/// `safe_format_timestamp(t, "%Y-%m-%d %H:%M:%S")`, in UTC; `N/A` outside
/// 0..2^31 or when missing.
fn timestamp(t: Option<f64>) -> String {
    match t {
        Some(t) if (0.0..=2f64.powi(31)).contains(&t) => {
            let d = super::vllm::vllm_date(((t * 1e6).round() as u64) / 1000);
            format!("{}-{}-{} {}:{}:{}", &d[0..4], &d[4..6], &d[6..8], &d[9..11], &d[11..13], &d[13..15])
        }
        _ => "N/A".into(),
    }
}

/// `report.metadata.model_dump_json()`: pydantic's compact JSON, in the model's
/// field order.
fn metadata_json(m: &Value) -> String {
    let mut out = Vec::new();
    for k in ["version", "guidellm_version", "python_version", "platform"] {
        out.push(format!("{}:{}", Value::from(k), serde_json::to_string(&m[k]).unwrap_or_default()));
    }
    format!("{{{}}}", out.join(","))
}

/// The whole CSV for a guidellm report.
pub fn guidellm_csv(report: &Value) -> String {
    let benchmarks = report["benchmarks"].as_array().map(Vec::as_slice).unwrap_or_default();
    let rows: Vec<Row> = benchmarks.iter().map(|b| benchmark_row(report, b)).collect();
    // `_align_columns`: every header in first-seen order; a row without one is "".
    let mut headers: Vec<&[String; 3]> = Vec::new();
    for r in &rows {
        for (h, _) in &r.cols {
            if !headers.contains(&h) {
                headers.push(h);
            }
        }
    }
    let mut out = String::new();
    for level in 0..3 {
        if !headers.is_empty() {
            out += &pyfmt::csv_row(&headers.iter().map(|h| h[level].clone()).collect::<Vec<_>>());
        }
    }
    for r in &rows {
        let cells: Vec<String> = headers
            .iter()
            .map(|h| r.cols.iter().rev().find(|(k, _)| k == *h).map(|(_, v)| v.clone()).unwrap_or_default())
            .collect();
        out += &pyfmt::csv_row(&cells);
    }
    out
}
