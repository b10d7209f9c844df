//! Tests of trace generation, panels and catalogs through the public functions.

use std::path::{Path, PathBuf};

use super::*;
use crate::plan::{self, Plan, ResolvedLoad};

const PLAN: &str = r#"
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
prompts = 2
input_tokens = 8

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
argv = ["srv", "{port}"]
port = 9000

[[cells]]
name = "closed"
kind = "confirmation"
load = "closed"
concurrency = 2
count = 7
input_tokens = 16

[[cells]]
name = "open"
kind = "confirmation"
load = "open"
rate = 5
arrival = "gamma"
burstiness = 2
count = 50
input_tokens = 8

[[cells]]
name = "iso"
kind = "descriptive"
load = "isolated"
spacing_s = 0.25
count = 4
input_tokens = 8
"#;

fn plan() -> Plan {
    plan::parse(PLAN).unwrap()
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("harness-trace-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn closed_loop_is_all_at_zero_and_isolated_is_spaced() {
    let p = plan();
    let traces = generate_traces(&p).unwrap();
    let closed = &traces[0];
    assert_eq!(closed.entries.len(), 7);
    assert!(closed.entries.iter().all(|e| e.offset_ns == 0));
    // Length 16 is the second panel length: prompts 3, 4, 5, then round robin.
    let prompts: Vec<u64> = closed.entries.iter().map(|e| e.prompt).collect();
    assert_eq!(prompts, [3, 4, 5, 3, 4, 5, 3]);
    let iso = &traces[2];
    let offsets: Vec<u64> = iso.entries.iter().map(|e| e.offset_ns).collect();
    assert_eq!(offsets, [0, 250_000_000, 500_000_000, 750_000_000]);
    let open = &traces[1];
    assert_eq!(open.entries[0].offset_ns, 0);
    assert!(open.entries.windows(2).all(|w| w[0].offset_ns <= w[1].offset_ns));
    let cells = p.resolved_cells().unwrap();
    assert!(matches!(cells[1].load, ResolvedLoad::Open { rate_rps, .. } if rate_rps == 5.0));
}

#[test]
fn random_panel_has_exact_lengths_and_is_deterministic() {
    let p = plan();
    let a = build_panel(&p, Path::new("."), None).unwrap();
    let b = build_panel(&p, Path::new("."), None).unwrap();
    assert_eq!(a, b);
    a.check(&p).unwrap();
    assert_eq!(a.prompts.len(), 6);
    assert!(a.prompts.iter().flat_map(|x| &x.tokens).all(|&t| (5..=9).contains(&t)));
    assert_eq!(Panel::from_jsonl(&a.to_jsonl()).unwrap(), a);
    assert_eq!(p.warmup_prompts(), [0, 1]);
}

/// A stand-in tokenizer: one token per byte.
struct Bytes;
impl Encoder for Bytes {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(text.bytes().map(u32::from).collect())
    }
}

#[test]
fn text_and_jsonl_panels_cut_exact_lengths() {
    let dir = tempdir("panel");
    std::fs::write(dir.join("b_gut.txt"), "abcdefghijklmnopqrstuvwxyz".repeat(2)).unwrap();
    std::fs::write(dir.join("a_gut.txt"), "short").unwrap();
    std::fs::write(dir.join("skip.md"), "0123456789012345678901234567890").unwrap();
    let text = PLAN
        .replace(
            "source = \"random\"",
            &format!(
                "source = \"text\"\ntexts = {:?}\npattern = \"*_gut.txt\"\ntokenizer = \"bytes\"",
                dir.display().to_string()
            ),
        )
        .replace("min_token_id = 5\nmax_token_id = 9\n", "");
    let p = plan::parse(&text).unwrap();
    let err = build_panel(&p, Path::new("."), None).unwrap_err().to_string();
    assert!(err.contains("needs an encoder for tokenizer \"bytes\""), "{err}");
    let panel = build_panel(&p, Path::new("."), Some(&Bytes)).unwrap();
    panel.check(&p).unwrap();
    for pr in &panel.prompts {
        // "short" has 5 tokens, fewer than 8: only b_gut.txt is eligible.
        assert_eq!(pr.source, "b_gut.txt");
        let start = pr.offset as usize;
        let want: Vec<u32> = "abcdefghijklmnopqrstuvwxyz".repeat(2).bytes().map(u32::from).collect();
        assert_eq!(pr.tokens, want[start..start + pr.length as usize]);
    }
    assert_eq!(panel, build_panel(&p, Path::new("."), Some(&Bytes)).unwrap());

    let jsonl = dir.join("docs.jsonl");
    std::fs::write(
        &jsonl,
        "{\"tokens\":[1,2,3]}\n{\"tokens\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],\"id\":\"x\"}\n",
    )
    .unwrap();
    let text = PLAN
        .replace("source = \"random\"", &format!("source = \"jsonl\"\npath = {:?}", jsonl.display().to_string()))
        .replace("min_token_id = 5\nmax_token_id = 9\n", "");
    let p = plan::parse(&text).unwrap();
    let panel = build_panel(&p, Path::new("."), None).unwrap();
    panel.check(&p).unwrap();
    assert!(panel.prompts.iter().all(|pr| pr.source.ends_with(":2")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inputs_are_byte_identical_and_catalog_detects_changes() {
    let p = plan();
    let panel = build_panel(&p, Path::new("."), None).unwrap();
    let (d1, d2) = (tempdir("cat1"), tempdir("cat2"));
    let c1 = write_inputs(&d1, &p, "abc", Some(&panel)).unwrap();
    let c2 = write_inputs(&d2, &p, "abc", Some(&panel)).unwrap();
    assert_eq!(c1, c2);
    for f in &c1.files {
        assert_eq!(std::fs::read(d1.join(&f.path)).unwrap(), std::fs::read(d2.join(&f.path)).unwrap());
    }
    assert_eq!(std::fs::read(d1.join("catalog.json")).unwrap(), std::fs::read(d2.join("catalog.json")).unwrap());
    assert_eq!(verify_catalog(&d1).unwrap(), c1);
    let open = read_trace(&d1, "open").unwrap();
    assert_eq!(open, generate_traces(&p).unwrap()[1]);

    // Flip one byte of a trace.
    let victim = d1.join(trace_path("open"));
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&victim, &bytes).unwrap();
    match verify_catalog(&d1) {
        Err(TraceError::Catalog(problems)) => {
            assert_eq!(problems.len(), 1);
            assert!(matches!(&problems[0], CatalogProblem::Changed { path, .. } if path == "traces/open.trace.jsonl"));
        }
        other => panic!("flipped byte not detected: {other:?}"),
    }
    // Remove another file.
    std::fs::remove_file(d1.join("prompts.jsonl")).unwrap();
    let err = verify_catalog(&d1).unwrap_err().to_string();
    assert!(err.contains("prompts.jsonl: missing"), "{err}");
    assert!(err.contains("traces/open.trace.jsonl: changed"), "{err}");
    std::fs::remove_dir_all(&d1).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn underived_plans_cannot_be_traced() {
    let text =
        PLAN.replace("rate = 5", "rate = \"derived:near\"") + "\n[derive]\npilot_rates = [10.0]\nnear_fraction = 0.9\n";
    let p = plan::parse(&text).unwrap();
    let err = generate_traces(&p).unwrap_err().to_string();
    assert!(err.contains("cells[1].rate: cell \"open\" uses derived:near"), "{err}");
}
