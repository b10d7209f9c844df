//! Unit tests of the analysis wiring on hand-made summaries: the right arm as the
//! candidate, the sign of latency effects, decisions (all wins, 9 of 10, a failure,
//! a tie, an arm fault), study- and cell-level blocking, and the Holm family across
//! hypotheses. The statistics
//! themselves are tested in `stats`.

use std::collections::BTreeMap;

use crate::analysis::claims::{AnalysisInput, Claim, FailedRequest, UnitRow, analyse};
use crate::evidence::{UnitState, UnitStatus};
use crate::metrics::CellSummary;
use crate::metrics::{FIELDS, OTHER_FIELDS};
use crate::plan::{Blocking, Metric, Plan, parse};
use crate::stats::Rule;

fn plan(blocks: u32, latency_threshold: f64) -> Plan {
    plan_with(blocks, latency_threshold, "")
}

/// `plan`, with `analysis_extra` (e.g. `blocking = "cell"`) added to `[analysis]`.
fn plan_with(blocks: u32, latency_threshold: f64, analysis_extra: &str) -> Plan {
    let text = format!(
        r#"[study]
name = "unit"
seed = 1
[request]
model = "m"
output_tokens = 4
[prompts]
source = "random"
max_token_id = 255
lengths = [8]
documents = 2
[warmup]
prompts = 0
[timing]
settle_s = 0.0
request_timeout_s = 10.0
drain_timeout_s = 10.0
[blocks]
count = {blocks}
arm_order = "alternate"
cell_order = "fixed"
[[arms]]
name = "ctrl"
role = "control"
url = "http://127.0.0.1:1"
[[arms]]
name = "cand"
role = "candidate"
url = "http://127.0.0.1:2"
[[cells]]
name = "closed"
kind = "confirmation"
load = "closed"
concurrency = 2
count = 4
[[cells]]
name = "open"
kind = "confirmation"
load = "open"
rate = 2.0
count = 4
[analysis]
alpha = 0.05
{analysis_extra}
[[hypotheses]]
name = "tput"
metric = "throughput_rps"
cell = "closed"
candidate = "cand"
control = "ctrl"
threshold = 0.01
[[hypotheses]]
name = "lat"
metric = "e2e_p95_intended"
cell = "open"
candidate = "cand"
control = "ctrl"
threshold = {latency_threshold}
"#
    );
    parse(&text).unwrap()
}

fn summary(block: u32, arm: &str, cell: &str, rps: f64, p95_ms: f64, failed: u64) -> CellSummary {
    let v = Some(p95_ms);
    CellSummary {
        cell: cell.into(),
        block,
        arm: arm.into(),
        percentile_method: "nearest_rank".into(),
        requests: 4,
        completed: 4 - failed,
        failed,
        failed_by_class: if failed > 0 { BTreeMap::from([("timeout".to_string(), failed)]) } else { BTreeMap::new() },
        observation_start_ns: 0,
        observation_end_ns: 1_000_000_000,
        duration_s: 1.0,
        total_input_tokens: 32,
        total_output_tokens: 16,
        request_throughput_rps: rps,
        output_token_throughput_tps: rps * 4.0,
        total_token_throughput_tps: rps * 12.0,
        peak_concurrent_requests: 2,
        ttft_samples: 4,
        ttft_mean_ms: v,
        ttft_p50_ms: v,
        ttft_p95_ms: v,
        ttft_p99_ms: v,
        ttft_from_intended_mean_ms: v,
        ttft_from_intended_p50_ms: v,
        ttft_from_intended_p95_ms: v,
        ttft_from_intended_p99_ms: v,
        tpot_samples: 4,
        tpot_mean_ms: v,
        tpot_p50_ms: v,
        tpot_p95_ms: v,
        tpot_p99_ms: v,
        itl_samples: 12,
        itl_mean_ms: v,
        itl_p50_ms: v,
        itl_p95_ms: v,
        itl_p99_ms: v,
        e2e_samples: 4,
        e2e_mean_ms: v,
        e2e_p50_ms: v,
        e2e_p95_ms: Some(p95_ms * 0.5),
        e2e_p99_ms: v,
        e2e_from_intended_mean_ms: v,
        e2e_from_intended_p50_ms: v,
        e2e_from_intended_p95_ms: v,
        e2e_from_intended_p99_ms: v,
        dispatch_lag_samples: 4,
        dispatch_lag_p50_ms: Some(0.01),
        dispatch_lag_p99_ms: Some(0.02),
        dispatch_lag_max_ms: Some(0.03),
        stream_events: 20,
        empty_events: 4,
        multi_token_events: 0,
        requests_without_token_events: 0,
        output_tokens_from_usage_requests: 4,
        output_tokens_from_events_requests: 0,
        usage_event_token_mismatch_requests: 0,
        input_tokens_min: Some(8.0),
        input_tokens_p50: Some(8.0),
        input_tokens_p90: Some(8.0),
        input_tokens_max: Some(8.0),
        output_tokens_min: Some(4.0),
        output_tokens_p50: Some(4.0),
        output_tokens_p90: Some(4.0),
        output_tokens_max: Some(4.0),
        slo_met_requests: None,
        slo_attainment: None,
        goodput_rps: None,
        engine_decode_steps: None,
        engine_tpot_ms: None,
        ..CellSummary::default()
    }
}

/// Summaries for `blocks` blocks: per block, control 10 req/s and p95 100 ms;
/// candidate throughput `cand_rps[b]` and p95 `cand_p95[b]`.
fn study(cand_rps: &[f64], cand_p95: &[f64]) -> Vec<CellSummary> {
    let mut out = Vec::new();
    for (b, (&rps, &p95)) in cand_rps.iter().zip(cand_p95).enumerate() {
        let b = b as u32;
        for cell in ["closed", "open"] {
            out.push(summary(b, "ctrl", cell, 10.0, 100.0, 0));
            out.push(summary(b, "cand", cell, rps, p95, 0));
        }
    }
    out
}

fn units(blocks: u32) -> Vec<UnitRow> {
    (0..blocks)
        .flat_map(|b| {
            ["ctrl", "cand"].map(|a| UnitRow {
                block: b,
                arm: a.into(),
                status: UnitState::Ended(UnitStatus::Completed),
                detail: None,
            })
        })
        .collect()
}

struct Case {
    plan: Plan,
    summaries: Vec<CellSummary>,
    units: Vec<UnitRow>,
    failures: Vec<FailedRequest>,
    unqualified: Vec<String>,
}

impl Case {
    fn new(cand_rps: &[f64], cand_p95: &[f64]) -> Case {
        let n = cand_rps.len() as u32;
        Case {
            plan: plan(n, 0.05),
            summaries: study(cand_rps, cand_p95),
            units: units(n),
            failures: Vec::new(),
            unqualified: Vec::new(),
        }
    }

    fn run(&self) -> crate::analysis::Analysis {
        analyse(&AnalysisInput {
            plan: &self.plan,
            summaries: &self.summaries,
            units: &self.units,
            failures: &self.failures,
            unqualified: &self.unqualified,
        })
        .unwrap()
    }
}

const TEN_WINS_RPS: [f64; 10] = [10.5, 10.6, 10.7, 10.8, 10.9, 11.0, 11.1, 11.2, 11.3, 11.4];
const TEN_WINS_P95: [f64; 10] = [90.0, 89.0, 88.0, 87.0, 86.0, 85.0, 84.0, 83.0, 82.0, 81.0];

#[test]
fn effects_take_the_right_arm_as_candidate_and_orient_latency() {
    let a = Case::new(&[12.5, 7.5], &[75.0, 125.0]).run();
    let tput = &a.hypotheses[0];
    assert_eq!((tput.metric, tput.candidate.as_str(), tput.control.as_str()), (Metric::ThroughputRps, "cand", "ctrl"));
    let e: Vec<_> = tput.blocks.iter().map(|b| (b.control, b.candidate, b.effect)).collect();
    assert_eq!(e, [(Some(10.0), Some(12.5), Some(0.25)), (Some(10.0), Some(7.5), Some(-0.25))]);
    // Latency: a lower candidate p95 is a positive effect (1 - 75/100 = 0.25), and
    // e2e_p95_intended reads the from-intended p95, not the from-send one.
    let lat = &a.hypotheses[1];
    let e: Vec<_> = lat.blocks.iter().map(|b| b.effect).collect();
    assert_eq!(e, [Some(0.25), Some(-0.25)]);
    assert_eq!(lat.blocks[0].control, Some(100.0));
}

#[test]
fn all_wins_are_supported_in_a_family_of_two() {
    let a = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95).run();
    for h in &a.hypotheses {
        assert_eq!(h.claim, Claim::Supported, "{}", h.name);
        let t = h.sign_test.as_ref().unwrap();
        assert_eq!((t.wins, t.n, t.p_value), (10, 10, 1.0 / 1024.0));
        // Holm over two equal p-values: both adjusted to 2/1024.
        assert_eq!(h.holm.adjusted_p, 2.0 / 1024.0);
        let iv = h.interval.as_ref().unwrap();
        assert_eq!((iv.lower_rank, iv.upper_rank), (2, 9));
        assert!((iv.coverage - (1.0 - 22.0 / 1024.0)).abs() < 1e-15);
    }
}

#[test]
fn nine_of_ten_is_supported_and_holm_spans_the_family() {
    let mut rps = TEN_WINS_RPS;
    rps[3] = 9.0;
    let mut p95 = TEN_WINS_P95;
    p95[3] = 120.0;
    p95[7] = 130.0;
    let a = Case::new(&rps, &p95).run();
    let (tput, lat) = (&a.hypotheses[0], &a.hypotheses[1]);
    assert_eq!(tput.sign_test.as_ref().unwrap().p_value, 11.0 / 1024.0);
    assert_eq!(lat.sign_test.as_ref().unwrap().p_value, 56.0 / 1024.0);
    // Holm: the smaller p is multiplied by 2 (22/1024 <= 0.05), the larger by 1.
    assert_eq!(tput.holm.adjusted_p, 22.0 / 1024.0);
    assert_eq!(lat.holm.adjusted_p, 56.0 / 1024.0);
    assert_eq!(tput.claim, Claim::Supported);
    assert_eq!(lat.claim, Claim::NotSupported { failed_rules: vec![Rule::HolmSignTest] });
}

#[test]
fn a_tie_is_a_non_win_and_a_small_median_fails_the_screen() {
    let mut rps = [10.05; 10];
    rps[0] = 10.0;
    let a = Case::new(&rps, &TEN_WINS_P95).run();
    let t = a.hypotheses[0].sign_test.as_ref().unwrap();
    assert_eq!((t.wins, t.ties, t.p_value), (9, 1, 11.0 / 1024.0));
    // Holm passes (11/1024 after the latency p of 1/1024 is doubled), but the median
    // effect 0.5% is below the 1% threshold.
    assert_eq!(a.hypotheses[0].claim, Claim::NotSupported { failed_rules: vec![Rule::MedianThreshold] });
}

fn one_failure_in_open(case: &mut Case) {
    case.failures.push(FailedRequest {
        block: 4,
        arm: "ctrl".into(),
        cell: "open".into(),
        index: 2,
        id: "open/b4/ctrl/2".into(),
        class: "timeout".into(),
        detail: "after 10 s".into(),
    });
}

#[test]
fn study_level_blocking_is_the_default_and_blocks_every_claim() {
    let mut case = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95);
    assert_eq!(case.plan.blocking, Blocking::Study);
    one_failure_in_open(&mut case);
    let a = case.run();
    assert_eq!(a.blocking, Blocking::Study);
    // The throughput hypothesis in the clean cell is blocked too, by a reason that
    // names the failure elsewhere; its own cell had none.
    let Claim::Blocked { failed_requests, reasons } = &a.hypotheses[0].claim else {
        panic!("{:?}", a.hypotheses[0].claim)
    };
    assert_eq!(*failed_requests, 0);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains("study-level") && reasons[0].contains("1 in cell open arm ctrl"), "{reasons:?}");
    // The failing cell's own hypothesis: its own failure, nothing "elsewhere".
    let Claim::Blocked { failed_requests, reasons } = &a.hypotheses[1].claim else {
        panic!("{:?}", a.hypotheses[1].claim)
    };
    assert_eq!((*failed_requests, reasons.len()), (1, 1), "{reasons:?}");
    // The numbers stay beside the claims.
    assert!(a.hypotheses.iter().all(|h| h.tested && h.sign_test.as_ref().unwrap().wins == 10));
}

#[test]
fn a_failure_in_a_descriptive_block_does_not_block_under_study_level() {
    let mut case = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95);
    // Block 10 is past the 10 confirmation blocks.
    one_failure_in_open(&mut case);
    case.failures[0].block = 10;
    let a = case.run();
    assert!(a.hypotheses.iter().all(|h| h.claim == Claim::Supported), "{:?}", a.hypotheses);
}

#[test]
fn one_failed_request_blocks_only_its_hypothesis_under_cell_blocking() {
    let mut case = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95);
    case.plan = plan_with(10, 0.05, "blocking = \"cell\"");
    assert_eq!(case.plan.blocking, Blocking::Cell);
    case.failures.push(FailedRequest {
        block: 4,
        arm: "ctrl".into(),
        cell: "open".into(),
        index: 2,
        id: "open/b4/ctrl/2".into(),
        class: "timeout".into(),
        detail: "after 10 s".into(),
    });
    let a = case.run();
    assert_eq!(a.hypotheses[0].claim, Claim::Supported);
    let lat = &a.hypotheses[1];
    match &lat.claim {
        Claim::Blocked { failed_requests, reasons } => {
            assert_eq!(*failed_requests, 1);
            assert!(reasons[0].contains("1 timeout"), "{reasons:?}");
        }
        other => panic!("{other:?}"),
    }
    // The numbers stay beside the claim.
    assert_eq!(lat.sign_test.as_ref().unwrap().wins, 10);
    assert!(lat.tested);
}

#[test]
fn an_arm_fault_blocks_with_its_reason_and_enters_holm_with_p_one() {
    let mut case = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95);
    case.units[5] = UnitRow {
        block: 2,
        arm: "cand".into(),
        status: UnitState::Ended(UnitStatus::StartFailed),
        detail: Some("boom".into()),
    };
    case.summaries.retain(|s| !(s.block == 2 && s.arm == "cand"));
    let a = case.run();
    for h in &a.hypotheses {
        let Claim::Blocked { failed_requests, reasons } = &h.claim else { panic!("{:?}", h.claim) };
        assert_eq!(*failed_requests, 0);
        assert!(reasons.iter().any(|r| r == "block 2: arm cand: server start_failed: boom"), "{reasons:?}");
        assert!(!h.tested && h.sign_test.is_none());
        assert_eq!((h.holm.p_value, h.holm.adjusted_p), (1.0, 1.0));
        // The nine blocks that exist are still shown.
        assert_eq!(h.blocks.iter().filter(|b| b.effect.is_some()).count(), 9);
        assert_eq!(h.blocks[2].effect, None);
    }
}

#[test]
fn an_unqualified_arm_blocks_its_claims() {
    let mut case = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95);
    case.unqualified = vec!["cand".into()];
    let a = case.run();
    for h in &a.hypotheses {
        assert!(matches!(&h.claim, Claim::Blocked { reasons, .. } if reasons[0].contains("not qualified")));
    }
}

#[test]
fn cell_medians_are_per_arm_and_sum_failures() {
    let mut case = Case::new(&[11.0, 12.0, 13.0], &[90.0, 80.0, 70.0]);
    case.summaries[1] = summary(0, "cand", "closed", 11.0, 90.0, 1);
    let a = case.run();
    let m = a.cells.iter().find(|c| c.cell == "closed" && c.arm == "cand").unwrap();
    assert_eq!((m.blocks.clone(), m.failed, m.requests), (vec![0, 1, 2], 1, 12));
    assert_eq!(m.get("request_throughput_rps"), Some(12.0));
    let c = a.cells.iter().find(|c| c.cell == "open" && c.arm == "ctrl").unwrap();
    assert_eq!(c.get("e2e_from_intended_p95_ms"), Some(100.0));
}

#[test]
fn the_field_list_covers_every_summary_field() {
    // With `[slo]` the goodput fields are present too, with receipts the engine's.
    let mut s = summary(0, "a", "c", 1.0, 1.0, 0);
    (s.slo_met_requests, s.slo_attainment, s.goodput_rps) = (Some(4), Some(1.0), Some(4.0));
    (s.engine_decode_steps, s.engine_tpot_ms) = (Some(9), Some(2.5));
    // With reasoning streams, their measures.
    (s.reasoning_requests, s.total_reasoning_tokens, s.total_content_tokens) = (Some(1), Some(3), Some(1));
    (s.ttfc_samples, s.ttfc_mean_ms, s.ttfc_p50_ms, s.ttfc_p95_ms, s.ttfc_p99_ms) =
        (Some(1), Some(1.0), Some(1.0), Some(1.0), Some(1.0));
    let v = serde_json::to_value(s).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut listed: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).chain(OTHER_FIELDS).collect();
    listed.sort_unstable();
    assert_eq!(keys, listed);
}

#[test]
fn text_formats_are_fixed() {
    use super::text::{pct, pval};
    assert_eq!(pct(0.04213), "+4.21%");
    assert_eq!(pct(-0.5), "-50.00%");
    assert_eq!(pval(11.0 / 1024.0), "0.0107");
    assert_eq!(pval(1.0 / 1024.0), "9.766e-4");
    let a = Case::new(&TEN_WINS_RPS, &TEN_WINS_P95).run();
    let md = super::text::claims_markdown(&a);
    assert!(md.contains("| tput | throughput_rps | closed | cand vs ctrl |"), "{md}");
    assert!(md.contains("10/10") && md.contains("97.8516%") && !md.to_lowercase().contains("equivalen"), "{md}");
}

#[test]
fn the_cell_table_shows_goodput_only_with_slo_targets() {
    let case = Case::new(&[11.0, 12.0, 13.0], &[90.0, 80.0, 70.0]);
    let a = case.run();
    let m = a.cells.iter().find(|c| c.cell == "closed" && c.arm == "cand").unwrap();
    let without = super::text::cell_table(&[m]);
    assert!(!without.contains("goodput") && !without.contains("SLO"), "{without}");
    let mut with = m.clone();
    with.medians.insert("goodput_rps".into(), Some(3.25));
    with.medians.insert("slo_attainment".into(), Some(0.5));
    let table = super::text::cell_table(&[&with]);
    assert!(table.contains("Request goodput (req/s):                 3.25"), "{table}");
    assert!(table.contains("SLO attainment:                          0.500"), "{table}");
}

/// A tuning study: baseline `ctrl` against `fast`, `better` and `same` over two rates.
fn tuning_plan(blocks: u32) -> Plan {
    let arm = |name: &str, role: &str, port: u16| {
        format!("[[arms]]\nname = \"{name}\"\nrole = \"{role}\"\nurl = \"http://127.0.0.1:{port}\"\n")
    };
    let text = format!(
        "[study]\nname = \"tune\"\nseed = 1\n[request]\nmodel = \"m\"\noutput_tokens = 4\n[prompts]\n\
         source = \"random\"\nmax_token_id = 255\nlengths = [8]\ndocuments = 2\n[warmup]\nprompts = 0\n[timing]\n\
         settle_s = 0.0\nrequest_timeout_s = 10.0\ndrain_timeout_s = 10.0\n[blocks]\ncount = {blocks}\n\
         arm_order = \"latin\"\ncell_order = \"alternate\"\n{}{}{}{}\
         [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = [1, 4]\ncount = 4\n\
         [analysis]\nalpha = 0.05\n[tuning]\nbaseline = \"ctrl\"\nthreshold = 0.05\n\
         selection = \"one knob at a time from the defaults\"\nrationale = {{ fast = \"fewer steps per token\" }}\n",
        arm("ctrl", "control", 1),
        arm("fast", "candidate", 2),
        arm("better", "candidate", 3),
        arm("same", "candidate", 4)
    );
    parse(&text).unwrap()
}

/// Per-block mean E2E (ms) per arm and cell; the control is 100 ms everywhere.
fn tuning_case(blocks: u32, value: impl Fn(&str, &str, u32) -> f64) -> Case {
    let arms = ["ctrl", "fast", "better", "same"];
    let mut summaries = Vec::new();
    for b in 0..blocks {
        for cell in ["c-r1", "c-r4"] {
            for arm in arms {
                summaries.push(summary(b, arm, cell, 10.0, value(arm, cell, b), 0));
            }
        }
    }
    let units = (0..blocks)
        .flat_map(|b| {
            arms.map(|a| UnitRow {
                block: b,
                arm: a.into(),
                status: UnitState::Ended(UnitStatus::Completed),
                detail: None,
            })
        })
        .collect();
    Case { plan: tuning_plan(blocks), summaries, units, failures: Vec::new(), unqualified: Vec::new() }
}

#[test]
fn tuning_recommends_the_best_worst_rate_among_configurations_supported_at_every_rate() {
    // fast: 80 ms at both rates (1.25x); better: 50 ms at rate 1 but no better than the
    // baseline at rate 4 (so not supported everywhere); same: the baseline +- 1 ms.
    let case = tuning_case(8, |arm, cell, b| match (arm, cell) {
        ("ctrl", _) => 100.0,
        ("fast", _) => 80.0 - f64::from(b) * 0.1,
        ("better", "c-r1") => 50.0,
        ("better", _) => 100.0 + if b % 2 == 0 { 1.0 } else { -1.0 },
        _ => 100.0 + if b % 2 == 0 { 1.0 } else { -1.0 },
    });
    let a = case.run();
    // 3 configurations x 2 rates, one Holm family.
    assert_eq!(a.hypotheses.len(), 6);
    let s = super::tuning::summarize(&case.plan, &a).unwrap();
    assert_eq!(s.recommended.as_deref(), Some("fast"));
    let supported: Vec<_> = s.configurations.iter().map(|c| (c.candidate.as_str(), c.supported)).collect();
    assert_eq!(supported, [("fast", true), ("better", false), ("same", false)]);
    let mut md = String::new();
    super::tuning::markdown(&mut md, &case.plan, &a, &case.plan.resolved_cells().unwrap());
    assert!(md.contains("**Recommended configuration: fast**"), "{md}");
    assert!(md.contains("one knob at a time from the defaults"), "{md}");
    assert!(md.contains("local optimum"), "{md}");
    assert!(md.contains("- fast: supported at every rate"), "{md}");
    assert!(md.contains("(`tuning.rationale`): fewer steps per token"), "{md}");
    // The seed's line: Rate r: baseline -> candidate (x faster) [interval], decision.
    assert!(md.contains("- Rate 1 req/s (c-r1): ctrl 100.0 ms -> better 50.0 ms (2.00x faster) ["), "{md}");
    assert!(md.contains("- Rate 4 req/s (c-r4): ctrl 100.0 ms -> fast 79.7 ms (1.26x faster) ["), "{md}");
}

#[test]
fn tuning_says_none_supported_when_no_configuration_wins_everywhere() {
    let case = tuning_case(8, |arm, _, b| if arm == "ctrl" { 100.0 } else { 100.0 + f64::from(b % 2) });
    let a = case.run();
    let s = super::tuning::summarize(&case.plan, &a).unwrap();
    assert_eq!(s.recommended, None);
    let mut md = String::new();
    super::tuning::markdown(&mut md, &case.plan, &a, &case.plan.resolved_cells().unwrap());
    assert!(md.contains("**Recommended configuration: none supported**"), "{md}");
    assert!(md.contains("not supported (sign test and median screen failed)"), "{md}");
}
