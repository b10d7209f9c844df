//! AIPerf 0.13's export files of one run (`aiperf profile`'s artifact directory):
//! `profile_export_aiperf.json` (`JsonExportData`, schema 1.4: every metric as a
//! `JsonMetricResult`, the run's `input_config`, `run_info`, error summary, start
//! and end), `profile_export_aiperf.csv` (`MetricsCsvExporter`'s two sections:
//! the metrics with percentiles, then the scalars, each sorted by tag, names
//! `Header (unit)`, numbers `%.2f`) and `profile_export.jsonl` (one
//! `MetricRecordInfo` per request: its metadata and each record metric's value
//! and unit; a failed request carries `error`), plus the console table AIPerf
//! prints. Owns the formats; the numbers are `aiperf_metrics`'. Must not write
//! into the evidence directory (the caller writes these files into the artifact
//! directory). Left out, as AIPerf leaves them out when not collected: GPU
//! telemetry, server metrics, HTTP-trace metrics (`http_req_*`: connection
//! timings the harness does not record), AIPerf's time-weighted sweep metrics
//! (`effective_*`, `active_*`, `tokens_in_flight`) and the failure-inflated
//! `adj_*` bands.

use serde_json::{Map, Value, json};

use super::CellRecords;
pub use super::aiperf_metrics::{MetricDef, record_metrics};
use super::aiperf_metrics::{PERCENTILES, RECORD_METRICS, RecordMetrics, RunShape, Summary, run_metrics};

/// AIPerf's release and export schema these files follow.
pub const AIPERF_VERSION: &str = "0.13.0";
pub const AIPERF_SCHEMA_VERSION: &str = "1.4";
pub const AIPERF_SOURCE: &str = "AIPerf 0.13.0 (PyPI): aiperf/common/models/export_models.py (JsonExportData, schema 1.4), \
     aiperf/exporters/metrics_csv_exporter.py, aiperf/common/models/record_models.py (MetricRecordInfo)";

/// The file names AIPerf writes (`ArtifactsConfig`), without a prefix.
pub const AIPERF_JSON_FILE: &str = "profile_export_aiperf.json";
pub const AIPERF_CSV_FILE: &str = "profile_export_aiperf.csv";
pub const AIPERF_JSONL_FILE: &str = "profile_export.jsonl";

/// What the export says about the run beyond its records.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub shape: RunShape,
    /// AIPerf's `input_config` (a `BenchmarkConfig`, as the front door built it).
    pub input_config: Value,
    /// The command line, as AIPerf's `run_info.cli_command` records it.
    pub cli_command: String,
    pub benchmark_id: String,
    pub random_seed: Option<u64>,
    /// The Unix time of the study clock's zero, ns (AIPerf's timestamps are wall clock).
    pub zero_unix_ns: u128,
    /// The plan's `request.request_id_prefix`: a record's `x_request_id` is then the
    /// `x-request-id` its request sent (`<prefix><panel index>`, as AIPerf's is the
    /// `X-Request-ID` it sent); without it, the server's response id.
    pub request_id_prefix: Option<String>,
}

/// One run's AIPerf files, as text.
#[derive(Debug, Clone)]
pub struct AiperfFiles {
    pub json: String,
    pub csv: String,
    pub jsonl: String,
    /// The console table AIPerf prints at the end of a run.
    pub console: String,
    /// The run's summaries (display units), for callers that print more.
    pub summaries: Vec<Summary>,
}

fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// A summary as AIPerf's `JsonMetricResult` (`exclude_none`).
fn json_result(s: &Summary) -> Value {
    let mut m = Map::new();
    m.insert("unit".into(), s.def.unit.into());
    m.insert("avg".into(), num(s.avg));
    if let Some(d) = &s.dist {
        for (q, v) in PERCENTILES.iter().zip(d.percentiles) {
            m.insert(format!("p{q}"), num(v));
        }
        m.insert("min".into(), num(d.min));
        m.insert("max".into(), num(d.max));
        m.insert("std".into(), num(d.std));
        m.insert("count".into(), d.count.into());
        m.insert("sum".into(), num(d.sum));
    }
    Value::Object(m)
}

/// `YYYY-mm-ddTHH:MM:SS.ffffff` (UTC) of a Unix time in ns: Python's
/// `datetime.isoformat()` of a naive datetime, as AIPerf writes start and end.
fn iso(unix_ns: u128) -> String {
    let date = super::vllm::vllm_date((unix_ns / 1_000_000) as u64);
    let micros = (unix_ns / 1000) % 1_000_000;
    format!(
        "{}-{}-{}T{}:{}:{}.{micros:06}",
        &date[0..4],
        &date[4..6],
        &date[6..8],
        &date[9..11],
        &date[11..13],
        &date[13..15]
    )
}

/// AIPerf's error type and message of a failed record.
fn error_details(r: &crate::evidence::request_record::RequestRecord) -> Value {
    match &r.failure {
        Some(crate::evidence::request_record::Failure::HttpStatus { status, body }) => {
            json!({"code": status, "type": "HTTPError", "message": body})
        }
        Some(f) => {
            json!({"type": f.class(), "message": serde_json::to_string(f).unwrap_or_default()})
        }
        None => json!({"type": "incomplete", "message": "no [DONE]"}),
    }
}

/// The JSONL line of one record (`MetricRecordInfo`).
fn jsonl_line(rm: &RecordMetrics, info: &RunInfo, session: u64) -> Value {
    let (zero, closed) = (info.zero_unix_ns, info.shape.closed_loop);
    let r = rm.record;
    let wall = |ns: u64| zero + u128::from(ns);
    let credit = if closed { r.admitted_ns.unwrap_or(r.intended_ns) } else { r.intended_ns };
    let start = r.send_ns.or(r.dispatch_ns).unwrap_or(r.intended_ns);
    let mut meta = Map::new();
    meta.insert("session_num".into(), session.into());
    let sent = info.request_id_prefix.as_ref().map(|p| format!("{p}{}", r.prompt));
    if let Some(id) = sent.or_else(|| r.server_request_id.clone()) {
        meta.insert("x_request_id".into(), id.into());
    }
    meta.insert("turn_index".into(), r.turn.as_ref().map_or(0, |t| t.turn).into());
    meta.insert("credit_issued_ns".into(), json!(wall(credit) as u64));
    meta.insert("request_start_ns".into(), json!(wall(start) as u64));
    if let Some(h) = r.headers_ns {
        meta.insert("request_ack_ns".into(), json!(wall(h) as u64));
    }
    meta.insert("request_end_ns".into(), json!(wall(rm.end_ns) as u64));
    meta.insert("worker_id".into(), "harness".into());
    meta.insert("record_processor_id".into(), "harness".into());
    meta.insert("benchmark_phase".into(), "profiling".into());
    meta.insert("phase_index".into(), 0.into());
    meta.insert("profiling_index".into(), 0.into());
    meta.insert("phase_name".into(), "profiling".into());
    meta.insert("phase_kind".into(), "profiling".into());
    meta.insert("was_cancelled".into(), false.into());
    let mut metrics = Map::new();
    for (tag, v) in &rm.values {
        let unit = RECORD_METRICS.iter().find(|d| d.tag == *tag).map_or("", |d| d.unit);
        let value = match v {
            super::aiperf_metrics::Value::Int(n) => json!(n),
            super::aiperf_metrics::Value::Float(x) => num(*x),
            super::aiperf_metrics::Value::List(xs) => Value::Array(xs.iter().map(|x| num(*x)).collect()),
        };
        metrics.insert((*tag).to_string(), json!({"value": value, "unit": unit}));
    }
    if rm.error {
        metrics.insert("error_isl".into(), json!({"value": rm.isl, "unit": "tokens"}));
    }
    let mut line = Map::new();
    line.insert("metadata".into(), Value::Object(meta));
    line.insert("metrics".into(), Value::Object(metrics));
    if rm.error {
        line.insert("error".into(), error_details(r));
    }
    Value::Object(line)
}

/// `MetricsCsvExporter._format_metric_name`: the header, with its unit unless the
/// unit is `count` or `requests`.
fn csv_name(d: &MetricDef) -> String {
    if d.unit.is_empty() || matches!(d.unit, "count" | "requests") {
        d.header.to_string()
    } else {
        format!("{} ({})", d.header, d.unit)
    }
}

/// Python's `csv.writer` quoting of one field (minimal quoting).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// `profile_export_aiperf.csv` of the run's summaries (`\r\n` line ends, as
/// Python's csv module writes them).
fn csv_text(summaries: &[Summary]) -> String {
    let mut with: Vec<&Summary> = summaries.iter().filter(|s| s.dist.is_some()).collect();
    let mut without: Vec<&Summary> = summaries.iter().filter(|s| s.dist.is_none()).collect();
    with.sort_by_key(|s| s.def.tag);
    without.sort_by_key(|s| s.def.tag);
    let f = |x: f64| format!("{x:.2}");
    let mut out = String::new();
    if !with.is_empty() {
        out.push_str("Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std\r\n");
        for s in &with {
            let Some(d) = &s.dist else { continue };
            let mut row = vec![csv_field(&csv_name(&s.def)), f(s.avg), f(d.min), f(d.max), f(d.sum)];
            row.extend(d.percentiles.iter().map(|p| f(*p)));
            row.push(f(d.std));
            out.push_str(&row.join(","));
            out.push_str("\r\n");
        }
        if !without.is_empty() {
            out.push_str("\r\n");
        }
    }
    if !without.is_empty() {
        out.push_str("Metric,Value\r\n");
        for s in &without {
            out.push_str(&format!("{},{}\r\n", csv_field(&csv_name(&s.def)), f(s.avg)));
        }
    }
    out
}

/// The console table (AIPerf's `ConsoleMetricsExporter` columns and order: the
/// metrics of its default console group by display order).
fn console_text(summaries: &[Summary], title: &str) -> String {
    let mut rows: Vec<&Summary> = summaries.iter().filter(|s| s.def.display_order.is_some()).collect();
    rows.sort_by_key(|s| s.def.display_order);
    let stat = |s: &Summary, k: &str| -> String {
        let v = match (&s.dist, k) {
            (_, "avg") => Some(s.avg),
            (Some(d), "min") => Some(d.min),
            (Some(d), "max") => Some(d.max),
            (Some(d), "p99") => Some(d.percentiles[8]),
            (Some(d), "p90") => Some(d.percentiles[6]),
            (Some(d), "p50") => Some(d.percentiles[4]),
            (Some(d), "std") => Some(d.std),
            _ => None,
        };
        v.map_or("N/A".into(), |x| group_thousands(&format!("{x:.2}")))
    };
    let keys = ["avg", "min", "max", "p99", "p90", "p50", "std"];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|s| std::iter::once(csv_name(&s.def)).chain(keys.iter().map(|k| stat(s, k))).collect())
        .collect();
    let head: Vec<String> = std::iter::once("Metric".to_string()).chain(keys.iter().map(|k| k.to_string())).collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|i| cells.iter().map(|r| r[i].chars().count()).chain([head[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |r: &[String]| -> String {
        let parts: Vec<String> =
            r.iter().zip(&widths).map(|(c, w)| format!("{}{c}", " ".repeat(w - c.chars().count()))).collect();
        format!("| {} |\n", parts.join(" | "))
    };
    let rule = format!("+{}+\n", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
    let mut out = format!("{title}\n{rule}{}{rule}", line(&head));
    for r in &cells {
        out.push_str(&line(r));
    }
    out.push_str(&rule);
    out
}

/// `1234567.89` as `1,234,567.89` (rich's table of AIPerf formats with `:,.2f`).
fn group_thousands(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    if frac.is_empty() { format!("{sign}{grouped}") } else { format!("{sign}{grouped}.{frac}") }
}

/// The AIPerf files of one cell of a study.
pub fn aiperf_files(cell: &CellRecords, info: &RunInfo) -> AiperfFiles {
    let metrics: Vec<RecordMetrics> = cell.records.iter().map(|r| record_metrics(r, &info.shape)).collect();
    let summaries = run_metrics(&metrics, &info.shape);
    let mut doc = Map::new();
    doc.insert("schema_version".into(), AIPERF_SCHEMA_VERSION.into());
    doc.insert("aiperf_version".into(), AIPERF_VERSION.into());
    doc.insert("benchmark_id".into(), info.benchmark_id.clone().into());
    for s in &summaries {
        doc.insert(s.def.tag.to_string(), json_result(s));
    }
    if !info.input_config.is_null() {
        doc.insert("input_config".into(), info.input_config.clone());
    }
    let mut run_info = Map::new();
    run_info.insert("benchmark_id".into(), info.benchmark_id.clone().into());
    if let Some(seed) = info.random_seed {
        run_info.insert("random_seed".into(), seed.into());
    }
    run_info.insert("trial".into(), 0.into());
    run_info.insert("cli_command".into(), info.cli_command.clone().into());
    doc.insert("run_info".into(), Value::Object(run_info));
    doc.insert("was_cancelled".into(), false.into());
    doc.insert("is_complete".into(), true.into());
    let mut errors: Vec<(Value, u64)> = Vec::new();
    for rm in metrics.iter().filter(|m| m.error) {
        let d = error_details(rm.record);
        match errors.iter_mut().find(|(e, _)| *e == d) {
            Some((_, n)) => *n += 1,
            None => errors.push((d, 1)),
        }
    }
    let summary: Vec<Value> = errors.into_iter().map(|(d, n)| json!({"error_details": d, "count": n})).collect();
    doc.insert("error_summary".into(), Value::Array(summary));
    let starts = metrics.iter().filter_map(|m| m.start_ns).min();
    let ends = metrics.iter().map(|m| m.end_ns).max();
    if let Some(s) = starts {
        doc.insert("start_time".into(), iso(info.zero_unix_ns + u128::from(s)).into());
    }
    if let Some(e) = ends {
        doc.insert("end_time".into(), iso(info.zero_unix_ns + u128::from(e)).into());
    }
    let json = serde_json::to_string_pretty(&Value::Object(doc)).unwrap_or_default();
    let mut jsonl = String::new();
    for (i, rm) in metrics.iter().enumerate() {
        jsonl.push_str(&jsonl_line(rm, info, i as u64).to_string());
        jsonl.push('\n');
    }
    AiperfFiles {
        json,
        csv: csv_text(&summaries),
        jsonl,
        console: console_text(&summaries, "harness profile | LLM Metrics (AIPerf's definitions)"),
        summaries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_dates_are_aiperfs() {
        assert_eq!(group_thousands("1234567.89"), "1,234,567.89");
        assert_eq!(group_thousands("-12.50"), "-12.50");
        assert_eq!(group_thousands("999.00"), "999.00");
        assert_eq!(iso(1_796_616_335_533_090_123), "2026-12-07T04:05:35.533090");
        let d = super::super::aiperf_metrics::def("request_count").unwrap();
        assert_eq!(csv_name(&d), "Request Count");
        let d = super::super::aiperf_metrics::def("benchmark_duration").unwrap();
        assert_eq!(csv_name(&d), "Benchmark Duration (sec)");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
