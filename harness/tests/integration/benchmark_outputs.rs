//! `harness benchmark`'s CSV and HTML outputs, and its file datasets, end to end
//! against `harness mock` (fixed token times): guidellm has no reader for its CSV
//! or HTML, so its own writers produce both from our JSON report (loaded by its
//! report model) and ours must equal theirs
//! (harness/tests/reference/guidellm_outputs_check.py). A file dataset
//! (`--data kind=json_file|csv_file|text_file,path=P`) becomes the requests guidellm's
//! own data loading makes of it (harness/tests/reference/guidellm_data_check.py), and
//! the mock's ground truth holds them. No timed assertions.

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
    fn start(extra: &[&str]) -> Mock {
        let mut child = Command::new(harness_bin())
            .args(["mock", "--port", "0", "--ttft-ms", "5", "--itl-ms", "2", "--model", "m"])
            .args(extra)
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

impl Mock {
    /// SIGTERM, so that the mock writes its ground truth out, then waits.
    fn stop(mut self) {
        // SAFETY: kill(2) on the child's own pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "harness mock exited {status}");
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
    let mock = Mock::start(&[]);
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

/// The guidellm data fixtures: each `--data` value with its file.
const DATA_FIXTURES: [(&str, &str); 3] =
    [("json_file", "rows.jsonl"), ("csv_file", "rows.csv"), ("text_file", "rows.txt")];

fn data_fixture(file: &str) -> std::path::PathBuf {
    workspace().join("harness/tests/fixtures/guidellm-data").join(file)
}

/// guidellm's own data loading (its deserializer, column mapper, finalizer and
/// `/v1/completions` request builder) against the requests file the harness wrote.
fn guidellm_reads_the_same(data: &str, requests: &Path) -> serde_json::Value {
    let check = Command::new("python3")
        .arg(workspace().join("harness/tests/reference/guidellm_data_check.py"))
        .arg(data)
        .arg(requests)
        .output()
        .expect("python3");
    let (o, e) = (String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "{data}: guidellm's data loading against ours (run scripts/test):\n{o}\n{e}");
    serde_json::from_str(o.lines().last().unwrap_or("")).expect("one JSON line")
}

/// A JSONL, a CSV and a text file: the requests `harness benchmark` writes beside
/// its evidence (and names in its plan) are, prompt for prompt and output length
/// for output length, the `/v1/completions` bodies guidellm's own code builds.
#[test]
fn file_datasets_are_the_requests_guidellms_data_loading_makes() {
    use clap::Parser;
    use harness::commands::bench::{BenchArgs, prepare};
    use harness::commands::benchmark::{BenchmarkArgs, freeze_data, translate};
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchmarkArgs,
    }
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    for (kind, file) in DATA_FIXTURES {
        let data = format!("kind={kind},path={}", data_fixture(file).display());
        let out = tmp.path().join(kind).join("ev");
        let argv = ["benchmark", "--backend", "kind=openai_http,target=http://127.0.0.1:9/v1,model=m", "--data", &data];
        let mut a = Cli::try_parse_from(argv).expect("flags").args;
        a.out = Some(out.clone());
        a.tokenizer = Some("kind=hf_auto,model=tok.json".into());
        let mut t = translate(&a, Defaults::try_parse_from(["bench"]).unwrap().bench).expect("translate");
        let requests = freeze_data(&mut t).expect("write").expect("a file dataset");
        assert_eq!(requests, tmp.path().join(kind).join("ev.requests.jsonl"));
        let plan = prepare(&t.bench, || 1, 0).expect("plan").text;
        assert!(plan.contains(&format!("path = \"{}\"", requests.display())), "{plan}");
        let v = guidellm_reads_the_same(&data, &requests);
        let forced = if kind == "text_file" { 0 } else { 3 };
        assert_eq!((v["rows"].as_u64(), v["forced"].as_u64()), (Some(3), Some(forced)), "{kind}: {v}");
    }
}

/// One bounded run on a JSONL file against the mock: the requests the mock received
/// (its ground truth) are the file's rows, each prompt's words and output length.
#[test]
fn a_json_file_dataset_runs_and_the_mock_receives_the_files_rows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let truth = tmp.path().join("truth.jsonl");
    let mock = Mock::start(&["--ground-truth", truth.to_str().unwrap()]);
    // One token per word (whitespace words, unknown words as [UNK]): the mock counts
    // a token-ID prompt's IDs.
    let tokenizer = tmp.path().join("tokenizer.json");
    std::fs::write(
        &tokenizer,
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"[UNK]":0},"unk_token":"[UNK]"}}"#,
    )
    .unwrap();
    let rows = data_fixture("rows.jsonl");
    let run = benchmark(
        tmp.path(),
        &mock.url,
        &strings(&[
            "--profile",
            "kind=synchronous",
            "--data",
            &format!("kind=json_file,path={}", rows.display()),
            "--tokenizer",
            &format!("kind=hf_auto,model={}", tokenizer.display()),
            "--output",
            "kind=json",
            "--out",
            "ev",
        ]),
    );
    mock.stop();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let requests = tmp.path().join("ev.requests.jsonl");
    assert!(stdout.contains(&format!("wrote {}", Path::new("ev.requests.jsonl").display())), "{stdout}");
    guidellm_reads_the_same(&format!("kind=json_file,path={}", rows.display()), &requests);
    // The file's rows: each prompt's words and its output_tokens_count.
    let want: Vec<(u64, u32)> = std::fs::read_to_string(&rows)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let words = v["Questions"].as_str().unwrap().split_whitespace().count() as u64;
            (words, v["output_tokens_count"].as_u64().unwrap() as u32)
        })
        .collect();
    let (_, mut got) = harness::mock::read_truth(&truth).expect("ground truth");
    got.sort_by_key(|t| t.arrival_ns);
    let got: Vec<(u64, u32)> = got.iter().map(|t| (t.prompt_tokens, t.max_tokens)).collect();
    // Warmup requests (from the same panel) come first; the cell's are the file's rows in order.
    assert!(got.len() >= want.len(), "{got:?}");
    assert_eq!(got[got.len() - want.len()..], want[..], "mock received {got:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("benchmarks.json")).unwrap()).unwrap();
    assert_eq!(report["benchmarks"].as_array().map(Vec::len), Some(1), "{report}");
}
