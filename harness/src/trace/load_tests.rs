//! Tests of the loads added for real traffic (constant rates, sweeps, trace files),
//! through the plan and the public trace functions.

use super::*;
use crate::plan::{self, Arrival, ResolvedLoad};

/// A one-arm plan whose `[[cells]]` are `cells`.
pub(super) fn plan_with(cells: &str) -> String {
    format!(
        r#"
[study]
name = "t"
seed = 11

[request]
model = "m"
output_tokens = 4

[prompts]
source = "random"
lengths = [8, 16]
documents = 3
min_token_id = 5
max_token_id = 9

[warmup]
prompts = 0

[timing]
settle_s = 0
request_timeout_s = 5
drain_timeout_s = 5

[blocks]
count = 1
arm_order = "fixed"
cell_order = "fixed"

[[arms]]
name = "a"
role = "candidate"
argv = ["srv", "{{port}}"]
port = 9000
{cells}"#
    )
}

fn errors(text: &str) -> String {
    plan::parse(text).unwrap_err().to_string()
}

#[test]
fn constant_cells_get_exact_evenly_spaced_offsets() {
    let p = plan::parse(&plan_with(
        "[[cells]]\nname = \"c3\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 3\ncount = 4\ninput_tokens = 16\n",
    ))
    .unwrap();
    let cells = p.resolved_cells().unwrap();
    assert_eq!(cells[0].load, ResolvedLoad::Open { rate_rps: 3.0, arrival: Arrival::Constant });
    let t = &generate_traces(&p).unwrap()[0];
    let offsets: Vec<u64> = t.entries.iter().map(|e| e.offset_ns).collect();
    assert_eq!(offsets, [0, 333_333_333, 666_666_667, 1_000_000_000]);
    // Prompts of length 16 (the second panel length): panel indices 3, 4, 5, 3.
    let prompts: Vec<u64> = t.entries.iter().map(|e| e.prompt).collect();
    assert_eq!(prompts, [3, 4, 5, 3]);
    assert!(p.render_check("x").contains("c3 [confirmation]: constant (evenly spaced) at 3 req/s"));
}

#[test]
fn constant_cells_reject_arrival_keys_and_need_a_rate() {
    let base = "[[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\ncount = 4\ninput_tokens = 8\n";
    let err = errors(&plan_with(base));
    assert!(err.contains("cells[0].rate: required for a constant cell"), "{err}");
    let err = errors(&plan_with(&format!("{base}rate = 2\narrival = \"gamma\"\nburstiness = 2\n")));
    assert!(err.contains("cells[0].arrival: only open-loop cells"), "{err}");
    assert!(err.contains("cells[0].burstiness: only open-loop cells"), "{err}");
    let err = errors(&plan_with(&format!("{base}rate = 0\n")));
    assert!(err.contains("cells[0].rate: must be positive"), "{err}");
}

#[test]
fn rate_and_concurrency_sweeps_expand_in_place_and_in_order() {
    let p = plan::parse(&plan_with(
        r#"
[[cells]]
name = "first"
kind = "confirmation"
load = "closed"
concurrency = 1
count = 2
input_tokens = 8

[[cells]]
name = "sg"
kind = "confirmation"
load = "constant"
rate = [1, 4, 0.5, 16]
count = 3
input_tokens = 8

[[cells]]
name = "cl"
kind = "descriptive"
load = "closed"
concurrency = [4, 2]
count = 2
input_tokens = 16

[[cells]]
name = "po"
kind = "descriptive"
load = "open"
rate = [2, 3]
count = 2
input_tokens = 16
"#,
    ))
    .unwrap();
    let names: Vec<&str> = p.cells.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["first", "sg-r1", "sg-r4", "sg-r0.5", "sg-r16", "cl-c4", "cl-c2", "po-r2", "po-r3"]);
    let cells = p.resolved_cells().unwrap();
    assert_eq!(cells[2].load, ResolvedLoad::Open { rate_rps: 4.0, arrival: Arrival::Constant });
    assert_eq!(cells[6].load, ResolvedLoad::Closed { concurrency: 2 });
    assert!(matches!(cells[8].load, ResolvedLoad::Open { rate_rps, arrival: Arrival::Poisson } if rate_rps == 3.0));
    // Each expanded cell has its own trace, named like a hand-written cell.
    let traces = generate_traces(&p).unwrap();
    assert_eq!(traces[4].cell, "sg-r16");
    let offsets: Vec<u64> = traces[4].entries.iter().map(|e| e.offset_ns).collect();
    assert_eq!(offsets, [0, 62_500_000, 125_000_000]);
    // The schedule and the plan summary list the expanded cells.
    let sched = p.schedule();
    assert_eq!(sched.blocks[0].cells, ["first", "sg-r1", "sg-r4", "sg-r0.5", "sg-r16"]);
    assert_eq!(sched.blocks[1].cells, ["cl-c4", "cl-c2", "po-r2", "po-r3"]);
    let text = p.render_check("x");
    assert!(text.contains("sg-r0.5 [confirmation]: constant (evenly spaced) at 0.5 req/s"), "{text}");
    assert!(text.contains("cl-c2 [descriptive]: closed-loop concurrency 2"), "{text}");
}

#[test]
fn bad_sweeps_are_named_by_their_key() {
    let cell = |extra: &str| {
        plan_with(&format!("[[cells]]\nname = \"s\"\nkind = \"confirmation\"\ncount = 2\ninput_tokens = 8\n{extra}\n"))
    };
    let err = errors(&cell("load = \"constant\"\nrate = []"));
    assert!(err.contains("cells[0].rate: an empty sweep"), "{err}");
    let err = errors(&cell("load = \"constant\"\nrate = [1, 2, 1]"));
    assert!(err.contains("cells[0].rate: the sweep lists 1 twice"), "{err}");
    let err = errors(&cell("load = \"constant\"\nrate = [1, -2]"));
    assert!(err.contains("cells[0].rate: must be positive and finite, got -2"), "{err}");
    let err = errors(&cell("load = \"closed\"\nconcurrency = [2, 0]"));
    assert!(err.contains("cells[0].concurrency: must be at least 1, got 0"), "{err}");
    // A hand-written cell with an expanded cell's name collides.
    let text = cell("load = \"constant\"\nrate = [1, 2]")
        + "[[cells]]\nname = \"s-r2\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 1\ninput_tokens = 8\n";
    let err = errors(&text);
    assert!(err.contains("cells[1].name: duplicate cell name \"s-r2\" (also cells[0])"), "{err}");
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("harness-loads-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const MOONCAKE: &str = "{\"timestamp\": 1000, \"input_length\": 7, \"output_length\": 5, \"hash_ids\": [0]}\n\
{\"timestamp\": 1250, \"input_length\": 15, \"output_length\": 2, \"hash_ids\": [0]}\n\
{\"timestamp\": 1250, \"input_length\": 12, \"output_length\": 9, \"hash_ids\": [1]}\n\
{\"timestamp\": 3000, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [2]}\n";

fn trace_cell(extra: &str) -> String {
    plan_with(&format!(
        "[[cells]]\nname = \"tr\"\nkind = \"confirmation\"\nload = \"trace\"\ntrace = \"arr.jsonl\"\ncount = 3\n{extra}\n"
    ))
}

#[test]
fn trace_cells_replay_file_offsets_scaled_and_lengths_when_asked() {
    let dir = tempdir("tr");
    std::fs::write(dir.join("arr.jsonl"), MOONCAKE).unwrap();
    let p = plan::parse(&trace_cell("input_tokens = 16")).unwrap();
    let t = &generate_traces_in(&p, &dir).unwrap()[0];
    let got: Vec<(u64, u64)> = t.entries.iter().map(|e| (e.offset_ns, e.prompt)).collect();
    // The first 3 rows; prompts of the cell's length 16 (panel indices 3..6).
    assert_eq!(got, [(0, 3), (250_000_000, 4), (250_000_000, 5)]);
    assert!(t.entries.iter().all(|e| e.input_length.is_none()));

    let p = plan::parse(&trace_cell("time_scale = 0.5\ntrace_lengths = true")).unwrap();
    let t = &generate_traces_in(&p, &dir).unwrap()[0];
    let got: Vec<(u64, u64, Option<u32>, Option<u32>)> =
        t.entries.iter().map(|e| (e.offset_ns, e.prompt, e.input_length, e.output_length)).collect();
    // Nearest panel length to 7 is 8 (doc 0), to 15 is 16 (doc 1 of length 16 = index 4),
    // to 12 is a tie between 8 and 16: the shorter (doc 2 of length 8 = index 2).
    assert_eq!(
        got,
        [(0, 0, Some(7), Some(5)), (125_000_000, 4, Some(15), Some(2)), (125_000_000, 2, Some(12), Some(9))]
    );
    assert!(
        p.render_check("x").contains("arrivals replayed from arr.jsonl (time scale 0.5, prompt and output lengths")
    );

    // The copy is exact and catalogued; a changed byte in it is named.
    let out = dir.join("inputs");
    let cat = write_inputs_in(&out, &p, "abc", None, &dir).unwrap();
    assert_eq!(std::fs::read(out.join("arrivals/tr.jsonl")).unwrap(), MOONCAKE.as_bytes());
    let src = cat.traces[0].source.as_ref().unwrap();
    assert_eq!(
        (src.path.as_str(), src.copy.as_str(), src.rows, src.time_scale),
        ("arr.jsonl", "arrivals/tr.jsonl", 4, 0.5)
    );
    assert!(cat.files.iter().any(|f| f.path == "arrivals/tr.jsonl"));
    let text = std::fs::read_to_string(out.join(trace_path("tr"))).unwrap();
    assert!(
        text.starts_with("{\"index\":0,\"offset_ns\":0,\"prompt\":0,\"input_length\":7,\"output_length\":5}\n"),
        "{text}"
    );
    assert_eq!(read_trace(&out, "tr").unwrap(), *t);
    let mut bytes = std::fs::read(out.join("arrivals/tr.jsonl")).unwrap();
    bytes[15] ^= 1;
    std::fs::write(out.join("arrivals/tr.jsonl"), bytes).unwrap();
    let err = verify_catalog(&out).unwrap_err().to_string();
    assert!(err.contains("arrivals/tr.jsonl: changed"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trace_file_problems_are_plan_issues() {
    let dir = tempdir("bad");
    let p = plan::parse(&trace_cell("input_tokens = 8")).unwrap();
    // Missing: skipped when missing_ok (plan check warns), an issue otherwise.
    check_trace_files(&p, &dir, true).unwrap();
    let err = check_trace_files(&p, &dir, false).unwrap_err();
    assert_eq!(err.issues()[0].key, "cells.tr.trace");
    std::fs::write(
        dir.join("arr.jsonl"),
        &MOONCAKE[..MOONCAKE.find("\n{\"timestamp\": 1250, \"input_length\": 12").unwrap() + 1],
    )
    .unwrap();
    let err = check_trace_files(&p, &dir, true).unwrap_err().to_string();
    assert!(err.contains("cells.tr.trace: arr.jsonl has 2 requests, fewer than the cell's count 3"), "{err}");
    std::fs::write(dir.join("arr.jsonl"), "{\"timestamp\": 2, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}\n").unwrap();
    let err = check_trace_files(&p, &dir, true).unwrap_err().to_string();
    assert!(err.contains("cells.tr.trace: trace file arr.jsonl, line 2: timestamp is earlier"), "{err}");
    std::fs::write(dir.join("arr.jsonl"), "").unwrap();
    let err = check_trace_files(&p, &dir, true).unwrap_err().to_string();
    assert!(err.contains("no requests"), "{err}");
    assert!(generate_traces_in(&p, &dir).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trace_cell_keys_are_validated() {
    let err = errors(&plan_with("[[cells]]\nname = \"t\"\nkind = \"confirmation\"\nload = \"trace\"\ncount = 3\n"));
    assert!(err.contains("cells[0].trace: required for a trace cell"), "{err}");
    let err = errors(&trace_cell("time_scale = 0").replace("arr.jsonl", "arr.txt"));
    assert!(err.contains("cells[0].trace: \"arr.txt\": use a Mooncake trace (.jsonl)"), "{err}");
    let err = errors(&trace_cell("time_scale = -1\ninput_tokens = 8"));
    assert!(err.contains("cells[0].time_scale: must be positive"), "{err}");
    let err = errors(&trace_cell("trace_lengths = true\ninput_tokens = 8"));
    assert!(err.contains("cells[0].input_tokens: with trace_lengths = true"), "{err}");
    let err = errors(&plan_with(
        "[[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 1\ninput_tokens = 8\ntrace = \"a.csv\"\ntime_scale = 2\n",
    ));
    assert!(err.contains("cells[0].trace: only trace cells take this key"), "{err}");
    assert!(err.contains("cells[0].time_scale: only trace cells take this key"), "{err}");
}

#[test]
fn the_example_traces_parse_and_drive_a_cell() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (path, format) in
        [("traces/example-mooncake.jsonl", ArrivalFormat::Mooncake), ("traces/example-azure.csv", ArrivalFormat::Azure)]
    {
        let (_, rows) = read_arrival_file(&root, path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!((rows.len(), ArrivalFormat::of_path(path)), (48, Some(format)), "{path}");
        assert_eq!(rows[0].offset_ns, 0);
        // The burst: requests 20..28 come 5 ms apart.
        assert!(rows[20..28].windows(2).all(|w| w[1].offset_ns - w[0].offset_ns == 5_000_000), "{path}");
        let p = plan::parse(&plan_with(&format!(
            "[[cells]]\nname = \"t\"\nkind = \"confirmation\"\nload = \"trace\"\ntrace = {path:?}\ncount = 48\ntrace_lengths = true\n"
        )))
        .unwrap();
        check_trace_files(&p, &root, false).unwrap();
        let t = &generate_traces_in(&p, &root).unwrap()[0];
        assert_eq!(t.entries.len(), 48);
        // Every input is at least 64 tokens: the nearest panel length is always 16.
        assert!(t.entries.iter().all(|e| e.prompt >= 3), "{path}");
    }
}

#[test]
fn slo_targets_are_validated_and_goodput_hypotheses_need_them() {
    let cell = "[[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 2\ncount = 4\ninput_tokens = 8\n";
    let p = plan::parse(&(plan_with(cell) + "\n[slo]\nttft_ms = 200\ne2e_ms = 0\n")).unwrap();
    assert_eq!(p.slo, Some(plan::Slo { ttft_ms: Some(200.0), tpot_ms: None, e2e_ms: Some(0.0) }));
    assert!(p.render_check("x").contains("slo: goodput counts valid requests with TTFT <= 200 ms, E2E <= 0 ms"));
    let err = errors(&(plan_with(cell) + "\n[slo]\n"));
    assert!(err.contains("slo: set at least one of ttft_ms, tpot_ms, e2e_ms"), "{err}");
    let err = errors(&(plan_with(cell) + "\n[slo]\ntpot_ms = -1\n"));
    assert!(err.contains("slo.tpot_ms: must be zero or positive"), "{err}");
    let err = errors(&(plan_with(cell) + "\n[slo]\nitl_ms = 5\n"));
    assert!(err.contains("itl_ms"), "{err}");
    let two_arms = plan_with(cell).replace(
        "[[cells]]",
        "[[arms]]\nname = \"b\"\nrole = \"control\"\nargv = [\"srv\", \"{port}\"]\nport = 9001\n\n[[cells]]",
    );
    let hyp = "\n[analysis]\nalpha = 0.05\n\n[[hypotheses]]\nmetric = \"goodput_rps\"\ncell = \"c\"\ncandidate = \"a\"\ncontrol = \"b\"\nthreshold = 0.01\n";
    let err = errors(&(two_arms.clone() + hyp));
    assert!(
        err.contains("hypotheses[0].metric: \"goodput_rps:c:a-vs-b\" tests goodput_rps, which needs an [slo]"),
        "{err}"
    );
    let p = plan::parse(&(two_arms + hyp + "\n[slo]\nttft_ms = 100\n")).unwrap();
    assert_eq!(p.hypotheses[0].metric.kind(), plan::MetricKind::Throughput);
}

#[test]
fn a_trace_longer_than_the_stated_bound_is_refused_as_bad_input() {
    // Two gaps of 5 days: 10 days from the first to the last arrival.
    let cell = |count: u32| {
        format!(
            "[[cells]]\nname = \"slow\"\nkind = \"confirmation\"\nload = \"isolated\"\nspacing_s = 432000\n\
             count = {count}\ninput_tokens = 8\n"
        )
    };
    let p = plan::parse(&plan_with(&cell(3))).unwrap();
    let err = generate_traces(&p).unwrap_err().to_string();
    assert!(err.contains("cells.slow: its arrivals span 8.640e5 s, beyond the bound of 604800 s"), "{err}");
    assert!(matches!(generate_traces(&p), Err(TraceError::Plan(_))), "a plan error: exit 2");
    // One gap of 5 days is within it.
    let p = plan::parse(&plan_with(&cell(2))).unwrap();
    assert_eq!(generate_traces(&p).unwrap()[0].entries[1].offset_ns, 432_000_000_000_000);
}
