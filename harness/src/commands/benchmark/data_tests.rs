//! Tests of guidellm's file datasets (`data_file`) and their flags: the column
//! guidellm would choose, the CSV and text readings, the plan they become, and
//! every refusal with its reason.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::data_file::{FileKind, Row, read, to_requests_jsonl};
use super::*;
use crate::commands::bench::prepare;

use super::tests::{Cli, Defaults};

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn rows(kind: FileKind, dir: &Path, name: &str, text: &str) -> Result<Vec<Row>, String> {
    read(kind, &file(dir, name, text))
}

fn row(prompt: &str, n: Option<u32>) -> Row {
    Row { prompt: prompt.into(), output_tokens: n }
}

fn translated(data: &str, flags: &[&str]) -> Result<Translated, BenchError> {
    let mut argv = vec!["benchmark", "--backend", "kind=openai_http,target=http://127.0.0.1:9,model=m", "--data", data];
    argv.extend_from_slice(flags);
    translate(&Cli::try_parse_from(argv).unwrap().args, Defaults::try_parse_from(["bench"]).unwrap().bench)
}

#[test]
fn the_prompt_is_the_first_column_in_file_order_of_guidellms_names() {
    let tmp = tempfile::tempdir().unwrap();
    // `Questions` (plural, any case) comes before `text`; the count columns are
    // not prompts; keys first seen in a later row are columns too.
    let r = rows(
        FileKind::Json,
        tmp.path(),
        "a.jsonl",
        "{\"id\": 1, \"Questions\": \"q1\", \"input_tokens_count\": 2, \"completion_tokens_count\": 3}\n\n\
         {\"id\": 2, \"Questions\": \"q2\", \"completion_tokens_count\": 0, \"text\": \"t\"}\n",
    );
    assert!(r.unwrap_err().contains("1 of 2 rows give an output length: refused"));
    let r = rows(FileKind::Json, tmp.path(), "b.json", "[{\"n\": 1, \"prompt_3\": \"p\", \"output_tokens_count\": 7}]");
    assert_eq!(r.unwrap(), [row("p", Some(7))]);
    let r = rows(FileKind::Json, tmp.path(), "c.jsonl", "{\"context\": \"c\", \"instruction\": \"i\"}\n");
    assert_eq!(r.unwrap(), [row("c", None)], "file order, not the names' order");
}

#[test]
fn csv_and_text_files_read_as_pandas_and_readlines_read_them() {
    let tmp = tempfile::tempdir().unwrap();
    let r = rows(
        FileKind::Csv,
        tmp.path(),
        "a.CSV",
        "id,prompt,output_tokens_count\r\n1,\"a, \"\"b\"\"\nc\",2\r\n\n2,plain,3.0\n",
    );
    assert_eq!(r.unwrap(), [row("a, \"b\"\nc", Some(2)), row("plain", Some(3))]);
    let r = rows(FileKind::Text, tmp.path(), "a.txt", "one\r\ntwo\n\nthree");
    assert_eq!(r.unwrap(), [row("one\n", None), row("two\n", None), row("\n", None), row("three", None)]);
    let lines = to_requests_jsonl(&[row("x\n", Some(2)), row("y", None)]);
    assert_eq!(lines, "{\"output_tokens\":2,\"prompt\":\"x\\n\"}\n{\"prompt\":\"y\"}\n");
}

#[test]
fn file_rows_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    for (kind, name, text, want) in [
        (FileKind::Json, "a.csv", "", "kind=json_file reads a .json or .jsonl file"),
        (FileKind::Text, "a.md", "x", "kind=text_file reads a .txt or .text file"),
        (FileKind::Json, "b.jsonl", "{\"id\": 1}\n", "no prompt column among [\"id\"]"),
        (FileKind::Json, "c.jsonl", "{\"prompt\": \"a\", \"prompt_1\": \"b\"}\n", "several prompt columns"),
        (FileKind::Json, "d.jsonl", "{\"system\": \"s\", \"prompt\": \"a\"}\n", "column \"system\" (a prefix"),
        (FileKind::Json, "e.jsonl", "{\"prompt\": \"a\", \"images\": []}\n", "column \"images\" (images)"),
        (FileKind::Json, "f.jsonl", "{\"prompt\": 3}\n", "a prompt is non-empty text"),
        (FileKind::Json, "g.jsonl", "{\"prompt\": \"a\", \"output_tokens_count\": 1.5}\n", "not a whole number"),
        (FileKind::Json, "h.jsonl", "[1]", "a JSON object"),
        (FileKind::Csv, "i.csv", "prompt\nNA\n", "a prompt is non-empty text"),
        (FileKind::Csv, "j.csv", "prompt\n\"open\n", "a quoted field is not closed"),
        (FileKind::Text, "k.txt", "", "no rows"),
    ] {
        let e = rows(kind, tmp.path(), name, text).unwrap_err();
        assert!(e.contains(want), "{name}: want {want:?} in {e}");
    }
}

/// A file's rows become a `requests` panel written beside the evidence: every
/// row once (at most max_requests), forced outputs when the rows give them.
#[test]
fn a_file_dataset_is_a_requests_panel_beside_the_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let f = file(
        tmp.path(),
        "d.jsonl",
        "{\"prompt\": \"a b\", \"output_tokens_count\": 3}\n{\"prompt\": \"c\", \"output_tokens_count\": 4000}\n",
    );
    let data = format!("kind=json_file,path={}", f.display());
    let out = tmp.path().join("ev");
    let tok = "kind=huggingface_auto,model=tok.json";
    let mut t =
        translated(&data, &["--profile", "kind=synchronous", "--tokenizer", tok, "--out", out.to_str().unwrap()])
            .unwrap();
    assert!(!tmp.path().join("ev.requests.jsonl").exists(), "translate writes nothing");
    let written = freeze_data(&mut t).unwrap().unwrap();
    assert_eq!(written, tmp.path().join("ev.requests.jsonl"));
    let text = prepare(&t.bench, || 1, 0).unwrap().text;
    for want in [
        "source = \"requests\"",
        &format!("path = \"{}\"", written.display()),
        "tokenizer = \"tok.json\"",
        "num_requests = 2",
        "max_output_tokens = 4000",
        "output = \"forced\"",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    let t = translated(&data, &["--constraint", "kind=max_requests,count=1", "--profile", "kind=synchronous"]).unwrap();
    assert_eq!((t.bench.max_requests, t.bench.dataset_path.as_deref()), (Some(1), None));
    let txt = file(tmp.path(), "d.txt", "a\nb\n");
    let t = translated(&format!("kind=text_file,path={}", txt.display()), &["--out", "x"]).unwrap();
    let text = prepare(&t.bench, || 1, 0).unwrap().text;
    assert!(text.contains("output = \"natural\"") && text.contains("max_output_tokens = 2048"), "{text}");
}

#[test]
fn data_flags_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let f = file(tmp.path(), "d.jsonl", "{\"prompt\": \"a\"}\n");
    let json = format!("kind=json_file,path={}", f.display());
    for (data, flags, want) in [
        (json.as_str(), &[][..], ""),
        ("d.jsonl", &[], "--data \"d.jsonl\": expected kind=...,key=value"),
        ("kind=huggingface,path=org/name", &[], "needs the hub, which this harness never reaches (offline)"),
        ("kind=parquet_file,path=x.parquet", &[], "--data kind=parquet_file: refused"),
        ("kind=json_file", &[], "--data kind=json_file: give path=P"),
        (&format!("{json},split=train"), &[], "key \"split\" is refused"),
        ("kind=json_file,path=/nonexistent/x.jsonl", &[], "/nonexistent/x.jsonl"),
        (
            "kind=synthetic_text,prompt_tokens=4,output_tokens=2",
            &["--tokenizer", "kind=hf_auto,model=t"],
            "--tokenizer: refused with synthetic_text",
        ),
        (json.as_str(), &["--tokenizer", "kind=tiktoken"], "--tokenizer kind=tiktoken: refused"),
        (json.as_str(), &["--tokenizer", "kind=hf_auto,model=t,revision=x"], "key \"revision\" is refused"),
        (json.as_str(), &["--data-column-mapper", "{}"], "--data-column-mapper: refused"),
    ] {
        match translated(data, flags) {
            Ok(_) if want.is_empty() => {}
            Ok(_) => panic!("{data} {flags:?}: expected {want:?}"),
            Err(e) => assert!(!want.is_empty() && e.to_string().contains(want), "{data}: want {want:?} in {e}"),
        }
    }
}
