//! The figures' content, read back from their SVG text: `[slo]` lines, median
//! markers, tick labels, sweeps joined in load order, the effect panel's verdict,
//! and the chart a single load level gets instead of `latency_vs_load`.

use super::plots::p50_markers;
use super::*;
use crate::plan::{Arrival, CellKind};

/// Every `<text>` element's content, unescaped enough for these checks.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split_once("</text>")).map(|(c, _)| c.to_string()))
        .map(|t| {
            let t = t.trim().replace("&lt;", "<").replace("&gt;", ">").replace("&apos;", "'").replace("&quot;", "\"");
            t.replace("&amp;", "&")
        })
        .collect()
}

fn render(fig: &impl Figure) -> (String, Vec<String>) {
    assert!(font_ready(), "the compiled-in font registers");
    let svg = svg(fig).expect("the figure draws");
    let t = texts(&svg);
    (svg, t)
}

/// The `[slo]` line colour as the SVG backend writes it.
const SLO_STROKE: &str = "stroke=\"#CC0066\"";

fn series(label: &str, per_rate: &[(f64, [f64; 3])]) -> Series {
    Series { label: label.into(), points: per_rate.iter().map(|(x, v)| (*x, v.to_vec())).collect() }
}

fn latency_vs_load(slo: Option<f64>) -> LatencyVsLoad {
    LatencyVsLoad {
        title: "t: latency vs load".into(),
        series: vec![
            series("a (control)", &[(2.0, [310.0, 320.0, 330.0]), (8.0, [900.0, 950.0, 1010.0])]),
            series("b (candidate)", &[(2.0, [300.0, 305.0, 315.0]), (8.0, [800.0, 870.0, 905.0])]),
        ],
        slo_e2e_ms: slo,
    }
}

fn distributions(slo: (Option<f64>, Option<f64>)) -> Distributions {
    Distributions {
        name: "dist_c".into(),
        title: "t: dist".into(),
        arms: vec!["a (control)".into(), "b (candidate)".into()],
        ttft: vec![vec![vec![10.0, 12.0, 14.0], vec![11.0, 13.0, 15.0, 17.0]], vec![vec![9.0, 10.0, 11.0], vec![]]],
        tpot: vec![vec![vec![2.0, 2.5, 3.0], vec![2.2, 2.4]], vec![vec![1.9, 2.0, 2.1], vec![]]],
        slo_ttft_ms: slo.0,
        slo_tpot_ms: slo.1,
    }
}

#[test]
fn slo_targets_are_dashed_lines_where_their_quantity_is_drawn() {
    let (svg, t) = render(&latency_vs_load(Some(2000.0)));
    assert!(t.iter().any(|x| x == "[slo] e2e_ms 2,000 ms (per request, from HTTP send)"), "{t:?}");
    assert!(svg.contains(SLO_STROKE), "the dashed line is drawn");
    let (svg, t) = render(&latency_vs_load(None));
    assert!(!svg.contains(SLO_STROKE) && !t.iter().any(|x| x.contains("[slo]")), "no target, no line: {t:?}");

    let (svg, t) = render(&distributions((Some(500.0), Some(40.0))));
    assert!(t.iter().any(|x| x == "[slo] 500 ms (ttft_ms)"), "{t:?}");
    assert!(t.iter().any(|x| x.starts_with("[slo] 40 ms (tpot_ms, vLLM")), "{t:?}");
    assert!(svg.matches(SLO_STROKE).count() >= 2, "one line per panel");
    let (_, t) = render(&distributions((None, Some(40.0))));
    assert_eq!(t.iter().filter(|x| x.starts_with("[slo]")).count(), 1, "only the TPOT target: {t:?}");

    let (svg, t) = render(&tradeoff(Some(30_000.0)));
    assert!(t.iter().any(|x| x == "[slo] e2e_ms 30 s (per request)"), "in seconds on a seconds axis: {t:?}");
    assert!(svg.contains(SLO_STROKE));
}

#[test]
fn distributions_mark_each_block_p50_and_name_their_median_as_the_report_does() {
    let d = distributions((None, None));
    // The nearest-rank p50 (report.md's): of 11, 13, 15, 17 that is 13, not 14.
    assert_eq!(p50_markers(&d.ttft), [vec![(12.0, 0.5), (13.0, 0.5)], vec![(10.0, 0.5)]]);
    let (svg, t) = render(&d);
    assert_eq!(t.iter().filter(|x| *x == "p50 of each block (marker at 0.5)").count(), 2, "{t:?}");
    assert!(t.iter().any(|x| x == "a (control): p50 12.5 ms (median across blocks, as report.md)"), "{t:?}");
    assert!(t.iter().any(|x| x == "b (candidate): p50 10 ms (median across blocks, as report.md)"), "{t:?}");
    // The black ring of each marker: 3 block medians per panel, two panels.
    let rings = svg.matches("r=\"5\" opacity=\"1\" fill=\"none\" stroke=\"#000000\"").count();
    assert_eq!(rings, 6, "{svg}");
}

fn cell_points(cell: &str, blocks: &[(f64, f64)]) -> CellPoints {
    CellPoints { cell: cell.into(), blocks: blocks.to_vec() }
}

fn tradeoff(slo: Option<f64>) -> ThroughputVsLatency {
    ThroughputVsLatency {
        title: "t: throughput vs latency".into(),
        arms: vec![ArmPoints {
            label: "server (control)".into(),
            cells: vec![
                cell_points("s-r8", &[(21_000.0, 52_000.0), (20_500.0, 61_000.0)]),
                cell_points("s-r2", &[(9_000.0, 15_000.0), (9_500.0, 16_000.0)]),
                cell_points("c-c4", &[(14_000.0, 20_000.0)]),
            ],
        }],
        sweeps: vec![vec!["s-r2".into(), "s-r8".into()]],
        slo_e2e_ms: slo,
    }
}

#[test]
fn tick_labels_group_thousands_and_large_latencies_read_in_seconds() {
    let (_, t) = render(&tradeoff(None));
    assert!(t.iter().any(|x| x == "p95 E2E latency from HTTP send (s)"), "{t:?}");
    let grouped = |x: &str| {
        let parts: Vec<&str> = x.split(',').collect();
        parts.len() > 1 && parts[1..].iter().all(|p| p.len() == 3) && x.chars().all(|c| c.is_ascii_digit() || c == ',')
    };
    assert!(t.iter().any(|x| grouped(x)), "a throughput tick like 12,000: {t:?}");
    let raw = |x: &str| x.len() >= 4 && x.chars().all(|c| c.is_ascii_digit());
    assert!(!t.iter().any(|x| raw(x)), "no ungrouped number of four digits or more: {t:?}");
    // The same latencies in ms stay ms below 10 s.
    let (_, t) = render(&latency_vs_load(None));
    assert!(t.iter().any(|x| x == "p95 E2E latency from intended arrival (ms)"), "{t:?}");
}

fn resolved(name: &str, load: ResolvedLoad) -> ResolvedCell {
    ResolvedCell {
        name: name.into(),
        kind: CellKind::Descriptive,
        body: crate::plan::BodyKind { endpoint: crate::plan::Endpoint::Completions, token_ids: true },
        recorder: crate::plan::Recorder::Full,
        load,
        count: 1,
        input_tokens: Some(8),
        retries: 0,
        max_concurrency: None,
    }
}

#[test]
fn sweeps_join_their_cells_in_load_order() {
    let open = |r: f64| ResolvedLoad::Open { rate_rps: r, arrival: Arrival::Poisson };
    let closed = |c: u32| ResolvedLoad::Closed { concurrency: c };
    let cells = [
        resolved("s-r8", open(8.0)),
        resolved("s-r2", open(2.0)),
        resolved("single", closed(4)),
        resolved("cl-c4", closed(4)),
        resolved("cl-c1", closed(1)),
        resolved("lone-r3", open(3.0)),
        resolved("odd-r5", open(6.0)),
        resolved("odd-r7", open(7.0)),
    ];
    let got = sweeps(&cells);
    assert_eq!(got, [vec!["s-r2", "s-r8"], vec!["cl-c1", "cl-c4"]], "odd-r5 is not named for its rate");
    let fig = tradeoff(None);
    let lines = fig.sweep_lines();
    assert_eq!(lines, [vec![vec![(9_250.0, 15_500.0), (20_750.0, 56_500.0)]]], "medians, lowest load first");
    let (_, t) = render(&fig);
    for cell in ["s-r2", "s-r8", "c-c4"] {
        assert!(t.iter().any(|x| x == cell), "{cell} named: {t:?}");
    }
}

#[test]
fn one_load_level_gets_its_per_block_chart_instead_of_a_column() {
    assert_eq!(open_charts(&[]), OpenCharts::None);
    assert_eq!(open_charts(&[4.0]), OpenCharts::PerCell);
    assert_eq!(open_charts(&[4.0, 4.0]), OpenCharts::PerCell, "two cells at one load are one level");
    assert_eq!(open_charts(&[4.0, 8.0]), OpenCharts::AgainstLoad);
    let fig = PerBlock {
        name: "latency_c".into(),
        title: "t: p95 E2E latency per block, c".into(),
        arms: vec!["a (control)".into(), "b (candidate)".into()],
        values: vec![vec![(0, 120.0), (1, 130.0)], vec![(0, 110.0), (1, 125.0)]],
        quantity: Quantity::Latency("p95 E2E latency from intended arrival".into()),
        slo: Some((150.0, "[slo] e2e_ms 150 ms".into())),
    };
    let (svg, t) = render(&fig);
    assert!(t.iter().any(|x| x == "p95 E2E latency from intended arrival (ms; axis not from zero)"), "{t:?}");
    assert!(t.iter().any(|x| x == "a (control)") && t.iter().any(|x| x == "b0"), "arms on x, blocks named: {t:?}");
    assert!(svg.contains(SLO_STROKE));
}

#[test]
fn the_effect_chart_shows_each_block_effect_the_threshold_the_median_and_the_verdict() {
    let fig = EffectPerBlock {
        name: "effect_h".into(),
        title: "t: hypothesis h".into(),
        values: PerBlock {
            name: String::new(),
            title: String::new(),
            arms: vec!["a (control)".into(), "b (candidate)".into()],
            values: vec![vec![(0, 10.0), (1, 11.0), (2, 10.5)], vec![(0, 10.5), (1, 11.2), (2, 10.4)]],
            quantity: Quantity::Other("throughput_rps (req/s)".into()),
            slo: None,
        },
        effects: vec![(0, 0.05), (1, 0.018), (2, -0.0095)],
        definition: "candidate / control - 1".into(),
        threshold: 0.01,
        median: Some(0.018),
        interval: Some((-0.0095, 0.05, 0.75)),
        verdict: "not supported (sign test failed)".into(),
    };
    let (_, t) = render(&fig);
    for want in [
        "verdict: not supported (sign test failed)",
        "threshold +1%",
        "median effect +1.8%",
        "75% interval of the median [-0.95%, +5%]",
        "win (2 of 3 blocks)",
        "paired effect per block (candidate / control - 1; positive: candidate better)",
        "throughput_rps (req/s) (axis not from zero)",
    ] {
        assert!(t.iter().any(|x| x == want), "{want}: {t:?}");
    }
}

#[test]
fn a_study_gets_the_tradeoff_and_one_effect_chart_per_hypothesis() {
    let dir = tempfile::tempdir().unwrap();
    crate::fixtures::synth::generate(dir.path(), &crate::fixtures::synth::SynthSpec::small()).unwrap();
    let l = crate::analysis::load(dir.path()).unwrap();
    let a = l.analyse(&[]).unwrap();
    let figs = tempfile::tempdir().unwrap();
    let files = write_all(&l, &a, figs.path()).unwrap();
    for want in ["throughput_vs_latency.svg", "latency_vs_load.svg", "throughput_closed-32.svg"] {
        assert!(files.iter().any(|f| f == want), "{want}: {files:?}");
    }
    for h in &a.hypotheses {
        let svg = std::fs::read_to_string(figs.path().join(format!("effect_{}.svg", h.name))).unwrap();
        let verdict = format!("verdict: {}", crate::report::text::short_decision(h));
        assert!(texts(&svg).contains(&verdict), "{verdict}");
    }
    assert!(!files.iter().any(|f| f.starts_with("latency_open")), "three load levels: no per-cell latency chart");
}
