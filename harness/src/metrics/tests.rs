//! Hand-built event timelines with every expected number worked out by hand.

use super::*;
use crate::evidence::request_record::{Failure, RecordKey, RequestRecord, StreamEvent, Usage};
use crate::plan::Metric;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// A record with only its identity and intended arrival set.
fn bare(index: u64, intended_ns: u64) -> RequestRecord {
    RequestRecord::planned(RecordKey { cell: "c", block: 0, arm: "a", index }, 0, (8, 16), intended_ns)
}

/// A valid record: dispatch = admitted = intended + lag, send = dispatch + 50 us.
fn valid(
    index: u64,
    intended: u64,
    lag: u64,
    events: &[(u64, u32)],
    done: u64,
    completion: Option<u32>,
) -> RequestRecord {
    let mut r = bare(index, intended);
    r.dispatch_ns = Some(intended + lag);
    r.admitted_ns = r.dispatch_ns;
    r.send_ns = Some(intended + lag + 50 * US);
    r.headers_ns = r.send_ns;
    r.events =
        events.iter().map(|&(t_ns, tokens)| StreamEvent { t_ns, tokens, token_ids: None, reasoning: 0 }).collect();
    r.done_ns = Some(done);
    r.status = Some(200);
    r.usage = completion.map(|c| Usage {
        prompt_tokens: 8,
        completion_tokens: c,
        total_tokens: 8 + c,
        reasoning_tokens: None,
    });
    r
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn role_only_first_chunk_and_usage_only_last_chunk_are_not_tokens() {
    // intended 0, dispatch 100 us, send 150 us; role-only at 3 ms, tokens at 5, 7,
    // 10 ms, usage-only at 10.5 ms, [DONE] at 11 ms.
    let ev = [(3 * MS, 0), (5 * MS, 1), (7 * MS, 1), (10 * MS, 1), (10_500 * US, 0)];
    let m = measure_request(&valid(0, 0, 100 * US, &ev, 11 * MS, Some(3))).unwrap();
    assert_eq!(m.ttft_ns, Some(4_850 * US)); // 5 ms - 0.15 ms, not 3 ms - 0.15 ms
    assert_eq!(m.ttft_intended_ns, Some(5 * MS));
    assert_eq!(m.tpot_ns, Some(2_500_000.0)); // (10 - 5) ms / (3 - 1)
    assert_eq!((m.e2e_ns, m.e2e_intended_ns), (10_850 * US, 11 * MS));
    assert_eq!(m.gaps_ns, [2 * MS, 3 * MS]);
    assert_eq!((m.events, m.empty_events, m.multi_token_events), (5, 2, 0));
    assert_eq!((m.output_tokens, m.output_tokens_source, m.event_tokens), (3, OutputTokenSource::Usage, 3));
    assert_eq!(m.dispatch_lag_ns, 100_000);
}

#[test]
fn empty_chunks_mid_stream_do_not_split_gaps() {
    let ev = [(2 * MS, 1), (3 * MS, 0), (4 * MS, 0), (6 * MS, 1), (9 * MS, 1)];
    let m = measure_request(&valid(0, 0, 0, &ev, 9 * MS, None)).unwrap();
    assert_eq!(m.gaps_ns, [4 * MS, 3 * MS]);
    assert_eq!((m.output_tokens, m.output_tokens_source), (3, OutputTokenSource::Events));
    assert_eq!(m.tpot_ns, Some(3_500_000.0)); // (9 - 2) ms / 2
    assert_eq!((m.events, m.empty_events), (5, 2));
}

#[test]
fn multi_token_chunks_count_every_token() {
    let ev = [(2 * MS, 1), (4 * MS, 3), (8 * MS, 2)];
    let m = measure_request(&valid(0, 0, 0, &ev, 9 * MS, None)).unwrap();
    assert_eq!((m.output_tokens, m.multi_token_events, m.empty_events), (6, 2, 0));
    assert_eq!(m.tpot_ns, Some(1_200_000.0)); // 6 ms / (6 - 1)
    assert_eq!(m.gaps_ns, [2 * MS, 4 * MS]);
    // Usage wins over the event sum, and the disagreement is counted.
    let r = valid(0, 0, 0, &ev, 9 * MS, Some(7));
    let m = measure_request(&r).unwrap();
    assert_eq!((m.output_tokens, m.event_tokens, m.tpot_ns), (7, 6, Some(1_000_000.0)));
    let s = summarize_cell(&[r]).unwrap();
    assert_eq!((s.usage_event_token_mismatch_requests, s.multi_token_events, s.total_output_tokens), (1, 2, 7));
    // All tokens in one event: TPOT is 0 by the formula, not undefined.
    let m = measure_request(&valid(0, 0, 0, &[(2 * MS, 4)], 3 * MS, None)).unwrap();
    assert_eq!((m.tpot_ns, m.gaps_ns.len()), (Some(0.0), 0));
}

#[test]
fn single_token_outputs_have_no_tpot() {
    let a = valid(0, 0, 0, &[(MS, 0), (3 * MS, 1)], 4 * MS, Some(1));
    let b = valid(1, 10 * MS, 0, &[(12 * MS, 1)], 13 * MS, None);
    let m = measure_request(&a).unwrap();
    assert_eq!((m.ttft_ns, m.tpot_ns), (Some(2_950 * US), None));
    let s = summarize_cell(&[a, b]).unwrap();
    assert_eq!((s.completed, s.tpot_samples, s.tpot_p50_ms, s.tpot_mean_ms), (2, 0, None, None));
    assert_eq!((s.ttft_samples, s.itl_samples), (2, 0));
    assert!(render_table(&s).contains("Median TPOT (ms):                        n/a\n"));
}

#[test]
fn valid_request_without_token_events_has_no_ttft() {
    let s = summarize_cell(&[valid(0, 0, 0, &[(MS, 0)], 2 * MS, Some(0))]).unwrap();
    assert_eq!((s.completed, s.ttft_samples, s.requests_without_token_events, s.e2e_samples), (1, 0, 1, 1));
    assert_eq!(s.ttft_p99_ms, None);
}

#[test]
fn stream_cut_before_done_is_a_failure_and_not_a_latency() {
    let a = valid(0, 0, 0, &[(2 * MS, 1), (5 * MS, 1)], 10 * MS + 50 * US, Some(2));
    let b = valid(1, 0, 0, &[(4 * MS, 1), (9 * MS, 1)], 20 * MS + 50 * US, Some(2));
    let mut cut = valid(2, 0, 0, &[(100 * MS, 1), (500 * MS, 1)], 0, None);
    cut.done_ns = None;
    cut.failure = Some(Failure::AfterHeaders { detail: "reset".into() });
    let mut unclassified = cut.clone();
    unclassified.index = 3;
    unclassified.failure = None;
    let mut short = valid(4, 0, 0, &[(3 * MS, 1)], 4 * MS, Some(1));
    short.failure = Some(Failure::ShortOutput { expected: 16, got: 1 });
    assert!(matches!(measure_request(&cut), Err(MetricsError::NotValid { .. })));
    assert!(matches!(measure_request(&short), Err(MetricsError::NotValid { .. })));

    let s = summarize_cell(&[a, b, cut, unclassified, short]).unwrap();
    assert_eq!((s.requests, s.completed, s.failed), (5, 2, 3));
    let classes: Vec<(&str, u64)> = s.failed_by_class.iter().map(|(k, &v)| (k.as_str(), v)).collect();
    assert_eq!(classes, [("after_headers", 1), (INCOMPLETE_CLASS, 1), ("short_output", 1)]);
    // Percentiles over the two valid requests only: E2E 10 and 20 ms.
    assert_eq!(s.e2e_samples, 2);
    assert!(close(s.e2e_p99_ms, 20.0) && close(s.e2e_p50_ms, 10.0) && close(s.e2e_mean_ms, 15.0));
    assert!(close(s.ttft_p99_ms, 3.95)); // 4 ms - 0.05 ms
    assert_eq!((s.stream_events, s.total_output_tokens), (4, 4));
    // The cut request's last event (500 ms) ends the observation: 2 valid / 0.5 s.
    assert_eq!((s.observation_start_ns, s.observation_end_ns), (0, 500 * MS));
    assert_eq!(s.request_throughput_rps, 4.0);
    assert_eq!(s.output_token_throughput_tps, 8.0);
    let table = render_table(&s);
    assert!(table.contains("Failed requests:                         3\n"));
    assert!(table.contains("after_headers:                           1\n"));
    assert!(table.contains("incomplete_unclassified:                 1\n"));
}

#[test]
fn finite_throughput_runs_from_first_intended_arrival_to_last_completion() {
    // Four requests intended at 2.00, 2.25, 2.50, 2.75 s on the study clock; the
    // last completes at 3.00 s: interval 1 s exactly.
    let recs: Vec<RequestRecord> = (0..4u64)
        .map(|i| {
            let t = 2_000 * MS + i * 250 * MS;
            let done = if i == 3 { 3_000 * MS } else { t + 50 * MS };
            valid(i, t, 0, &[(t + 10 * MS, 1), (t + 20 * MS, 3)], done, Some(4))
        })
        .collect();
    let s = summarize_cell(&recs).unwrap();
    assert_eq!((s.observation_start_ns, s.observation_end_ns, s.duration_s), (2_000 * MS, 3_000 * MS, 1.0));
    assert_eq!((s.total_input_tokens, s.total_output_tokens), (32, 16));
    assert_eq!(s.request_throughput_rps, 4.0);
    assert_eq!(s.output_token_throughput_tps, 16.0);
    assert_eq!(s.total_token_throughput_tps, 48.0);
    assert_eq!((s.stream_events, s.empty_events, s.multi_token_events), (8, 0, 4));
    assert_eq!(s.peak_concurrent_requests, 1); // 2.00-2.05, 2.25-2.30, 2.50-2.55, 2.75-3.00 s
    // Every TPOT is 10 ms / 3, every ITL 10 ms.
    assert!(close(s.tpot_p95_ms, 10.0 / 3.0) && close(s.itl_p99_ms, 10.0) && s.itl_samples == 4);
}

#[test]
fn percentiles_are_nearest_rank_over_valid_requests() {
    // TTFT from send = i ms for i = 1..=20 (in scrambled order), dispatch lag i * 10 us.
    let recs: Vec<RequestRecord> = (1..=20u64)
        .map(|k| {
            let i = (k * 7) % 20 + 1; // a permutation of 1..=20
            let t = k * 100 * MS;
            let send = t + i * 10 * US + 50 * US;
            valid(k, t, i * 10 * US, &[(send + i * MS, 1)], send + i * MS + MS, None)
        })
        .collect();
    let s = summarize_cell(&recs).unwrap();
    assert_eq!(s.percentile_method, "nearest_rank");
    assert!(close(s.ttft_p50_ms, 10.0) && close(s.ttft_p95_ms, 19.0) && close(s.ttft_p99_ms, 20.0));
    assert!(close(s.ttft_mean_ms, 10.5));
    assert!(close(s.e2e_p95_ms, 20.0)); // E2E = TTFT + 1 ms
    assert!(close(s.dispatch_lag_p50_ms, 0.1) && close(s.dispatch_lag_p99_ms, 0.2));
    assert!(close(s.dispatch_lag_max_ms, 0.2));
    // From intended = lag + 50 us + TTFT: p95 is request i = 19.
    assert!(close(s.ttft_from_intended_p95_ms, 19.0 + 0.19 + 0.05));
    assert!(close(s.e2e_from_intended_p99_ms, 21.0 + 0.2 + 0.05));
}

#[test]
fn requested_percentiles_are_the_summarys_nearest_ranks_of_valid_requests() {
    // TTFT from send = i ms for i = 1..=20, E2E = TTFT + 1 ms, one token each (no
    // TPOT, no ITL); a 21st record failed and counts for nothing.
    let mut recs: Vec<RequestRecord> = (1..=20u64)
        .map(|i| {
            let send = i * 100 * MS + 50 * US;
            valid(i, i * 100 * MS, 0, &[(send + i * MS, 1)], send + i * MS + MS, None)
        })
        .collect();
    let mut failed = bare(21, 0);
    failed.failure = Some(Failure::Timeout { after_ns: MS });
    recs.push(failed);
    let rows = latency_percentiles_ms(&recs, &[0.0, 50.0, 90.0, 99.0, 100.0]).unwrap();
    let ttft: Vec<Option<f64>> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(ttft, [1.0, 10.0, 18.0, 20.0, 20.0].map(Some), "nearest rank: ceil(p n / 100)-th of 20");
    assert!(rows.iter().all(|r| r[1].is_none() && r[2].is_none()), "one token each: no TPOT, no gap: {rows:?}");
    assert_eq!(rows[2][3], Some(19.0), "E2E p90 = TTFT p90 + 1 ms");
    // The summary's p50/p95/p99 are the same numbers.
    let s = summarize_cell(&recs).unwrap();
    let same = latency_percentiles_ms(&recs, &[50.0, 95.0, 99.0]).unwrap();
    assert_eq!([same[0][0], same[1][0], same[2][0]], [s.ttft_p50_ms, s.ttft_p95_ms, s.ttft_p99_ms]);
    assert_eq!([same[0][3], same[1][3], same[2][3]], [s.e2e_p50_ms, s.e2e_p95_ms, s.e2e_p99_ms]);
}

#[test]
fn itl_pools_gaps_of_all_valid_requests() {
    let a = valid(0, 0, 0, &[(MS, 1), (2 * MS, 1), (4 * MS, 1)], 5 * MS, None); // gaps 1, 2
    let b = valid(1, 0, 0, &[(MS, 1), (4 * MS, 1)], 5 * MS, None); // gap 3
    let s = summarize_cell(&[a, b]).unwrap();
    assert_eq!(s.itl_samples, 3);
    assert!(close(s.itl_mean_ms, 2.0) && close(s.itl_p50_ms, 2.0) && close(s.itl_p99_ms, 3.0));
    // TPOT per request: 3 ms / 2 = 1.5 and 3 ms / 1 = 3; mean 2.25, not the ITL mean.
    assert!(close(s.tpot_mean_ms, 2.25) && close(s.tpot_p50_ms, 1.5));
}

#[test]
fn early_dispatch_shows_as_negative_lag() {
    let mut r = valid(0, 10 * MS, 0, &[(12 * MS, 1)], 13 * MS, None);
    r.dispatch_ns = Some(10 * MS - 50 * US);
    assert_eq!(measure_request(&r).unwrap().dispatch_lag_ns, -50_000);
    assert!(close(summarize_cell(&[r]).unwrap().dispatch_lag_max_ms, -0.05));
}

#[test]
fn peak_concurrency_counts_overlapping_requests() {
    let mk = |i: u64, send: u64, done: u64| valid(i, send - 50 * US, 0, &[(send + MS, 1)], done, None);
    let s = summarize_cell(&[mk(0, MS, 10 * MS), mk(1, 5 * MS, 15 * MS), mk(2, 10 * MS, 20 * MS)]).unwrap();
    assert_eq!(s.peak_concurrent_requests, 2);
    let s = summarize_cell(&[mk(0, MS, 12 * MS), mk(1, 5 * MS, 15 * MS), mk(2, 10 * MS, 20 * MS)]).unwrap();
    assert_eq!(s.peak_concurrent_requests, 3);
}

#[test]
fn inconsistent_input_is_an_error_not_a_number() {
    assert_eq!(summarize_cell(&[]), Err(MetricsError::Empty));
    let ok = valid(0, 0, 0, &[(2 * MS, 1)], 3 * MS, None);
    let mut other = ok.clone();
    other.index = 1;
    other.arm = "b".into();
    assert!(matches!(summarize_cell(&[ok.clone(), other]), Err(MetricsError::MixedCell { .. })));
    assert!(matches!(summarize_cell(&[ok.clone(), ok.clone()]), Err(MetricsError::DuplicateIndex { index: 0, .. })));

    let out_of_order = valid(0, 0, 0, &[(3 * MS, 1), (2 * MS, 1)], 4 * MS, None);
    assert!(matches!(measure_request(&out_of_order), Err(MetricsError::OutOfOrder { earlier: "previous event", .. })));
    let before_send = valid(0, 0, 0, &[(10 * US, 1)], 4 * MS, None); // send is at 50 us
    assert!(matches!(summarize_cell(&[before_send]), Err(MetricsError::OutOfOrder { later: "first token", .. })));
    let done_early = valid(0, 0, 0, &[(3 * MS, 1)], 2 * MS, None);
    assert!(matches!(measure_request(&done_early), Err(MetricsError::OutOfOrder { later: "[DONE]", .. })));
    let mut no_send = ok.clone();
    no_send.send_ns = None;
    assert_eq!(
        measure_request(&no_send),
        Err(MetricsError::MissingTimestamp { id: "c/b0/a/0".into(), field: "send_ns" })
    );
    let mut late_dispatch = ok.clone();
    late_dispatch.dispatch_ns = Some(MS);
    assert!(matches!(measure_request(&late_dispatch), Err(MetricsError::OutOfOrder { later: "HTTP send", .. })));
    // A lone failure that never got past its intended arrival spans no time.
    let mut never = bare(0, 5 * MS);
    never.failure = Some(Failure::Connect { detail: "refused".into() });
    assert_eq!(summarize_cell(&[never]), Err(MetricsError::EmptyInterval { start_ns: 5 * MS, end_ns: 5 * MS }));
}

#[test]
fn summary_serializes_with_stable_unit_suffixed_names() {
    let s = summarize_cell(&[valid(0, 0, 0, &[(2 * MS, 1), (3 * MS, 1)], 4 * MS, Some(2))]).unwrap();
    let json = serde_json::to_value(&s).unwrap();
    for key in [
        "ttft_p95_ms",
        "ttft_from_intended_p99_ms",
        "tpot_p95_ms",
        "itl_p50_ms",
        "e2e_p95_ms",
        "e2e_from_intended_p95_ms",
        "dispatch_lag_p99_ms",
        "dispatch_lag_max_ms",
        "request_throughput_rps",
        "output_token_throughput_tps",
        "total_token_throughput_tps",
        "duration_s",
        "failed_by_class",
        "empty_events",
        "multi_token_events",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["request_throughput_rps"], 250.0); // 1 request / 4 ms
    let back: CellSummary = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
}

#[test]
fn plan_metrics_map_to_summary_fields() {
    let a = valid(0, 0, 100 * US, &[(2 * MS, 1), (3 * MS, 1), (7 * MS, 1)], 8 * MS, None);
    let s = summarize_cell(&[a]).unwrap();
    assert_eq!(s.metric(Metric::ThroughputRps), Some(125.0));
    assert_eq!(s.metric(Metric::OutputTokensPerS), Some(375.0));
    assert!(close(s.metric(Metric::TtftP95), 1.85)); // 2 - 0.15 ms
    assert!(close(s.metric(Metric::TpotP95), 2.5)); // 5 ms / 2
    assert!(close(s.metric(Metric::E2eP95), 7.85));
    assert!(close(s.metric(Metric::E2eP95Intended), 8.0));
}

#[test]
fn mean_latency_metrics_average_valid_requests_only() {
    // Sends at 0.15 and 1.15 ms (intended 0 and 1 ms, lag 0.1 ms, send + 0.05 ms).
    // E2E from send: 4 - 0.15 = 3.85 ms and 9 - 1.15 = 7.85 ms; mean 5.85 ms.
    // TTFT from send: 2 - 0.15 = 1.85 ms and 4 - 1.15 = 2.85 ms; mean 2.35 ms.
    let a = valid(0, 0, 100 * US, &[(2 * MS, 1), (3 * MS, 1)], 4 * MS, Some(2));
    let b = valid(1, MS, 100 * US, &[(4 * MS, 1), (6 * MS, 1)], 9 * MS, Some(2));
    // A timed-out request (first token at 3 ms, no [DONE]) is counted, never averaged.
    let mut cut = valid(2, 2 * MS, 100 * US, &[(3 * MS, 1)], 0, None);
    cut.done_ns = None;
    cut.failure = Some(Failure::Timeout { after_ns: 60 * MS });
    let s = summarize_cell(&[a, b, cut]).unwrap();
    assert_eq!((s.completed, s.failed), (2, 1));
    assert!(close(s.metric(Metric::E2eMean), 5.85), "{:?}", s.e2e_mean_ms);
    assert!(close(s.metric(Metric::TtftMean), 2.35), "{:?}", s.ttft_mean_ms);
    // Not the p95 (nearest rank of two values: the larger).
    assert!(close(s.metric(Metric::E2eP95), 7.85));
    assert_eq!(Metric::E2eMean.kind(), crate::plan::MetricKind::Latency);
}

#[test]
fn table_follows_the_vllm_layout() {
    let ev = [(3 * MS, 0), (5 * MS, 1), (7 * MS, 1), (10 * MS, 1), (10_500 * US, 0)];
    let s = summarize_cell(&[valid(0, 0, 100 * US, &ev, 11 * MS, Some(3))]).unwrap();
    let t = render_table(&s);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "============ Serving Benchmark Result ============");
    for want in [
        "Successful requests:                     1",
        "Failed requests:                         0",
        "Benchmark duration (s):                  0.01",
        "Total input tokens:                      8",
        "Total generated tokens:                  3",
        "Request throughput (req/s):              90.91",
        "Output token throughput (tok/s):         272.73",
        "Total Token throughput (tok/s):          1000.00",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          4.85",
        "Median TTFT (ms):                        4.85",
        "P95 TTFT (ms):                           4.85",
        "P99 TTFT (ms):                           4.85",
        "-----Time per Output Token (excl. 1st token)------",
        "Mean TPOT (ms):                          2.50",
        "---------------Inter-token Latency----------------",
        "P99 ITL (ms):                            3.00",
        "----------------End-to-end Latency----------------",
        "Median E2EL (ms):                        10.85",
        "============= From intended arrival ==============",
        "P95 TTFT (ms):                           5.00",
        "P99 E2EL (ms):                           11.00",
        "Max dispatch lag (ms):                   0.100",
        "(none)",
        "Empty events (no tokens):                2",
        "Multi-token events:                      0",
    ] {
        assert!(lines.contains(&want), "missing line {want:?} in\n{t}");
    }
    assert!(lines.iter().all(|l| !l.ends_with(' ')), "trailing space in\n{t}");
    assert!(lines.iter().filter(|l| l.starts_with(['=', '-'])).all(|l| l.len() == 50));
    assert!(t.contains("Percentiles: nearest rank over 1 valid completed requests"));
}

#[test]
fn levels_are_exactly_50_95_99_on_100_requests() {
    // E2E from send = i ms for i = 1..=100: nearest rank p50/p95/p99 are 50/95/99 ms.
    let recs: Vec<RequestRecord> = (1..=100u64)
        .map(|i| {
            let t = i * 200 * MS;
            valid(i, t, 0, &[(t + 50 * US + i * MS / 2, 1)], t + 50 * US + i * MS, None)
        })
        .collect();
    let s = summarize_cell(&recs).unwrap();
    assert!(close(s.e2e_p50_ms, 50.0) && close(s.e2e_p95_ms, 95.0) && close(s.e2e_p99_ms, 99.0));
    assert!(close(s.ttft_p95_ms, 47.5) && close(s.e2e_mean_ms, 50.5));
}

#[test]
fn a_timeout_ends_where_it_fired() {
    // A valid request ends at 10 ms; a request sent at 1 ms times out 99 ms later with
    // its last event at 5 ms: the observation runs to 100 ms, not 10 ms.
    let ok = valid(0, 0, 0, &[(2 * MS, 1)], 10 * MS, None);
    let mut slow = valid(1, 950 * US, 0, &[(5 * MS, 1)], 0, None);
    slow.done_ns = None;
    slow.failure = Some(Failure::Timeout { after_ns: 99 * MS });
    assert_eq!(last_seen_ns(&slow), 100 * MS);
    let s = summarize_cell(&[ok, slow]).unwrap();
    assert_eq!((s.observation_end_ns, s.request_throughput_rps, s.failed), (100 * MS, 10.0, 1));
    assert_eq!(s.failed_by_class.get("timeout"), Some(&1));
}

#[test]
fn goodput_from_hand_built_records() {
    use crate::plan::Slo;
    // Request 0: intended 0, send 50 us, tokens at 5, 7, 10 ms, [DONE] 11 ms, usage 3:
    // TTFT 4.95 ms, E2E 10.95 ms, vLLM TPOT (10.95 - 4.95) / 2 = 3 ms.
    let a = valid(0, 0, 0, &[(5 * MS, 1), (7 * MS, 1), (10 * MS, 1)], 11 * MS, Some(3));
    // Request 1: intended 20 ms, tokens at 30, 31 ms, [DONE] 40 ms: TTFT 9.95 ms,
    // E2E 19.95 ms, TPOT (19.95 - 9.95) / 1 = 10 ms.
    let b = valid(1, 20 * MS, 0, &[(30 * MS, 1), (31 * MS, 1)], 40 * MS, Some(2));
    let mut c = bare(2, 30 * MS);
    c.failure = Some(Failure::Timeout { after_ns: 5 * MS });
    let records = [a, b, c];
    // No [slo]: no goodput fields.
    let s = summarize_cell(&records).unwrap();
    assert_eq!((s.slo_met_requests, s.goodput_rps), (None, None));
    let text = serde_json::to_string(&s).unwrap();
    assert!(!text.contains("goodput"), "{text}");
    // TTFT <= 5 ms: only request 0; the interval is 0 to 40 ms.
    let slo = Slo { ttft_ms: Some(5.0), tpot_ms: None, e2e_ms: None };
    let s = summarize_cell_with_slo(&records, Some(&slo)).unwrap();
    assert_eq!(s.slo_met_requests, Some(1));
    assert_eq!(s.slo_attainment, Some(0.5));
    assert!(close(s.goodput_rps, 1.0 / 0.04));
    assert!(close(s.metric(Metric::GoodputRps), 25.0));
    let table = render_table(&s);
    assert!(table.lines().any(|l| l.starts_with("Request goodput (req/s):") && l.ends_with("25.00")), "{table}");
    assert!(!render_table(&summarize_cell(&records).unwrap()).contains("goodput"));
    // TPOT <= 10 ms and E2E <= 20 ms: both valid requests (the timeout never counts).
    let slo = Slo { ttft_ms: None, tpot_ms: Some(10.0), e2e_ms: Some(20.0) };
    let s = summarize_cell_with_slo(&records, Some(&slo)).unwrap();
    assert_eq!((s.slo_met_requests, s.slo_attainment), (Some(2), Some(1.0)));
    // TPOT <= 9.99 ms drops request 1.
    let slo = Slo { ttft_ms: None, tpot_ms: Some(9.99), e2e_ms: None };
    assert_eq!(summarize_cell_with_slo(&records, Some(&slo)).unwrap().slo_met_requests, Some(1));
}

#[test]
fn a_light_record_has_ttft_and_e2e_but_no_tpot_gaps_or_mismatch() {
    // The light recorder kept the first token event (at 2 ms) of a 3-token output.
    let mut r = valid(0, 0, 0, &[(2 * MS, 1)], 8 * MS + 50 * US, Some(3));
    r.light = true;
    let m = measure_request(&r).unwrap();
    assert_eq!((m.ttft_ns, m.tpot_ns, m.e2e_ns), (Some(2 * MS - 50 * US), None, 8 * MS));
    assert!(m.gaps_ns.is_empty() && m.light);
    let s = summarize_cell(&[r.clone()]).unwrap();
    assert_eq!((s.tpot_samples, s.itl_samples, s.usage_event_token_mismatch_requests), (0, 0, 0));
    assert_eq!(s.total_output_tokens, 3);
    // The same events from the full recorder would be a 1-token stream that usage contradicts.
    r.light = false;
    let s = summarize_cell(&[r]).unwrap();
    assert_eq!((s.tpot_samples, s.usage_event_token_mismatch_requests), (1, 1));
}
