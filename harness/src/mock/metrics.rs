//! The mock's `/metrics`: vLLM's metric names in the Prometheus text format
//! (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
//! `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
//! `vllm:request_success_total{finished_reason}`, the
//! `vllm:time_to_first_token_seconds` and `vllm:e2e_request_latency_seconds`
//! histograms, and `vllm:kv_cache_usage_perc`, always 0), so that scrapers and
//! identity checks built for vLLM read it. Owns the counters. Must not serve.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// vLLM's TTFT histogram bounds, seconds.
const TTFT_BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0];
/// vLLM's request-latency histogram bounds, seconds.
const E2E_BUCKETS: [f64; 12] = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0];

struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, s: f64) {
        for (i, b) in self.bounds.iter().enumerate() {
            if s <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += s;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, model: &str) {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            out.push_str(&format!("{name}_bucket{{model_name=\"{model}\",le=\"{b}\"}} {c}\n"));
        }
        out.push_str(&format!("{name}_bucket{{model_name=\"{model}\",le=\"+Inf\"}} {}\n", self.count));
        out.push_str(&format!("{name}_sum{{model_name=\"{model}\"}} {}\n", self.sum));
        out.push_str(&format!("{name}_count{{model_name=\"{model}\"}} {}\n", self.count));
    }
}

struct Histograms {
    ttft: Histogram,
    e2e: Histogram,
}

/// The counters behind `/metrics`.
pub struct Metrics {
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    success_length: AtomicU64,
    success_stop: AtomicU64,
    histograms: Mutex<Histograms>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            success_length: AtomicU64::new(0),
            success_stop: AtomicU64::new(0),
            histograms: Mutex::new(Histograms {
                ttft: Histogram::new(&TTFT_BUCKETS),
                e2e: Histogram::new(&E2E_BUCKETS),
            }),
        }
    }
}

impl Metrics {
    /// A first token, `ns` after arrival as scheduled.
    pub fn ttft(&self, ns: u64) {
        if let Ok(mut h) = self.histograms.lock() {
            h.ttft.observe(ns as f64 / 1e9);
        }
    }

    /// A request answered whole.
    pub fn finished(&self, prompt: u64, generated: u64, finish: &str, e2e_ns: u64) {
        self.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
        self.generation_tokens.fetch_add(generated, Ordering::Relaxed);
        let c = if finish == "length" { &self.success_length } else { &self.success_stop };
        c.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.histograms.lock() {
            h.e2e.observe(e2e_ns as f64 / 1e9);
        }
    }

    /// The Prometheus text.
    pub fn render(&self, model: &str, running: u64, waiting: u64) -> String {
        let mut s = String::new();
        let mut gauge = |name: &str, help: &str, v: f64| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{model_name=\"{model}\"}} {v}\n"));
        };
        gauge("vllm:num_requests_running", "Requests in service.", running as f64);
        gauge("vllm:num_requests_waiting", "Requests in the queue.", waiting as f64);
        gauge("vllm:kv_cache_usage_perc", "The mock has no KV cache.", 0.0);
        let mut counter = |name: &str, help: &str, labels: &str, v: u64| {
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}_total{{model_name=\"{model}\"{labels}}} {v}\n"
            ));
        };
        counter(
            "vllm:prompt_tokens",
            "Prompt tokens of answered requests.",
            "",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter("vllm:generation_tokens", "Tokens generated.", "", self.generation_tokens.load(Ordering::Relaxed));
        let (length, stop) = (self.success_length.load(Ordering::Relaxed), self.success_stop.load(Ordering::Relaxed));
        s.push_str("# HELP vllm:request_success Requests answered whole.\n# TYPE vllm:request_success counter\n");
        s.push_str(&format!(
            "vllm:request_success_total{{model_name=\"{model}\",finished_reason=\"length\"}} {length}\n"
        ));
        s.push_str(&format!("vllm:request_success_total{{model_name=\"{model}\",finished_reason=\"stop\"}} {stop}\n"));
        if let Ok(h) = self.histograms.lock() {
            h.ttft.render(&mut s, "vllm:time_to_first_token_seconds", "Scheduled time to first token.", model);
            h.e2e.render(&mut s, "vllm:e2e_request_latency_seconds", "Arrival to the end of the answer.", model);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllms_names_in_the_text_format() {
        let m = Metrics::default();
        m.ttft(3_000_000);
        m.finished(8, 16, "length", 400_000_000);
        let text = m.render("mock", 2, 1);
        let samples = crate::protocol::prom::parse(&text).expect("valid text format");
        let value = |name: &str| samples.iter().find(|s| s.name == name).map(|s| s.value);
        assert_eq!(value("vllm:num_requests_running"), Some(2.0));
        assert_eq!(value("vllm:generation_tokens_total"), Some(16.0));
        assert_eq!(value("vllm:time_to_first_token_seconds_count"), Some(1.0));
        assert!(text.contains("vllm:request_success_total{model_name=\"mock\",finished_reason=\"length\"} 1"));
        assert!(text.contains("vllm:time_to_first_token_seconds_bucket{model_name=\"mock\",le=\"0.005\"} 1"));
    }
}
