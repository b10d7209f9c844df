//! Prometheus metrics under vLLM's names, so dashboards and the harness read
//! every engine alike. Every series carries a `model_name` label. The engine
//! loop updates them; `GET /metrics` encodes them, in the format the scraper asks
//! for as Prometheus client libraries negotiate it: OpenMetrics when `Accept` names
//! `application/openmetrics-text` (a Prometheus server does), else the Prometheus
//! text format 0.0.4 (curl, `prometheus_client`'s text parser, vLLM's default).

use crate::kv::KvInventory;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinishedLabel {
    pub finished_reason: String,
}

pub struct Metrics {
    registry: Registry,
    pub num_requests_running: Gauge,
    pub num_requests_waiting: Gauge,
    pub kv_cache_usage_perc: Gauge<f64, AtomicU64>,
    pub num_preemptions: Counter,
    pub prompt_tokens: Counter,
    pub generation_tokens: Counter,
    pub request_success: Family<FinishedLabel, Counter>,
    pub time_to_first_token: Histogram,
    pub time_per_output_token: Histogram,
    pub e2e_request_latency: Histogram,
    pub request_queue_time: Histogram,
    pub prefix_cache_queries: Counter,
    pub prefix_cache_hits: Counter,
    pub kv_physical_bytes: Gauge,
    pub kv_logical_token_slots: Gauge,
    pub kv_bytes_per_token: Gauge,
}

fn buckets(v: &[f64]) -> Histogram {
    Histogram::new(v.iter().copied())
}

const LATENCY: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const TPOT: &[f64] = &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0];

impl Metrics {
    pub fn new(model_name: &str) -> Self {
        let labels = vec![(Cow::Borrowed("model_name"), Cow::Owned(model_name.to_string()))];
        let mut registry = Registry::with_labels(labels.into_iter());
        let m = Metrics {
            num_requests_running: Gauge::default(),
            num_requests_waiting: Gauge::default(),
            kv_cache_usage_perc: Gauge::default(),
            num_preemptions: Counter::default(),
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            request_success: Family::default(),
            time_to_first_token: buckets(LATENCY),
            time_per_output_token: buckets(TPOT),
            e2e_request_latency: buckets(LATENCY),
            request_queue_time: buckets(LATENCY),
            prefix_cache_queries: Counter::default(),
            prefix_cache_hits: Counter::default(),
            kv_physical_bytes: Gauge::default(),
            kv_logical_token_slots: Gauge::default(),
            kv_bytes_per_token: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("vllm:num_requests_running", "Requests in model execution batches", m.num_requests_running.clone());
        r.register("vllm:num_requests_waiting", "Requests waiting to be processed", m.num_requests_waiting.clone());
        r.register(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage; 1 means 100 percent usage",
            m.kv_cache_usage_perc.clone(),
        );
        r.register("vllm:num_preemptions", "Cumulative number of preemptions", m.num_preemptions.clone());
        r.register("vllm:prompt_tokens", "Number of prefill tokens processed", m.prompt_tokens.clone());
        r.register("vllm:generation_tokens", "Number of generation tokens processed", m.generation_tokens.clone());
        r.register("vllm:request_success", "Count of successfully processed requests", m.request_success.clone());
        r.register(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds",
            m.time_to_first_token.clone(),
        );
        r.register(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds",
            m.time_per_output_token.clone(),
        );
        r.register(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds",
            m.e2e_request_latency.clone(),
        );
        r.register(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent waiting in the queue in seconds",
            m.request_queue_time.clone(),
        );
        r.register(
            "vllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache",
            m.prefix_cache_queries.clone(),
        );
        r.register("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", m.prefix_cache_hits.clone());
        r.register(
            "engine:kv_physical_bytes",
            "Physical KV payload bytes of the whole page pool",
            m.kv_physical_bytes.clone(),
        );
        r.register(
            "engine:kv_logical_token_slots",
            "Token slots of the whole page pool",
            m.kv_logical_token_slots.clone(),
        );
        r.register(
            "engine:kv_bytes_per_token",
            "KV payload bytes per token slot across all layers",
            m.kv_bytes_per_token.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn set_inventory(&self, inv: &KvInventory) {
        self.kv_physical_bytes.set(inv.physical_bytes as i64);
        self.kv_logical_token_slots.set(inv.logical_token_slots as i64);
        self.kv_bytes_per_token.set(inv.bytes_per_token as i64);
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The same registry in the Prometheus text format 0.0.4: a counter family is
    /// named with its `_total` suffix in HELP and TYPE, `unknown` is `untyped`, and
    /// there are no `# UNIT` or `# EOF` lines (the samples are the same).
    pub fn encode_prometheus(&self) -> String {
        openmetrics_to_prometheus(&self.encode())
    }
}

/// Content type of [`Metrics::encode`].
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of [`Metrics::encode_prometheus`].
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.split(',').any(|m| m.trim().starts_with("application/openmetrics-text")))
}

/// OpenMetrics text (as `prometheus_client` writes it) in the 0.0.4 format.
fn openmetrics_to_prometheus(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(_, kind)| kind.trim() == "counter")
        .map(|(name, _)| name)
        .collect();
    let family = |name: &str| if counters.contains(name) { format!("{name}_total") } else { name.to_string() };
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            let kind = if kind.trim() == "unknown" { "untyped" } else { kind.trim() };
            out.push_str(&format!("# TYPE {} {kind}\n", family(name)));
        } else if let Some((name, help)) = line.strip_prefix("# HELP ").and_then(|r| r.split_once(' ')) {
            // 0.0.4 escapes only backslash and newline in HELP text.
            out.push_str(&format!("# HELP {} {}\n", family(name), help.replace("\\\"", "\"")));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_vllms() {
        let m = Metrics::new("smol");
        m.num_requests_running.set(2);
        m.request_success.get_or_create(&FinishedLabel { finished_reason: "length".into() }).inc();
        m.time_to_first_token.observe(0.3);
        let text = m.encode();
        assert!(text.contains("vllm:num_requests_running{model_name=\"smol\"} 2"), "{text}");
        assert!(
            text.contains("vllm:request_success_total{model_name=\"smol\",finished_reason=\"length\"} 1"),
            "{text}"
        );
        assert!(text.contains("vllm:time_to_first_token_seconds_count{model_name=\"smol\"} 1"), "{text}");
        assert!(text.contains("vllm:num_preemptions_total"), "{text}");
    }
}
