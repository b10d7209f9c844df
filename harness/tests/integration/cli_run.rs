//! `harness run` refusals that need no server: an underived plan, and an evidence
//! directory that is not empty (without --force); bad input (a malformed,
//! unreadable or invalid plan, bad arguments) exits 2 like the engine.

use crate::common;

use std::process::Command;

use common::*;

const PLAN: &str = r#"[study]
name = "refusals"
seed = 1

[request]
model = "m"
output_tokens = 4

[prompts]
source = "random"
max_token_id = 99
lengths = [8]
documents = 2

[warmup]
prompts = 0

[timing]
settle_s = 0.0
request_timeout_s = 5.0
drain_timeout_s = 5.0

[blocks]
count = 1
arm_order = "fixed"
cell_order = "fixed"

[[arms]]
name = "ext"
role = "control"
url = "http://127.0.0.1:9"
startup_timeout_s = 1.0

[[cells]]
name = "open"
kind = "confirmation"
load = "open"
rate = "derived:near"
count = 2

[derive]
pilot_rates = [5.0]
near_fraction = 0.9
"#;

fn harness(args: &[&str], plan: &std::path::Path) -> std::process::Output {
    Command::new(harness_bin()).arg("run").args(args).arg(plan).output().expect("run harness")
}

#[test]
fn an_underived_plan_is_refused_before_any_evidence() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, PLAN).expect("write");
    let out = tmp.path().join("ev");
    let run = harness(&["--quiet", "--out", out.to_str().expect("utf-8")], &plan);
    assert_eq!(run.status.code(), Some(2), "bad input");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("not derived yet"), "{err}");
    assert!(!out.exists(), "no evidence directory for a refused plan");
}

#[test]
fn a_non_empty_evidence_directory_is_refused_without_force() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, format!("{PLAN}\n[derived]\nnear = 4.5\n")).expect("write");
    let out = tmp.path().join("ev");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("notes.txt"), "mine").expect("write");
    let run = harness(&["--quiet", "--out", out.to_str().expect("utf-8")], &plan);
    assert_eq!(run.status.code(), Some(2), "an occupied --out is bad input");
    assert!(String::from_utf8_lossy(&run.stderr).contains("not empty"));
    let forced = harness(&["--quiet", "--force", "--out", out.to_str().expect("utf-8")], &plan);
    assert_eq!(forced.status.code(), Some(2), "--force never deletes a directory that holds no study");
    assert_eq!(std::fs::read_to_string(out.join("notes.txt")).expect("kept"), "mine");
}

/// Bad input exits 2 (as the engine does and as clap does for bad usage), with the
/// message naming the problem; nothing is written.
#[test]
fn bad_input_exits_2_naming_the_problem() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("ev");
    let derived = format!("{PLAN}\n[derived]\nnear = 4.5\n");
    let cases: [(&str, String, &str); 4] = [
        ("malformed", "[study\nname = ".to_string(), "does not parse"),
        ("missing-key", derived.replacen("model = \"m\"\n", "", 1), "missing field `model`"),
        ("invalid-value", derived.replacen("count = 2\n", "count = 0\n", 1), "cells[0].count"),
        ("underived", PLAN.to_string(), "not derived yet"),
    ];
    for (name, text, want) in cases {
        let plan = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&plan, text).expect("write");
        for args in [vec!["run", "--quiet", "--out", out.to_str().expect("utf-8")], vec!["plan", "check"]] {
            if args[0] == "plan" && name == "underived" {
                continue; // `plan check` accepts a valid plan that is not ready to run
            }
            let o = Command::new(harness_bin()).args(&args).arg(&plan).output().expect("run harness");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {err}");
            assert!(err.contains(want), "{name} {args:?}: {want:?} not in {err}");
        }
        assert!(!out.exists(), "{name}: no evidence directory for bad input");
    }
    // An unreadable plan, and bad usage (clap).
    let o = Command::new(harness_bin()).args(["plan", "check"]).arg(tmp.path().join("nowhere.toml")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(harness_bin()).args(["run", "--no-such-flag"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `harness args` in the workspace; a run still going after 30 s is a failure.
fn within_30s(args: &[&std::ffi::OsStr]) -> std::process::Output {
    harness_within(None, args, std::time::Duration::from_secs(30)).unwrap_or_else(|e| panic!("harness {args:?}: {e}"))
}

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo(3) on a NUL-terminated path inside this test's temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// A FIFO where a plan, a trace file, a dataset or a tokenizer should be is refused
/// at once, exit 2, naming it (it was waited on for ever), and `run` writes nothing.
#[test]
fn fifo_inputs_are_refused_at_once_not_waited_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let fifo = |name: &str| {
        let p = dir.join(name);
        mkfifo(&p);
        p.display().to_string()
    };
    let derived = format!("{PLAN}\n[derived]\nnear = 4.5\n");
    let random =
        "output_tokens = 4\n\n[prompts]\nsource = \"random\"\nmax_token_id = 99\nlengths = [8]\ndocuments = 2\n";
    assert!(derived.contains(random));
    let sharegpt = |path: &str, tokenizer: &str| {
        derived.replacen(
            random,
            &format!(
                "output = \"natural\"\nmax_output_tokens = 8\n\n[prompts]\nsource = \"sharegpt\"\npath = {path:?}\n\
                 tokenizer = {tokenizer:?}\nnum_requests = 2\n"
            ),
            1,
        )
    };
    let (plan_fifo, trace_fifo, data_fifo, tok_fifo) =
        (fifo("plan-fifo.toml"), fifo("arrivals.jsonl"), fifo("sharegpt.json"), fifo("tokenizer.json"));
    let regular = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let tokenizer = regular(
        "tok.json",
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":null,"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"a":0,"[UNK]":1},"unk_token":"[UNK]"}}"#,
    );
    let data = regular("data.json", "[]");
    let trace_cell = format!(
        "[[cells]]\nname = \"replayed\"\nkind = \"descriptive\"\nload = \"trace\"\ntrace = {trace_fifo:?}\n\
         count = 2\n\n[[cells]]\n"
    );
    let cases: Vec<(&str, Option<String>)> = vec![
        ("plan", None),
        ("trace", Some(derived.replacen("[[cells]]\n", &trace_cell, 1))),
        ("tokenizer", Some(sharegpt(&data, &tok_fifo))),
        ("sharegpt", Some(sharegpt(&data_fifo, &tokenizer))),
    ];
    for (name, text) in cases {
        let plan = match text {
            None => std::path::PathBuf::from(&plan_fifo),
            Some(t) => std::path::PathBuf::from(regular(&format!("{name}.toml"), &t)),
        };
        let out = dir.join(format!("ev-{name}"));
        // `plan check` reads the plan and its trace files; `run` every input.
        let check = ["plan".as_ref(), "check".as_ref(), plan.as_os_str()];
        let run = ["run".as_ref(), "--quiet".as_ref(), "--out".as_ref(), out.as_os_str(), plan.as_os_str()];
        let trace = ["trace".as_ref(), "--out".as_ref(), out.as_os_str(), plan.as_os_str()];
        let mut commands = vec![&run[..], &trace[..]];
        if matches!(name, "plan" | "trace") {
            commands.push(&check[..]);
        }
        for args in commands {
            let o = within_30s(args);
            let err = String::from_utf8_lossy(&o.stderr);
            // `plan check` names it from its metadata, the readers when they open it.
            let named = err.contains("is a FIFO (named pipe): inputs are read only from regular files")
                || err.contains("is a FIFO (named pipe), not a regular file");
            assert!(named, "{name} {args:?}: {err}");
            assert_eq!(o.status.code(), Some(2), "{name} {args:?}: bad input: {err}");
        }
        assert!(!out.exists(), "{name}: nothing is written for bad input");
    }
    // A malformed trace file: exit 2 from all three commands (`trace` exited 1).
    let bad = regular("bad.jsonl", "{\"bad\": 1}\n");
    let trace_cell = trace_cell.replace(&format!("{trace_fifo:?}"), &format!("{bad:?}"));
    let plan = regular("bad-trace.toml", &derived.replacen("[[cells]]\n", &trace_cell, 1));
    let out = dir.join("ev-bad");
    for args in [
        vec!["plan".as_ref(), "check".as_ref(), std::ffi::OsStr::new(&plan)],
        vec!["trace".as_ref(), "--out".as_ref(), out.as_os_str(), std::ffi::OsStr::new(&plan)],
        vec!["run".as_ref(), "--quiet".as_ref(), "--out".as_ref(), out.as_os_str(), std::ffi::OsStr::new(&plan)],
    ] {
        let o = within_30s(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("bad.jsonl, line 1: missing field \"timestamp\""), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

/// `plan check` names an input of the wrong kind (a texts "directory" that is a
/// file, a tokenizer that is a directory) as an error, and a missing qualification
/// tokenizer as a warning (each passed without a word).
#[test]
fn plan_check_names_inputs_of_the_wrong_kind_and_missing_qualification_inputs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("texts.txt"), "not a directory").expect("write");
    std::fs::create_dir_all(dir.join("tok-dir")).expect("mkdir");
    let derived = format!("{PLAN}\n[derived]\nnear = 4.5\n");
    let random = "source = \"random\"\nmax_token_id = 99\nlengths = [8]\ndocuments = 2\n";
    let text = format!(
        "source = \"text\"\ntexts = {:?}\ntokenizer = {:?}\nlengths = [8]\ndocuments = 2\n",
        dir.join("texts.txt").display().to_string(),
        dir.join("tok-dir").display().to_string()
    );
    let plan = dir.join("wrong-kind.toml");
    std::fs::write(&plan, derived.replacen(random, &text, 1)).expect("write");
    let o = Command::new(harness_bin()).args(["plan", "check"]).arg(&plan).output().expect("plan check");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let texts = "texts.txt is a regular file, not a directory of texts";
    assert!(err.contains("prompts.texts: ") && err.contains(texts), "{err}");
    assert!(err.contains("prompts.tokenizer: ") && err.contains("tok-dir is a directory, not a regular file"), "{err}");

    let qualified = format!(
        "{derived}\n[qualification]\ntokenizer = {:?}\n\n[qualification.parity]\nprompts = 2\ninput_tokens = 8\n\
         output_tokens = 2\n\n[qualification.parity.reference]\next = [\"engine\", \"generate\"]\n",
        dir.join("no-such-tokenizer.json").display().to_string()
    );
    let plan = dir.join("qualified.toml");
    std::fs::write(&plan, qualified).expect("write");
    let o = Command::new(harness_bin()).args(["plan", "check"]).arg(&plan).output().expect("plan check");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("warning: qualification.tokenizer: ") && out.contains("no-such-tokenizer.json does not exist"),
        "{out}"
    );
}

/// A required qualification whose texts are missing is refused before anything is
/// written (it stopped the study after the pilot phase, leaving a partial directory).
#[test]
fn run_refuses_a_missing_qualification_input_before_writing_anything() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let tokenizer = dir.join("tok.json");
    std::fs::write(&tokenizer, "{}").expect("write");
    let plan = dir.join("qualified.toml");
    std::fs::write(
        &plan,
        format!(
            "{PLAN}\n[derived]\nnear = 4.5\n\n[qualification]\nrequired = true\ntokenizer = {:?}\ntexts = {:?}\n\n\
             [qualification.parity]\nprompts = 2\ninput_tokens = 8\noutput_tokens = 2\n\n\
             [qualification.parity.reference]\next = [\"engine\", \"generate\"]\n",
            tokenizer.display().to_string(),
            dir.join("no-texts").display().to_string()
        ),
    )
    .expect("write");
    let out = dir.join("ev");
    let o = harness(&["--quiet", "--out", out.to_str().expect("utf-8")], &plan);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("qualification.texts: ") && err.contains("no-texts does not exist"), "{err}");
    assert!(!out.exists(), "nothing is written");
}

/// The GPU plans that start this engine ask it for `--device cuda`: `plan check`
/// passes them now that the engine has a CUDA backend, holding each such arm's
/// startup line to the GPU it names (`startup line device = cuda:0`, from the
/// `engine` identity preset); without that preset the arm is refused (nothing
/// would prove the device before timing), by `run` too, writing nothing; and
/// `plan check --probe` refuses such an arm where the engine cannot open a GPU
/// (this test's engine is built without the CUDA backend, and these machines have
/// no GPU): the server exits 2 naming why.
#[test]
fn plans_that_ask_this_engine_for_cuda_check_the_device_and_fail_their_probe_without_a_gpu() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in ["gpu-engine-1k", "gpu-engine-8k", "gpu-vllm-1k", "gpu-vllm-8k"] {
        let plan = workspace().join(format!("plans/{name}.toml"));
        let check = |plan: &std::path::Path| {
            Command::new(harness_bin()).args(["plan", "check"]).arg(plan).current_dir(workspace()).output()
        };
        let o = check(&plan).expect("plan check");
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{name}: {out}\n{err}");
        assert!(out.contains("startup line device = cuda:0"), "{name}: {out}");
        // The same plan without the engine preset on its arms is refused.
        let text = std::fs::read_to_string(&plan).expect("read plan");
        let unproven: String =
            text.lines().filter(|l| !l.starts_with("identity = ")).map(|l| format!("{l}\n")).collect();
        let copy = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&copy, unproven).expect("write plan");
        let o = check(&copy).expect("plan check");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("starts this engine with --device cuda but has no `identity"), "{name}: {err}");
        let out = tmp.path().join(name);
        let o = Command::new(harness_bin())
            .args(["run", "--quiet", "--out", out.to_str().expect("utf-8")])
            .arg(&copy)
            .current_dir(workspace())
            .output()
            .expect("run harness");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("has no `identity") && !out.exists(), "{name}: {err}");
    }
    let model = synth_model(tmp.path());
    let argv = serve_argv(&model, &["--kv-format", "f16", "--device", "cuda"], &[]);
    let plan = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new("gpu-probe", 3) }
        .arm("gpu", "control", &argv)
        .closed("c", "confirmation", 1, 2)
        .render()
        .replace(
            "receipts = \"{arm_dir}/receipts.jsonl\"\n",
            "receipts = \"{arm_dir}/receipts.jsonl\"\nidentity = { preset = \"engine\" }\n",
        );
    let path = tmp.path().join("gpu-probe.toml");
    std::fs::write(&path, plan).expect("write plan");
    let o = Command::new(harness_bin()).args(["plan", "check"]).arg(&path).output().expect("plan check");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let probe = probe_plan(&path, tmp.path());
    let (stdout, stderr) = (String::from_utf8_lossy(&probe.stdout), String::from_utf8_lossy(&probe.stderr));
    assert_eq!(probe.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("probe: arm gpu (spawn): FAILED"), "{stdout}");
    assert!(
        stderr.contains("built without the CUDA backend") || stderr.contains("no CUDA driver"),
        "the server's own refusal is shown: {stderr}"
    );
}
