//! guidellm 0.8.1's `benchmarks.html` (`GenerativeBenchmarkerHTML`,
//! guidellm/benchmark/outputs/html.py) written from our guidellm report: its
//! report view (`build_report_view`: a row per benchmark, the header, the detail
//! tables) as the JSON `json.dumps(view, ensure_ascii=False)` writes, filled into
//! guidellm's own template, CSS and JavaScript (harness/assets/guidellm-html, copied
//! unchanged from the wheel) as `render_html_report` fills them, with the static
//! KPI and summary-table text for readers without JavaScript. Owns the view's
//! layout; every number is the report's.
//!
//! Differs from guidellm's writer in one documented place: the multi-turn
//! breakdown (`by_turn`, `turn_agents`, `turn_samples` and its notes) is null, as
//! guidellm writes it for a single-turn run (`harness benchmark`'s datasets are
//! single-turn).

use serde_json::Value;

use super::pyfmt::{self, Dumps, Py};

use super::guidellm_csv::MODALITIES;

const TEMPLATE: &str = include_str!("../../assets/guidellm-html/template.html");
const CSS: &str = include_str!("../../assets/guidellm-html/report.css");
const JS: &str = include_str!("../../assets/guidellm-html/report.js");

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// `_mean(metric, status=...)`.
fn mean(m: &Value, status: &str) -> Option<f64> {
    num(&m[status]["mean"])
}

/// `_percentile(metric, name)` of the successful requests.
fn pct(m: &Value, name: &str) -> Option<f64> {
    num(&m["successful"]["percentiles"][name])
}

/// One row of `_build_run_row`, keyed as guidellm keys it.
struct Run {
    fields: Vec<(String, Py)>,
}

impl Run {
    fn get(&self, k: &str) -> Option<&Py> {
        self.fields.iter().find(|(key, _)| key == k).map(|(_, v)| v)
    }

    fn f(&self, k: &str) -> Option<f64> {
        match self.get(k) {
            Some(Py::Float(x)) => Some(*x),
            Some(Py::Int(i)) => Some(*i as f64),
            _ => None,
        }
    }

    fn label(&self) -> Py {
        match self.get("label") {
            Some(Py::Str(s)) if !s.is_empty() => Py::Str(s.clone()),
            _ => self.get("strategy").cloned().unwrap_or(Py::None),
        }
    }
}

fn run_row(b: &Value, index: usize) -> Run {
    let m = &b["metrics"];
    let s = &b["config"]["strategy"];
    let kind = s["type_"].as_str().unwrap_or("");
    let totals = &m["request_totals"];
    let total_of = |k: &str| num(&totals[k]).unwrap_or(0.0);
    let (ok, incomplete, errored) = (total_of("successful"), total_of("incomplete"), total_of("errored"));
    let total = Some(total_of("total")).filter(|t| *t != 0.0).unwrap_or(ok + incomplete + errored);
    let error_rate = if total != 0.0 { errored / total } else { 0.0 };
    let limit = match kind {
        "synchronous" => Py::Int(1),
        "concurrent" => Py::from(&s["streams"]),
        "throughput" | "constant" | "poisson" => Py::from(&s["max_concurrency"]),
        _ => Py::None,
    };
    let configured_rate = match kind {
        "constant" | "poisson" => Py::opt(num(&s["rate"])),
        _ => Py::None,
    };
    let ms = |x: Option<f64>| Py::opt(x.map(|s| s * 1000.0));
    let p = |key: &str, name: &str| Py::opt(pct(&m[key], name));
    let fields = vec![
        ("index", Py::Int(index as i64)),
        ("strategy", Py::Str(kind.into())),
        ("label", Py::Str(super::guidellm_csv::strategy_label(s))),
        ("request_rate", Py::opt(mean(&m["requests_per_second"], "total"))),
        ("concurrency", Py::opt(mean(&m["request_concurrency"], "total"))),
        ("configured_concurrency", limit),
        ("configured_request_rate", configured_rate),
        ("total_tps", Py::opt(mean(&m["tokens_per_second"], "total"))),
        ("input_tps", Py::opt(mean(&m["prompt_tokens_per_second"], "total"))),
        ("output_tps", Py::opt(mean(&m["output_tokens_per_second"], "total"))),
        ("request_latency_p95_ms", ms(pct(&m["request_latency"], "p95"))),
        ("request_latency_p99_ms", ms(pct(&m["request_latency"], "p99"))),
        ("ttft_p95_ms", p("time_to_first_token_ms", "p95")),
        ("ttft_p99_ms", p("time_to_first_token_ms", "p99")),
        ("ttfot_p95_ms", p("time_to_first_output_token_ms", "p95")),
        ("ttfot_p99_ms", p("time_to_first_output_token_ms", "p99")),
        ("itl_p95_ms", p("inter_token_latency_ms", "p95")),
        ("itl_p99_ms", p("inter_token_latency_ms", "p99")),
        ("tpot_p95_ms", p("time_per_output_token_ms", "p95")),
        ("tpot_p99_ms", p("time_per_output_token_ms", "p99")),
        ("prompt_tokens_median", Py::opt(mean_like(&m["prompt_token_count"], "median"))),
        ("prompt_tokens_p95", p("prompt_token_count", "p95")),
        ("output_tokens_median", Py::opt(mean_like(&m["output_token_count"], "median"))),
        ("output_tokens_p95", p("output_token_count", "p95")),
        ("rtt_avg_p95_ms", p("avg_round_trip_time_ms", "p95")),
        ("rtt_avg_p99_ms", p("avg_round_trip_time_ms", "p99")),
        ("rtt_last_p95_ms", p("time_to_last_round_trip_ms", "p95")),
        ("rtt_last_p99_ms", p("time_to_last_round_trip_ms", "p99")),
        ("successful", Py::Float(ok)),
        ("incomplete", Py::Float(incomplete)),
        ("errored", Py::Float(errored)),
        ("total", Py::Float(total)),
        ("error_rate", Py::Float(error_rate)),
    ];
    Run { fields: fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
}

/// A statistic of the successful requests (`_median`).
fn mean_like(m: &Value, stat: &str) -> Option<f64> {
    num(&m["successful"][stat])
}

/// `_side_stats`: the successful requests' mean, p95 and count of one side.
fn side_stats(metric: &Value, side: &str) -> Option<(Option<f64>, Option<f64>, i64)> {
    let d = &metric[side]["successful"];
    if !d.is_object() {
        return None;
    }
    let (mean, p95, count) = (num(&d["mean"]), num(&d["percentiles"]["p95"]), d["count"].as_i64().unwrap_or(0));
    if mean.is_none() && p95.is_none() {
        return None;
    }
    if count <= 0 && mean.is_none_or(|x| x == 0.0) {
        return None;
    }
    Some((mean, p95, count))
}

/// `_ttfot_differs`: `math.isclose(ttft, ttfot, rel_tol=0.01, abs_tol=0.5)` fails.
fn differs(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if !(a == 0.0 && b == 0.0) => (a - b).abs() > (0.01 * a.abs().max(b.abs())).max(0.5),
        _ => false,
    }
}

fn details(benchmarks: &[Value], runs: &[Run]) -> Py {
    let show_ttfot = runs
        .iter()
        .any(|r| differs(r.f("ttft_p95_ms"), r.f("ttfot_p95_ms")) || differs(r.f("ttft_p99_ms"), r.f("ttfot_p99_ms")));
    let show_rtt =
        runs.iter().any(|r| r.f("rtt_avg_p95_ms").unwrap_or(0.0) > 0.0 || r.f("rtt_last_p95_ms").unwrap_or(0.0) > 0.0);
    let mut sections = Vec::new();
    for (modality, groups) in MODALITIES {
        let mut metrics_out = Vec::new();
        for (attr, label) in *groups {
            let mut rows = Vec::new();
            for (b, run) in benchmarks.iter().zip(runs) {
                let metric = &b["metrics"][*modality][*attr];
                let (input, output) = (side_stats(metric, "input"), side_stats(metric, "output"));
                let (im, ip) = input.map_or((None, None), |s| (s.0, s.1));
                let (om, op) = output.map_or((None, None), |s| (s.0, s.1));
                if [im, ip, om, op].iter().all(|v| v.is_none_or(|x| x == 0.0)) {
                    continue;
                }
                rows.push(Py::dict([
                    ("strategy", run.label()),
                    ("input_mean", Py::opt(im)),
                    ("input_p95", Py::opt(ip)),
                    ("output_mean", Py::opt(om)),
                    ("output_p95", Py::opt(op)),
                ]));
            }
            if !rows.is_empty() {
                metrics_out.push(Py::dict([
                    ("key", Py::Str((*attr).into())),
                    ("label", Py::Str((*label).into())),
                    ("rows", Py::List(rows)),
                ]));
            }
        }
        if !metrics_out.is_empty() {
            let title: Vec<String> =
                modality.split('_').map(|w| format!("{}{}", w[..1].to_uppercase(), &w[1..])).collect();
            sections.push((
                modality.to_string(),
                Py::dict([("label", Py::Str(title.join(" "))), ("metrics", Py::List(metrics_out))]),
            ));
        }
    }
    let rows = |keys: &[(&str, &str)]| -> Py {
        Py::List(
            runs.iter()
                .map(|r| {
                    let mut d = vec![("strategy".to_string(), r.label())];
                    for (out, key) in keys {
                        d.push((out.to_string(), r.get(key).cloned().unwrap_or(Py::None)));
                    }
                    Py::Dict(d)
                })
                .collect(),
        )
    };
    let extra = rows(&[
        ("tpot_p95_ms", "tpot_p95_ms"),
        ("tpot_p99_ms", "tpot_p99_ms"),
        ("ttfot_p95_ms", "ttfot_p95_ms"),
        ("ttfot_p99_ms", "ttfot_p99_ms"),
    ]);
    let sizes = rows(&[
        ("prompt_tokens_median", "prompt_tokens_median"),
        ("prompt_tokens_p95", "prompt_tokens_p95"),
        ("output_tokens_median", "output_tokens_median"),
        ("output_tokens_p95", "output_tokens_p95"),
    ]);
    let rtt = if show_rtt {
        rows(&[
            ("avg_p95_ms", "rtt_avg_p95_ms"),
            ("avg_p99_ms", "rtt_avg_p99_ms"),
            ("last_p95_ms", "rtt_last_p95_ms"),
            ("last_p99_ms", "rtt_last_p99_ms"),
        ])
    } else {
        Py::List(Vec::new())
    };
    Py::dict([
        ("show_ttfot", Py::Bool(show_ttfot)),
        ("show_rtt", Py::Bool(show_rtt)),
        ("modality_sections", Py::Dict(sections)),
        ("extra_latency_rows", extra),
        ("request_size_rows", sizes),
        ("rtt_rows", rtt),
        ("benchmark_count", Py::Int(benchmarks.len() as i64)),
    ])
}

/// `_nonempty_str`.
fn nonempty(v: &Value) -> Option<String> {
    let text = match v {
        Value::Null => return None,
        Value::String(s) => s.trim().to_string(),
        other => other.to_string().trim().to_string(),
    };
    Some(text).filter(|t| !t.is_empty())
}

/// `datetime.fromtimestamp(t, tz=timezone.utc).isoformat()`.
fn iso_utc(t: f64) -> String {
    let us = (t * 1e6).round() as u64;
    let d = super::vllm::vllm_date(us / 1000);
    let frac = us % 1_000_000;
    let frac = if frac == 0 { String::new() } else { format!(".{frac:06}") };
    format!("{}-{}-{}T{}:{}:{}{frac}+00:00", &d[0..4], &d[4..6], &d[6..8], &d[9..11], &d[11..13], &d[13..15])
}

fn header(report: &Value, runs: &[Run], peak: usize) -> Py {
    let benchmarks = report["benchmarks"].as_array().map(Vec::as_slice).unwrap_or_default();
    let spec = &report["config"]["spec"];
    let model = benchmarks
        .iter()
        .find_map(|b| nonempty(&b["config"]["backend"]["model"]))
        .or_else(|| nonempty(&spec["backend"]["model"]))
        .or_else(|| nonempty(&spec["tokenizer"]["model"]))
        .unwrap_or_else(|| "N/A".into());
    let latest = benchmarks.iter().filter_map(|b| num(&b["scheduler_metrics"]["measure_start_time"])).reduce(f64::max);
    Py::dict([
        ("model", Py::Str(model)),
        ("target", Py::Str(nonempty(&spec["backend"]["target"]).unwrap_or_else(|| "N/A".into()))),
        ("profile", Py::Str(spec["profile"]["kind"].as_str().filter(|s| !s.is_empty()).unwrap_or("N/A").into())),
        ("timestamp", latest.map_or(Py::None, |t| Py::Str(iso_utc(t)))),
        (
            "guidellm_version",
            Py::Str(report["metadata"]["guidellm_version"].as_str().filter(|s| !s.is_empty()).unwrap_or("N/A").into()),
        ),
        ("peak_index", Py::Int(peak as i64)),
        ("multi_run", Py::Bool(runs.len() > 1)),
        ("has_multi_turn", Py::Bool(false)),
        ("run_count", Py::Int(runs.len() as i64)),
    ])
}

/// `build_report_view`, with the report's runs (for the static text).
fn view(report: &Value) -> (Py, Vec<Run>, usize) {
    let benchmarks = report["benchmarks"].as_array().map(Vec::as_slice).unwrap_or_default();
    let runs: Vec<Run> = benchmarks.iter().enumerate().map(|(i, b)| run_row(b, i)).collect();
    // `_peak_throughput_index`: the first run with the highest total tokens/s.
    let mut peak = 0;
    let mut best = f64::NEG_INFINITY;
    for (i, r) in runs.iter().enumerate() {
        let v = r.f("total_tps").unwrap_or(f64::NEG_INFINITY);
        if v > best {
            (best, peak) = (v, i);
        }
    }
    let v = Py::dict([
        ("header", header(report, &runs, peak)),
        ("runs", Py::List(runs.iter().map(|r| Py::Dict(r.fields.clone())).collect())),
        ("by_turn", Py::None),
        ("turn_note", Py::None),
        ("turn_agents", Py::None),
        ("turn_samples", Py::None),
        ("turn_peak_note", Py::None),
        ("details", details(benchmarks, &runs)),
    ]);
    (v, runs, peak)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `_fmt_num`.
fn fmt_num(x: Option<f64>) -> String {
    match x {
        Some(n) if !n.is_nan() => {
            if n.abs() >= 100.0 {
                format!("{n:.0}")
            } else if n.abs() >= 10.0 {
                format!("{n:.1}")
            } else {
                format!("{n:.2}")
            }
        }
        _ => "—".into(),
    }
}

/// `_fmt_pct`.
fn fmt_pct(x: Option<f64>) -> String {
    match x {
        Some(n) if !n.is_nan() => format!("{:.2}%", n * 100.0),
        _ => "—".into(),
    }
}

fn py_text(v: Option<&Py>) -> String {
    match v {
        Some(Py::Str(s)) => s.clone(),
        Some(Py::Int(i)) => i.to_string(),
        Some(Py::Float(x)) => pyfmt::float(*x),
        _ => "—".into(),
    }
}

/// `_build_static_summary_table`.
fn static_table(runs: &[Run]) -> String {
    if runs.is_empty() {
        return "<p>No benchmark runs in this report.</p>".into();
    }
    let cell = |s: String| format!("<td>{}</td>", escape(&s));
    let rows: String = runs
        .iter()
        .map(|r| {
            format!(
                "<tr>{}{}{}{}</tr>",
                cell(py_text(Some(&r.label()))),
                cell(fmt_num(r.f("request_rate"))),
                cell(fmt_num(r.f("total_tps"))),
                cell(fmt_pct(r.f("error_rate")))
            )
        })
        .collect();
    format!(
        "<table><thead><tr><th>Strategy</th><th>Req/s</th><th>Total tok/s</th><th>Error rate</th></tr></thead>\
         <tbody>{rows}</tbody></table>"
    )
}

/// The whole HTML document for a guidellm report (`render_html_report`).
pub fn guidellm_html(report: &Value) -> String {
    let (v, runs, peak) = view(report);
    let payload = pyfmt::dumps_with(&v, Dumps { item: ", ", key: ": ", ascii: false }).replace('<', "\\u003c");
    let mut html = TEMPLATE
        .replace("__GUIDELLM_REPORT_CSS__", CSS)
        .replace("__GUIDELLM_REPORT_JS__", JS)
        .replace("__GUIDELLM_REPORT_JSON__", &payload)
        .replace("__GUIDELLM_STATIC_TABLE__", &static_table(&runs));
    let Py::Dict(head) = header(report, &runs, peak) else { return html };
    let h = |k: &str| match head.iter().find(|(key, _)| key == k).map(|(_, v)| v) {
        Some(Py::Str(s)) if !s.is_empty() => s.clone(),
        _ => "N/A".into(),
    };
    let run = runs.get(peak);
    let rf = |k: &str| run.and_then(|r| r.f(k));
    let tokens = [
        ("__GUIDELLM_META_MODEL__", escape(&h("model"))),
        ("__GUIDELLM_META_TARGET__", escape(&h("target"))),
        ("__GUIDELLM_META_PROFILE__", escape(&h("profile"))),
        ("__GUIDELLM_META_TIME__", escape(&h("timestamp"))),
        ("__GUIDELLM_META_VERSION__", escape(&h("guidellm_version"))),
        ("__GUIDELLM_KPI_RPS__", escape(&fmt_num(rf("request_rate")))),
        ("__GUIDELLM_KPI_OUT_TPS__", escape(&fmt_num(rf("output_tps")))),
        ("__GUIDELLM_KPI_TOTAL_TPS__", escape(&fmt_num(rf("total_tps")))),
        ("__GUIDELLM_KPI_LAT_P95__", escape(&fmt_num(rf("request_latency_p95_ms")))),
        ("__GUIDELLM_KPI_LAT_P99__", escape(&fmt_num(rf("request_latency_p99_ms")))),
        ("__GUIDELLM_KPI_TTFT_P95__", escape(&fmt_num(rf("ttft_p95_ms")))),
        ("__GUIDELLM_KPI_TTFT_P99__", escape(&fmt_num(rf("ttft_p99_ms")))),
        ("__GUIDELLM_KPI_ITL_P95__", escape(&fmt_num(rf("itl_p95_ms")))),
        ("__GUIDELLM_KPI_ITL_P99__", escape(&fmt_num(rf("itl_p99_ms")))),
        ("__GUIDELLM_KPI_ERROR__", escape(&fmt_pct(rf("error_rate")))),
    ];
    for (token, value) in tokens {
        html = html.replace(token, &value);
    }
    html
}
