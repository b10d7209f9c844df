//! `harness benchmark`'s CSV and HTML outputs, and its file datasets, end to end
//! against `harness mock` (fixed token times): guidellm has no reader for its CSV
//! or HTML, so its own writers produce both from our JSON report (loaded by its
//! report model) and ours must equal theirs
//! (harness/tests/reference/guidellm_outputs_check.py). No timed assertions.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use crate::common::*;

/// `harness mock` on a free port; stopped when dropped.
struct Mock {
    child: Child,
    url: String,
}

impl Mock {
    fn start() -> Mock {
        let mut child = Command::new(harness_bin())
            .args(["mock", "--port", "0", "--ttft-ms", "5", "--itl-ms", "2", "--model", "m"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start harness mock");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
        let url = line.trim().rsplit(' ').next().expect("address").to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        Mock { child, url }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn benchmark(cwd: &Path, url: &str, flags: &[String]) -> Output {
    Command::new(harness_bin())
        .args(["benchmark", "run", "--backend"])
        .arg(format!("kind=openai_http,target={url}/v1,model=m"))
        .args(flags)
        .arg("--disable-console")
        .current_dir(cwd)
        .output()
        .expect("harness benchmark")
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A constant-rate run writes guidellm's JSON, CSV and HTML, each where guidellm
/// would put it (its default name in the working directory, inside a directory
/// given as the path, a new parent directory made), and the CSV and HTML equal
/// what guidellm's own writers make of the JSON report.
#[test]
fn csv_and_html_equal_what_guidellms_writers_make_of_the_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mock = Mock::start();
    let csv_dir = tmp.path().join("tables");
    std::fs::create_dir(&csv_dir).unwrap();
    let html = tmp.path().join("new/report.html");
    let run = benchmark(
        tmp.path(),
        &mock.url,
        &strings(&[
            "--profile",
            "kind=constant,rate=[20,40]",
            "--constraint",
            "kind=max_requests,count=6",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=4",
            "--output",
            "kind=json",
            "--output",
            &format!("kind=csv,path={}", csv_dir.display()),
            "--output",
            &format!("kind=html,path={}", html.display()),
            "--out",
            "ev",
        ]),
    );
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let (json, csv) = (Path::new("benchmarks.json"), csv_dir.join("benchmarks.csv"));
    for p in [json, csv.as_path(), html.as_path()] {
        assert!(stdout.contains(&format!("wrote {}", p.display())), "{}: {stdout}", p.display());
    }
    let check = Command::new("python3")
        .arg(workspace().join("harness/tests/reference/guidellm_outputs_check.py"))
        .arg(tmp.path().join(json))
        .arg(&csv)
        .arg(&html)
        .output()
        .expect("python3");
    let (o, e) = (String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "guidellm's writers against ours (run scripts/test):\n{o}\n{e}");
    let v: serde_json::Value = serde_json::from_str(o.lines().last().unwrap_or("")).expect("one JSON line");
    assert_eq!((v["benchmarks"].as_u64(), v["csv_rows"].as_u64()), (Some(2), Some(5)), "{v}");
}
