//! Every command that reads an evidence directory (`harness::commands::readers`,
//! which `main.rs`'s tests hold to the command line) against damaged evidence of
//! each kind: a changed byte, a truncated file, a deleted file, a FIFO and a
//! symbolic link in a file's place (each in a file the command reads and in one it
//! does not), a missing manifest and an extra file. Exit 0 only on untouched
//! evidence; every damage exits 2 naming what is wrong, and nothing ever waits on
//! the FIFO. The evidence is synthetic (`harness::fixtures::synth`, a small paired
//! sequential study: every reader has something to read), so the whole matrix runs
//! in seconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::commands::readers::EVIDENCE_READERS;
use harness::evidence::{GitInfo, write_manifest};
use harness::fixtures::synth::{SynthSpec, generate};

use crate::common::{self, tamper::copy_dir};

/// The directories a reader can be given.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Fixture {
    /// A small paired sequential study.
    Study,
    /// A `harness qualify`-like directory with `qualification/qualification.json`.
    Qualify,
    /// The study with its pilots' `pilots/derived.json`.
    Pilots,
}

/// What each reader is run with: its argv (`{}` is the damaged directory, `{clean}`
/// an untouched study, `{tmp}` a scratch folder), the fixture it reads and a file
/// it reads.
fn recipe(command: &str, arg: &str) -> (Vec<&'static str>, Fixture, &'static str) {
    use Fixture::*;
    const MATRIX: &str = "results/matrix.csv";
    const SEQ: &str = "sequential.json";
    const RAW: &str = "raw/b1/cand/closed-32.requests.jsonl";
    match (command, arg) {
        ("replay", "dir") => (vec!["replay", "{}"], Study, RAW),
        ("report", "dir") => (vec!["report", "{}"], Study, RAW),
        ("export", "dir") => (vec!["export", "{}", "--format", "vllm-bench", "--out", "{tmp}/x.jsonl"], Study, RAW),
        ("noise", "dir") => (vec!["noise", "{}"], Study, "results/cells/b1-cand-closed-32.summary.json"),
        ("gate", "baseline") => (gate_rules(&["--baseline", "{}", "--candidate", "{clean}"]), Study, MATRIX),
        ("gate", "candidate") => (gate_rules(&["--baseline", "{clean}", "--candidate", "{}"]), Study, MATRIX),
        ("gate", "export_baseline") => {
            (vec!["gate", "--export-baseline", "{}", "--out", "{tmp}/b.json"], Study, MATRIX)
        }
        ("gate", "qualification") => (
            gate_rules(&["--baseline", "{clean}", "--candidate", "{clean}", "--qualification", "{}"]),
            Qualify,
            "qualification/qualification.json",
        ),
        ("gate", "paired") => (vec!["gate", "--paired", "{}", "--json", "{tmp}/p.json"], Study, SEQ),
        ("gate", "simulate") => {
            (vec!["gate", "--simulate", "{}", "--draws", "20", "--json", "{tmp}/s.json"], Study, SEQ)
        }
        ("plan power", "noise") => {
            (vec!["plan", "power", "{clean}/plan.toml", "--noise", "{}", "--draws", "10"], Study, RAW)
        }
        ("plan check", "pilots_from") => (
            vec!["plan", "check", "{workspace}/plans/quickstart.toml", "--pilots-from", "{}"],
            Pilots,
            "pilots/derived.json",
        ),
        other => panic!("no recipe for the evidence reader {other:?}: add one to evidence_readers.rs"),
    }
}

fn gate_rules(sides: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["gate"];
    v.extend_from_slice(sides);
    v.extend(["--rules", "{tmp}/rules.toml", "--json", "{tmp}/g.json"]);
    v
}

/// A file no reader but replay and report looks at.
const UNREAD: &str = "inputs/catalog.json";

#[derive(Clone, Copy, Debug)]
enum Damage {
    ChangedByte,
    Truncated,
    Deleted,
    Fifo,
    Symlink,
    NoManifest,
    ExtraFile,
}

const FILE_DAMAGE: [Damage; 5] =
    [Damage::ChangedByte, Damage::Truncated, Damage::Deleted, Damage::Fifo, Damage::Symlink];

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// Damages `dir` (at `rel` for the file kinds); returns what the refusal must name.
fn damage(dir: &Path, kind: Damage, rel: &str, outside: &Path) -> String {
    let path = dir.join(rel);
    match kind {
        Damage::ChangedByte => {
            let mut b = std::fs::read(&path).unwrap();
            let i = b.len() / 2;
            b[i] = if b[i] == b'1' { b'2' } else { b'1' };
            std::fs::write(&path, b).unwrap();
        }
        Damage::Truncated => {
            let b = std::fs::read(&path).unwrap();
            std::fs::write(&path, &b[..b.len() / 2]).unwrap();
        }
        Damage::Deleted => std::fs::remove_file(&path).unwrap(),
        Damage::Fifo => {
            std::fs::remove_file(&path).unwrap();
            mkfifo(&path);
        }
        Damage::Symlink => {
            // The same bytes, through a link: only the link is wrong.
            let copy = outside.join(rel.replace('/', "_"));
            std::fs::rename(&path, &copy).unwrap();
            std::os::unix::fs::symlink(&copy, &path).unwrap();
        }
        Damage::NoManifest => {
            std::fs::remove_file(dir.join("manifest.json")).unwrap();
            return "no manifest.json".into();
        }
        Damage::ExtraFile => {
            std::fs::write(dir.join("notes.txt"), "added later\n").unwrap();
            return "notes.txt".into();
        }
    }
    rel.to_string()
}

struct Ran {
    code: Option<i32>,
    text: String,
}

/// Runs the harness with `args`, killed after 60 s (a reader that waits on a FIFO).
fn run(args: &[String], cwd: &Path) -> Ran {
    let mut child = Command::new(common::harness_bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn harness");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            return Ran { code: out.status.code(), text };
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            return Ran { code: None, text: "HUNG: killed after 60 s".into() };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Fixtures {
    study: PathBuf,
    qualify: PathBuf,
    pilots: PathBuf,
}

fn fixtures(root: &Path) -> Fixtures {
    let spec = SynthSpec { requests: 6, ..SynthSpec::sequential() };
    let study = root.join("study");
    generate(&study, &spec).expect("synthetic sequential study");
    let git = || GitInfo { revision: "synthetic".into(), dirty: None };

    let qualify = root.join("qualify");
    std::fs::create_dir_all(qualify.join("qualification")).unwrap();
    std::fs::write(qualify.join("plan.toml"), "# qualification only\n").unwrap();
    let q = serde_json::json!({"arms": [{"arm": "cand", "role": "candidate", "qualified": true, "reasons": []}]});
    std::fs::write(qualify.join("qualification/qualification.json"), q.to_string()).unwrap();
    write_manifest(&qualify, "qualify", &harness::evidence::sha256_hex(b"# qualification only\n"), git()).unwrap();

    let pilots = root.join("pilots");
    copy_dir(&study, &pilots);
    let rec = serde_json::json!({
        "format": harness::evidence::PILOTS_FORMAT, "plan_sha256": "", "rate_rule": harness::evidence::RATE_RULE,
        "pilots": [], "pilot_rates": [20.0, 22.0], "formula": "", "near_fraction": 0.8, "fractions": {},
        "count_rule": null, "rates_tenths": {}, "rates_rps": {}, "count": null,
    });
    std::fs::create_dir_all(pilots.join("pilots")).unwrap();
    std::fs::write(pilots.join(harness::evidence::DERIVED_PATH), rec.to_string()).unwrap();
    let m: harness::evidence::Manifest =
        serde_json::from_slice(&std::fs::read(pilots.join("manifest.json")).unwrap()).unwrap();
    write_manifest(&pilots, &m.study, &m.plan_sha256, git()).unwrap();
    Fixtures { study, qualify, pilots }
}

fn argv(template: &[&str], dir: &Path, clean: &Path, tmp: &Path) -> Vec<String> {
    template
        .iter()
        .map(|a| {
            a.replace("{clean}", &clean.display().to_string())
                .replace("{tmp}", &tmp.display().to_string())
                .replace("{workspace}", &common::workspace().display().to_string())
                .replace("{}", &dir.display().to_string())
        })
        .collect()
}

/// One run: the reader (command, argument), its name, and the damage (kind, file).
type Case = (&'static str, &'static str, String, Option<(Damage, &'static str)>);

#[test]
fn every_evidence_reader_exits_0_only_on_untouched_evidence_and_2_naming_each_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixtures(tmp.path());
    let clean = tmp.path().join("clean");
    copy_dir(&f.study, &clean);
    std::fs::write(tmp.path().join("rules.toml"), "[[rules]]\nkind = \"failures\"\n").unwrap();
    // Every (reader, damage) case, run two at a time.
    let mut cases: Vec<Case> = Vec::new();
    for &(command, arg) in EVIDENCE_READERS {
        let (_, fixture, reads) = recipe(command, arg);
        let unread = if fixture == Fixture::Qualify { "plan.toml" } else { UNREAD };
        cases.push((command, arg, "untouched".into(), None));
        for kind in FILE_DAMAGE {
            for rel in [reads, unread] {
                cases.push((command, arg, format!("{kind:?} {rel}"), Some((kind, rel))));
            }
        }
        cases.push((command, arg, "no manifest".into(), Some((Damage::NoManifest, ""))));
        cases.push((command, arg, "extra file".into(), Some((Damage::ExtraFile, ""))));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let wrong = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let case = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((command, arg, name, what)) = cases.get(case) else { break };
                    let (template, fixture, _) = recipe(command, arg);
                    let source = match fixture {
                        Fixture::Study => &f.study,
                        Fixture::Qualify => &f.qualify,
                        Fixture::Pilots => &f.pilots,
                    };
                    let dir = tmp.path().join(format!("case{case}"));
                    copy_dir(source, &dir);
                    let outside = tmp.path().join(format!("outside{case}"));
                    std::fs::create_dir_all(&outside).unwrap();
                    let named = what.map(|(kind, rel)| damage(&dir, kind, rel, &outside));
                    let scratch = tmp.path().join(format!("scratch{case}"));
                    std::fs::create_dir_all(&scratch).unwrap();
                    std::fs::copy(tmp.path().join("rules.toml"), scratch.join("rules.toml")).unwrap();
                    let ran = run(&argv(&template, &dir, &clean, &scratch), &scratch);
                    let label = format!("harness {command} ({arg}) on {name}");
                    let problem = match named {
                        None if ran.code != Some(0) => {
                            Some(format!("{label}: exit {:?}, want 0:\n{}", ran.code, ran.text))
                        }
                        Some(n) if ran.code != Some(2) || !ran.text.contains(&n) => {
                            let text: String = ran.text.chars().take(600).collect();
                            Some(format!("{label}: exit {:?}, want 2 naming {n:?}:\n{text}", ran.code))
                        }
                        _ => None,
                    };
                    if let (Some(p), Ok(mut w)) = (problem, wrong.lock()) {
                        w.push(p);
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                }
            });
        }
    });
    let wrong = wrong.into_inner().unwrap();
    assert!(cases.len() >= EVIDENCE_READERS.len() * 13, "{} runs", cases.len());
    assert!(wrong.is_empty(), "{} of {} runs wrong:\n{}", wrong.len(), cases.len(), wrong.join("\n\n"));
}
