//! Hostile inputs, mutated at random (seeded, so every case is reproducible): a
//! plan, a Mooncake trace file, an Azure trace CSV and a requests JSONL dataset are
//! each changed by one to three mutations (a line dropped, doubled or cut, a byte
//! flipped, a number replaced by an extreme value, a key renamed, the text
//! truncated) and handed to `harness plan check` and `harness trace`. Every case
//! must end within 30 s with exit 0, or exit 2 with a message: never a panic (101),
//! a signal, exit 1 or a hang. A failing case prints its seed, its mutations and the
//! mutated text.
//!
//! Evidence directories too: one text file of a small synthetic sequential study is
//! mutated the same way and every evidence reader (`harness::commands::readers`)
//! runs on it in turn. Unsealed, the change must be refused (exit 2, the file
//! named); with the manifest resealed over it, the reader parses what it finds and
//! must end with a message (exit 0, 2, 3, or `gate`'s 1: nothing decided), never a
//! panic, a signal or a hang.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::harness_within;

/// Cases per input kind (four kinds): 800 cases, 1,600 runs, seconds in all.
const CASES: u64 = 200;

/// xorshift64*: deterministic, no dependency, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Values a number may become: zero, negatives, extremes, non-numbers.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "1e-300",
    "-0.0",
    "nan",
    "inf",
    "18446744073709551615",
    "9223372036854775807",
    "100000000",
    "4294967296",
    "0.5",
    "\"x\"",
    "[]",
    "{}",
    "true",
    "",
];

/// Characters a flipped byte may become (structure of TOML, JSON and CSV).
const BYTES: &[&str] = &["\"", "[", "]", "{", "}", ",", "=", "\n", "\\", "#", ":", " ", "\u{feff}", "\u{0}", "é"];

/// Applies one random mutation to `text`; returns its description.
fn mutate(text: &mut String, r: &mut Rng) -> String {
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let n = lines.len().max(1);
    let at = r.below(n);
    let mut out = lines.clone();
    let what = match r.below(7) {
        0 => {
            out.remove(at.min(out.len().saturating_sub(1)));
            format!("dropped line {at}")
        }
        1 => {
            let l = out.get(at).cloned().unwrap_or_default();
            out.insert(at, l);
            format!("doubled line {at}")
        }
        2 => {
            let l = out.get(at).cloned().unwrap_or_default();
            let cut = r.below(l.len() + 1);
            let cut = (0..=cut).rev().find(|&c| l.is_char_boundary(c)).unwrap_or(0);
            let i = at.min(out.len().saturating_sub(1));
            out[i] = l[..cut].to_string();
            format!("cut line {at} at byte {cut}")
        }
        3 => {
            // A number on the line becomes an extreme value.
            let l = out.get(at).cloned().unwrap_or_default();
            let digits: Vec<(usize, usize)> = number_spans(&l);
            if digits.is_empty() {
                return mutate(text, r);
            }
            let (s, e) = digits[r.below(digits.len())];
            let v = r.pick(EXTREMES);
            out[at] = format!("{}{v}{}", &l[..s], &l[e..]);
            format!("line {at}: number {:?} -> {v:?}", &l[s..e])
        }
        4 => {
            let l = out.get(at).cloned().unwrap_or_default();
            let b = r.pick(BYTES);
            let mut i = r.below(l.len() + 1);
            while !l.is_char_boundary(i) {
                i -= 1;
            }
            let j = at.min(out.len().saturating_sub(1));
            out[j] = format!("{}{b}{}", &l[..i], &l[i..]);
            format!("line {at}: inserted {b:?} at byte {i}")
        }
        5 => {
            // A key renamed (TOML `key =`, JSON `"key":`).
            let l = out.get(at).cloned().unwrap_or_default();
            match l.find(" =").or_else(|| l.find("\":")) {
                Some(i) if i > 0 => {
                    out[at] = format!("{}_x{}", &l[..i], &l[i..]);
                    format!("line {at}: key renamed")
                }
                _ => return mutate(text, r),
            }
        }
        _ => {
            let keep = r.below(text.len() + 1);
            let keep = (0..=keep).rev().find(|&c| text.is_char_boundary(c)).unwrap_or(0);
            text.truncate(keep);
            return format!("truncated to {keep} bytes");
        }
    };
    *text = out.join("\n") + "\n";
    what
}

/// Byte spans of the numbers in `line`.
fn number_spans(line: &str) -> Vec<(usize, usize)> {
    let b = line.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'e' || b[i] == b'-') {
                i += 1;
            }
            spans.push((s, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// Runs `harness args` in `dir`; kills it after 30 s.
fn run(dir: &Path, args: &[&str]) -> Result<Output, String> {
    harness_within(Some(dir), args, Duration::from_secs(30))
}

/// Exit 0, or exit 2 with a `harness:` message; anything else is the problem.
fn verdict(o: &Result<Output, String>) -> Option<String> {
    let o = match o {
        Err(e) => return Some(e.clone()),
        Ok(o) => o,
    };
    let err = String::from_utf8_lossy(&o.stderr);
    match o.status.code() {
        Some(0) => None,
        Some(2) if err.contains("harness: ") || err.contains("error:") => None,
        Some(2) => Some(format!("exit 2 without a message: {err}")),
        Some(c) => Some(format!("exit {c}: {err}")),
        None => Some(format!("killed by a signal: {err}")),
    }
}

/// What an accepted input must satisfy so that `run` can use it: every duration of
/// the plan converts to a `Duration` (1e20 s passed `plan check`, then panicked in
/// `run`), and every written trace stays within the stated span (rate 1e-300 wrote
/// offset u64::MAX, and `run` waited for ever).
fn accepted_problem(dir: &Path, command: &str) -> Option<String> {
    if command == "plan" {
        let text = std::fs::read_to_string(dir.join("plan.toml")).ok()?;
        let plan = harness::plan::parse(&text).ok()?;
        let mut seconds = vec![
            ("timing.settle_s", plan.timing.settle_s),
            ("timing.request_timeout_s", plan.timing.request_timeout_s),
            ("timing.drain_timeout_s", plan.timing.drain_timeout_s),
        ];
        for a in &plan.arms {
            seconds.push(("startup_timeout_s", a.startup_timeout_s));
            seconds.push(("stop_grace_s", a.stop_grace_s));
        }
        return seconds
            .into_iter()
            .find(|(_, v)| Duration::try_from_secs_f64(*v).is_err() || *v > harness::plan::MAX_SECONDS)
            .map(|(k, v)| format!("accepted {k} = {v}, which no run can wait for"));
    }
    let traces = std::fs::read_dir(dir.join("out/traces")).ok()?;
    for t in traces.filter_map(Result::ok) {
        let text = std::fs::read_to_string(t.path()).unwrap_or_default();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            let offset = v["offset_ns"].as_u64().unwrap_or(u64::MAX);
            if offset > harness::plan::MAX_TRACE_NS {
                return Some(format!("wrote {} with offset_ns {offset}", t.path().display()));
            }
        }
    }
    None
}

const PLAN: &str = r#"[study]
name = "fuzz"
seed = 3

[request]
model = "m"
output_tokens = 4

[prompts]
source = "random"
max_token_id = 99
lengths = [8, 16]
documents = 2

[warmup]
prompts = 1
input_tokens = 8

[timing]
settle_s = 0.5
request_timeout_s = 5.0
drain_timeout_s = 5.0

[blocks]
count = 2
arm_order = "alternate"
cell_order = "alternate"

[[arms]]
name = "a"
role = "control"
argv = ["engine", "serve", "--port", "{port}"]
port = 18101

[[arms]]
name = "b"
role = "candidate"
url = "http://127.0.0.1:18102"

[[cells]]
name = "closed"
kind = "confirmation"
load = "closed"
concurrency = 2
count = 8
input_tokens = 8

[[cells]]
name = "open"
kind = "confirmation"
load = "open"
rate = 2.5
count = 6
input_tokens = 16

[[cells]]
name = "spaced"
kind = "descriptive"
load = "isolated"
spacing_s = 0.25
count = 3
input_tokens = 8

[[cells]]
name = "replayed"
kind = "descriptive"
load = "trace"
trace = "arrivals.jsonl"
count = 3
input_tokens = 8

[analysis]
alpha = 0.05

[[hypotheses]]
metric = "throughput_rps"
cell = "closed"
candidate = "b"
control = "a"
threshold = 0.01
"#;

const MOONCAKE: &str = "{\"timestamp\": 0, \"input_length\": 120, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
{\"timestamp\": 27, \"input_length\": 100, \"output_length\": 8, \"hash_ids\": []}\n\
{\"timestamp\": 1500, \"input_length\": 12, \"output_length\": 3}\n\
{\"timestamp\": 1501, \"input_length\": 7, \"output_length\": 9}\n";

const AZURE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
2023-11-16 18:15:46.6805900,374,44\n\
2023-11-16 18:15:50.9951690,396,109\n\
2023-11-16 18:15:51.0000000,12,3\n";

const REQUESTS: &str = "{\"tokens\": [1, 2, 3, 4, 5], \"output_tokens\": 3}\n\
{\"tokens\": [7, 8, 9], \"output_tokens\": 2}\n\
{\"tokens\": [10, 11, 12, 13], \"other\": \"ignored\"}\n";

/// The dataset plan: a requests panel of 3 entries, one closed cell.
fn dataset_plan() -> String {
    PLAN.replacen(
        "source = \"random\"\nmax_token_id = 99\nlengths = [8, 16]\ndocuments = 2\n",
        "source = \"requests\"\npath = \"requests.jsonl\"\nnum_requests = 3\n",
        1,
    )
    .split("\n[[cells]]\nname = \"open\"")
    .next()
    .unwrap_or_default()
    .replace("input_tokens = 8\n", "")
        + "\n[analysis]\nalpha = 0.05\n"
}

/// One mutated input file per case; `name` is the file the plan reads it from.
struct Kind {
    label: &'static str,
    file: &'static str,
    text: String,
    /// The plan beside it (the plan itself when `file` is plan.toml).
    plan: String,
}

fn kinds() -> Vec<Kind> {
    let azure_plan = PLAN.replace("trace = \"arrivals.jsonl\"", "trace = \"arrivals.csv\"");
    vec![
        Kind { label: "plan", file: "plan.toml", text: PLAN.to_string(), plan: PLAN.to_string() },
        Kind { label: "mooncake", file: "arrivals.jsonl", text: MOONCAKE.to_string(), plan: PLAN.to_string() },
        Kind { label: "azure", file: "arrivals.csv", text: AZURE.to_string(), plan: azure_plan },
        Kind { label: "requests", file: "requests.jsonl", text: REQUESTS.to_string(), plan: dataset_plan() },
    ]
}

#[test]
fn mutated_plans_traces_and_datasets_exit_0_or_2_never_panic_or_hang() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The unmutated inputs are accepted by both commands (else every case is moot).
    for k in kinds() {
        let dir = tmp.path().join(format!("base-{}", k.label));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (file, text) in [("arrivals.jsonl", MOONCAKE), ("arrivals.csv", AZURE), ("requests.jsonl", REQUESTS)] {
            std::fs::write(dir.join(file), text).expect("write input");
        }
        std::fs::write(dir.join("plan.toml"), &k.plan).expect("write plan");
        for args in [&["plan", "check", "plan.toml"][..], &["trace", "plan.toml", "--out", "out"][..]] {
            let o = run(&dir, args);
            let ok = o.as_ref().is_ok_and(|o| o.status.success());
            assert!(ok, "{} {args:?}: the unmutated input fails: {o:?}", k.label);
        }
    }
    let mut failures: Vec<String> = Vec::new();
    let mut exits = [0usize; 2];
    for (ki, k) in kinds().into_iter().enumerate() {
        for case in 0..CASES {
            let seed = (ki as u64) << 32 | case;
            let mut r = Rng::new(seed + 1);
            let mut text = k.text.clone();
            let steps: Vec<String> = (0..1 + r.below(3)).map(|_| mutate(&mut text, &mut r)).collect();
            let dir: PathBuf = tmp.path().join(format!("{}-{case}", k.label));
            std::fs::create_dir_all(&dir).expect("mkdir");
            for (file, base) in [("arrivals.jsonl", MOONCAKE), ("arrivals.csv", AZURE), ("requests.jsonl", REQUESTS)] {
                std::fs::write(dir.join(file), base).expect("write input");
            }
            std::fs::write(dir.join("plan.toml"), &k.plan).expect("write plan");
            std::fs::write(dir.join(k.file), &text).expect("write mutated input");
            for args in [&["plan", "check", "plan.toml"][..], &["trace", "plan.toml", "--out", "out"][..]] {
                let o = run(&dir, args);
                if let Ok(o) = &o {
                    exits[usize::from(o.status.code() == Some(2))] += 1;
                }
                let accepted = o.as_ref().is_ok_and(|o| o.status.success());
                let problem = verdict(&o).or_else(|| accepted.then(|| accepted_problem(&dir, args[0])).flatten());
                if let Some(problem) = problem {
                    failures.push(format!(
                        "{} case {case} (seed {seed}), {args:?}, mutations {steps:?}: {problem}\n--- {} ---\n{text}",
                        k.label, k.file
                    ));
                }
            }
            std::fs::remove_dir_all(&dir).ok();
        }
    }
    eprintln!("{} runs: {} exit 0, {} exit 2, {} failures", exits[0] + exits[1], exits[0], exits[1], failures.len());
    assert!(exits[1] > 0, "no mutation was refused: the fuzzer does not reach the checks");
    assert!(failures.is_empty(), "{} of the cases failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// Evidence cases: each mutates one file of a small synthetic sequential study and
/// runs one reader on it (every reader in turn).
const EVIDENCE_CASES: u64 = 72;

/// The argv of each evidence reader (`{}` the mutated directory, `{clean}` an
/// untouched copy, `{tmp}` a scratch folder): the same readers as
/// `harness::commands::readers` (checked below), the qualification and pilot
/// readers against the study itself (they then refuse or find nothing).
fn evidence_argv(command: &str, arg: &str) -> Vec<&'static str> {
    match (command, arg) {
        ("replay", "dir") => vec!["replay", "{}"],
        ("report", "dir") => vec!["report", "{}"],
        ("export", "dir") => vec!["export", "{}", "--format", "guidellm", "--out", "{tmp}/x.json"],
        ("noise", "dir") => vec!["noise", "{}"],
        ("gate", "baseline") => vec![
            "gate",
            "--baseline",
            "{}",
            "--candidate",
            "{clean}",
            "--rules",
            "{tmp}/r.toml",
            "--json",
            "{tmp}/g.json",
        ],
        ("gate", "candidate") => vec![
            "gate",
            "--baseline",
            "{clean}",
            "--candidate",
            "{}",
            "--rules",
            "{tmp}/r.toml",
            "--json",
            "{tmp}/g.json",
        ],
        ("gate", "export_baseline") => vec!["gate", "--export-baseline", "{}", "--out", "{tmp}/b.json"],
        ("gate", "qualification") => vec![
            "gate",
            "--baseline",
            "{clean}",
            "--candidate",
            "{clean}",
            "--rules",
            "{tmp}/r.toml",
            "--qualification",
            "{}",
            "--json",
            "{tmp}/g.json",
        ],
        ("gate", "paired") => vec!["gate", "--paired", "{}", "--json", "{tmp}/p.json"],
        ("gate", "simulate") => vec!["gate", "--simulate", "{}", "--draws", "10", "--json", "{tmp}/s.json"],
        ("plan power", "noise") => vec!["plan", "power", "{clean}/plan.toml", "--noise", "{}", "--draws", "5"],
        ("plan check", "pilots_from") => vec!["plan", "check", "{clean}/plan.toml", "--pilots-from", "{}"],
        other => panic!("the evidence fuzz has no argv for the reader {other:?}"),
    }
}

/// Exit 0, 1 (gate: nothing decided) or 2, each failure with a message; never a
/// panic, a signal or a hang.
fn evidence_verdict(o: &Result<Output, String>, command: &str) -> Option<String> {
    let o = match o {
        Err(e) => return Some(e.clone()),
        Ok(o) => o,
    };
    let err = String::from_utf8_lossy(&o.stderr);
    let said = !err.trim().is_empty() || !o.stdout.is_empty();
    match o.status.code() {
        Some(0) => None,
        Some(1) if command == "gate" && err.contains("harness: ") => None,
        Some(2 | 3) if said => None,
        Some(c) => Some(format!("exit {c}: {err}")),
        None => Some(format!("killed by a signal: {err}")),
    }
}

#[test]
fn mutated_evidence_directories_are_refused_or_read_by_every_reader_never_panic_or_hang() {
    use harness::commands::readers::EVIDENCE_READERS;
    use harness::evidence::{GitInfo, Manifest, sha256_hex, write_manifest};
    let tmp = tempfile::tempdir().expect("tempdir");
    let study = tmp.path().join("study");
    let spec = harness::fixtures::synth::SynthSpec { requests: 6, ..harness::fixtures::synth::SynthSpec::sequential() };
    harness::fixtures::synth::generate(&study, &spec).expect("synthetic study");
    let clean = tmp.path().join("clean");
    common::tamper::copy_dir(&study, &clean);
    std::fs::write(tmp.path().join("r.toml"), "[[rules]]\nkind = \"failures\"\n").expect("rules");
    let manifest: Manifest = serde_json::from_slice(&std::fs::read(study.join("manifest.json")).unwrap()).unwrap();
    let texts: Vec<&str> = manifest
        .files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| [".json", ".jsonl", ".toml", ".csv"].iter().any(|e| p.ends_with(e)))
        .collect();
    let fill = |template: &[&str], dir: &Path| -> Vec<String> {
        template
            .iter()
            .map(|a| {
                a.replace("{clean}", &clean.display().to_string())
                    .replace("{tmp}", &tmp.path().display().to_string())
                    .replace("{}", &dir.display().to_string())
            })
            .collect()
    };
    let mut failures = Vec::new();
    let mut exits = [0usize; 4];
    for case in 0..EVIDENCE_CASES {
        let seed = 7 << 32 | case;
        let mut r = Rng::new(seed + 1);
        let (command, arg) = EVIDENCE_READERS[case as usize % EVIDENCE_READERS.len()];
        let file = texts[r.below(texts.len())];
        // Half the cases reseal the manifest over the mutation: the reader then
        // parses what it finds; the other half must be refused by the seal.
        let resealed = case % 2 == 1;
        let dir = tmp.path().join(format!("ev-{case}"));
        common::tamper::copy_dir(&study, &dir);
        let mut text = std::fs::read_to_string(dir.join(file)).expect("a text file");
        let before = text.clone();
        let steps: Vec<String> = (0..1 + r.below(3)).map(|_| mutate(&mut text, &mut r)).collect();
        std::fs::write(dir.join(file), &text).expect("write mutation");
        if resealed {
            let plan = std::fs::read(dir.join("plan.toml")).expect("plan");
            let git = GitInfo { revision: "synthetic".into(), dirty: None };
            write_manifest(&dir, &manifest.study, &sha256_hex(&plan), git).expect("reseal");
        }
        let args = fill(&evidence_argv(command, arg), &dir);
        let o = harness_within(Some(tmp.path()), &args, Duration::from_secs(30));
        if let Ok(o) = &o {
            exits[o.status.code().unwrap_or(3).clamp(0, 3) as usize] += 1;
        }
        let mut problem = evidence_verdict(&o, command);
        if problem.is_none() && !resealed && text != before {
            // Changed and not resealed: the seal must refuse it, naming the file.
            let said = o
                .as_ref()
                .map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
                .unwrap_or_default();
            let code = o.as_ref().ok().and_then(|o| o.status.code());
            if code != Some(2) || !said.contains(file) {
                problem = Some(format!("an unsealed change was not refused naming {file}: exit {code:?}: {said}"));
            }
        }
        if let Some(problem) = problem {
            failures.push(format!(
                "case {case} (seed {seed}) {command} ({arg}), {file} mutated {steps:?}{}: {problem}",
                if resealed { ", resealed" } else { "" }
            ));
        }
        std::fs::remove_dir_all(&dir).ok();
    }
    eprintln!("{EVIDENCE_CASES} evidence runs: exits 0/1/2/other {exits:?}, {} failures", failures.len());
    assert!(failures.is_empty(), "{} of the evidence cases failed:\n\n{}", failures.len(), failures.join("\n\n"));
}
