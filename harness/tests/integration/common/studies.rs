//! Small real-engine studies for replay's tests: a study killed with SIGKILL in the
//! middle of an arm and resumed (`--debug-step-delay-us` slows each engine step so
//! the kill lands mid-arm), and a study whose plan requires qualification with every
//! gate (NLL, retrieval, GSM-style, parity).

use std::path::Path;
use std::process::Command;

/// 20 ms per engine step: each unit takes about a second, so the kill lands mid-arm.
pub fn resume_plan(model: &Path) -> String {
    let scales = model.join("scales.json").display().to_string();
    let slow = ["--debug-step-delay-us", "20000"];
    let f16 = super::serve_argv(model, &["--kv-format", "f16"], &slow);
    let k16v8 = super::serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &scales], &slow);
    let plan = super::TestPlan { documents: 3, settle_s: 0.3, ..super::TestPlan::new("replay-resume", 13) };
    plan.arm("f16", "control", &f16)
        .arm("k16v8", "candidate", &k16v8)
        .closed("first", "confirmation", 2, 4)
        .closed("second", "confirmation", 2, 6)
        .tail(
            "[analysis]\nalpha = 0.05\n\n[[hypotheses]]\nmetric = \"throughput_rps\"\ncell = \"second\"\n\
             candidate = \"k16v8\"\ncontrol = \"f16\"\nthreshold = 0.01\n",
        )
        .render()
}

/// Runs the study and kills the harness (SIGKILL) once block 1's first unit has
/// written its first cell; then resumes it to the end.
pub fn run_killed_and_resumed(plan: &Path, out: &Path) {
    let mut child = Command::new(super::harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(out)
        .arg(plan)
        .current_dir(super::workspace())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn harness");
    let marker = out.join("raw/b1/f16/first.requests.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while !marker.is_file() {
        assert!(std::time::Instant::now() < deadline, "block 1 never reached its second cell");
        assert!(child.try_wait().expect("try_wait").is_none(), "the harness ended before the kill");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL the harness");
    child.wait().expect("wait harness");
    let r = Command::new(super::harness_bin())
        .args(["run", "--quiet", "--resume"])
        .arg(out)
        .arg(plan)
        .current_dir(super::workspace())
        .output()
        .expect("harness --resume");
    assert!(r.status.success(), "resume failed:\n{}", String::from_utf8_lossy(&r.stderr));
}

pub fn qualification_plan(model: &Path) -> String {
    let engine = super::engine_bin().display().to_string();
    let scales = model.join("scales.json").display().to_string();
    // GSM prompts need more than the helper's 256-token context.
    let serve = |kv: &[&str]| {
        let mut argv = super::serve_argv(model, kv, &[]);
        if let Some(i) = argv.iter().position(|a| a == "--max-model-len") {
            argv[i + 1] = "1024".into();
        }
        argv
    };
    let m = model.display().to_string();
    let reference: Vec<String> =
        [&engine, "generate", "--model", &m, "--kv-format", "f16", "--threads", "1", "--json"].map(String::from).into();
    let plan = super::TestPlan { output_tokens: 4, warmup_prompts: 0, blocks: 1, ..super::TestPlan::new("rq", 5) };
    plan.arm("f16", "control", &serve(&["--kv-format", "f16"]))
        .arm("k16v8", "candidate", &serve(&["--kv-format", "k16v8", "--kv-scales", &scales]))
        .closed("closed-2", "confirmation", 2, 4)
        .tail(&format!(
            "[analysis]\nalpha = 0.05\n\n[[hypotheses]]\nmetric = \"output_tokens_per_s\"\ncell = \"closed-2\"\n\
             candidate = \"k16v8\"\ncontrol = \"f16\"\nthreshold = 0.01\n\n\
             [qualification]\nrequired = true\ntokenizer = {tok:?}\ntexts = \"assets/texts\"\npattern = \"*_gut.txt\"\n\
             concurrency = 4\n\n[qualification.nll]\ndocuments = 4\ntokens = 64\n\n\
             [qualification.retrieval]\nprompts = 4\ncontext_tokens = 320\nmax_loss_rate = 0.9\n\n\
             [qualification.gsm]\npath = \"assets/gsm-style/test.jsonl\"\ndataset = \"gsm-style\"\nsubset = 3\n\
             max_tokens = 8\nmax_loss_rate = 0.9\n\n\
             [qualification.parity]\nprompts = 4\ninput_tokens = 16\noutput_tokens = 6\nconcurrency = 4\n\n\
             [qualification.parity.reference]\nf16 = {reference}\n",
            tok = model.join("tokenizer.json").display().to_string(),
            reference = super::toml_array(&reference),
        ))
        .render()
}
