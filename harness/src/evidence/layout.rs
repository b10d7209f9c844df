//! Owns the names of the evidence tree's files and folders, as in the tree drawn in
//! `evidence/mod.rs` (and docs/design.md section 4), for the files no typed record
//! beside it owns (those records keep their own: `RUN_FILE`, `UNIT_FILE`,
//! `MANIFEST_FILE`, `STARTUP_FILE`, `COMPARE_FILE`, `DISPATCH_FILE`, ...). Every
//! evidence file or folder name is written once, here or next to its record; code
//! outside `evidence/` uses these names and never spells one as a string literal
//! (the test at the end of this file holds it to that). Must not decide what the
//! files contain.
//!
//! A name ending in `_FILE` or `_DIR` that holds a `/` is relative to the evidence
//! root; one without is a plain name inside the folder its doc comment gives.

// The study's top level.

/// The plan's exact bytes, at the evidence root (first write).
pub const PLAN_FILE: &str = "plan.toml";
/// With `[sequential]`: every look, verdict and stop, at the evidence root.
pub const SEQUENTIAL_FILE: &str = "sequential.json";
/// The end of the name of a file dataset's requests lines that `harness benchmark`
/// writes beside (outside) an evidence directory, `<dir>.requests.jsonl`: the plan
/// names it, the run copies its panel into `inputs/`.
pub const BESIDE_REQUESTS_SUFFIX: &str = ".requests.jsonl";
/// `harness compare`'s report for a reader, beside `compare.json`.
pub const COMPARE_REPORT_FILE: &str = "compare.md";

// inputs/ (a study's, the pilots', qualification's).

/// The inputs' folder, at the evidence root (and at the pilots' and qualification's).
pub const INPUTS_DIR: &str = "inputs";
/// The prompt panel, in an inputs folder.
pub const PROMPTS_FILE: &str = "prompts.jsonl";
/// The inputs' catalog (every file, its size and hash), in an inputs folder.
pub const CATALOG_FILE: &str = "catalog.json";
/// `inputs/prompts.jsonl`, relative to the evidence root.
pub const PROMPTS_PATH: &str = "inputs/prompts.jsonl";
/// `inputs/catalog.json`, relative to the evidence root.
pub const CATALOG_PATH: &str = "inputs/catalog.json";
/// The cells' request lists, in an inputs folder.
pub const TRACES_DIR: &str = "traces";
/// The copies of the cells' arrival-trace files, in an inputs folder.
pub const ARRIVALS_DIR: &str = "arrivals";
/// The end of a cell's trace file's name.
pub const TRACE_SUFFIX: &str = ".trace.jsonl";

/// `traces/<cell>.trace.jsonl`, relative to an inputs folder.
pub fn trace_file(cell: &str) -> String {
    format!("{TRACES_DIR}/{cell}{TRACE_SUFFIX}")
}

/// `inputs/traces/<cell>.trace.jsonl`, relative to the evidence root.
pub fn trace_path(cell: &str) -> String {
    format!("{INPUTS_DIR}/{}", trace_file(cell))
}

/// `arrivals/<cell>.<ext>` (`ext`: `jsonl` or `csv`), relative to an inputs folder.
pub fn arrivals_file(cell: &str, ext: &str) -> String {
    format!("{ARRIVALS_DIR}/{cell}.{ext}")
}

/// `inputs/arrivals/<cell>.<ext>`, relative to the evidence root.
pub fn arrivals_path(cell: &str, ext: &str) -> String {
    format!("{INPUTS_DIR}/{}", arrivals_file(cell, ext))
}

// raw/b<block>/<arm>/: one server invocation.

/// The units' folder, at the evidence root (and at the pilots').
pub const RAW_DIR: &str = "raw";
/// The server's stdout and stderr, in a unit's (or a qualification arm's) folder.
pub const SERVER_LOG_FILE: &str = "server.log";
/// The engine's per-request receipts, in a unit's folder.
pub const RECEIPTS_FILE: &str = "receipts.jsonl";
/// The 1 Hz `/metrics` scrapes, in a unit's folder.
pub const SCRAPES_FILE: &str = "scrapes.jsonl";
/// The memory samples, in a unit's folder.
pub const MEMORY_FILE: &str = "memory.jsonl";
/// The end of a cell's raw request records' name.
pub const REQUESTS_SUFFIX: &str = ".requests.jsonl";
/// `harness compare`'s parity run, in its arm's folder under `raw/parity/`.
pub const PARITY_FILE: &str = "parity.jsonl";
/// The phase folder of `harness compare`'s parity runs, under `raw/`.
pub const PARITY_PHASE: &str = "parity";

/// `<cell>.requests.jsonl`, in a unit's folder.
pub fn requests_file(cell: &str) -> String {
    format!("{cell}{REQUESTS_SUFFIX}")
}

/// `raw/b<block>/<arm>`, relative to the evidence root.
pub fn unit_path(block: u32, arm: &str) -> String {
    format!("{RAW_DIR}/b{block}/{arm}")
}

/// `raw/b<block>/<arm>/<cell>.requests.jsonl`, relative to the evidence root.
pub fn requests_path(block: u32, arm: &str, cell: &str) -> String {
    format!("{}/{}", unit_path(block, arm), requests_file(cell))
}

// results/

/// The results' folder, at the evidence root (and at the pilots').
pub const RESULTS_DIR: &str = "results";
/// The per-cell summaries' folder, inside `results/`.
pub const CELLS_DIR: &str = "cells";
/// The end of a per-cell summary's name.
pub const SUMMARY_SUFFIX: &str = ".summary.json";
/// Every cell's summary in one file.
pub const SUMMARIES_FILE: &str = "results/summaries.json";
/// The study's qualification outcome, copied into `results/`.
pub const QUALIFICATION_RESULT_FILE: &str = "results/qualification.json";
/// The cell matrix as CSV.
pub const MATRIX_CSV_FILE: &str = "results/matrix.csv";
/// The cell matrix as Parquet.
pub const MATRIX_PARQUET_FILE: &str = "results/matrix.parquet";
/// The per-request table as CSV.
pub const REQUESTS_CSV_FILE: &str = "results/requests.csv";
/// The per-request table as Parquet.
pub const REQUESTS_PARQUET_FILE: &str = "results/requests.parquet";
/// Effects, tests, claims: the report's numbers as JSON.
pub const EVIDENCE_FILE: &str = "results/evidence.json";
/// The report as Markdown.
pub const REPORT_MD_FILE: &str = "results/report.md";
/// The report as HTML.
pub const REPORT_HTML_FILE: &str = "results/report.html";
/// The report's figures.
pub const FIGURES_DIR: &str = "results/figures";

/// `<stem>.summary.json`, in `results/cells/`.
pub fn summary_file(stem: &str) -> String {
    format!("{stem}{SUMMARY_SUFFIX}")
}

/// `results/cells/<stem>.summary.json`, relative to the evidence root.
pub fn summary_path(stem: &str) -> String {
    format!("{RESULTS_DIR}/{CELLS_DIR}/{}", summary_file(stem))
}

/// `results/cells/b<block>-<arm>-<cell>.summary.json`, relative to the evidence root.
pub fn cell_summary_path(block: u32, arm: &str, cell: &str) -> String {
    summary_path(&format!("b{block}-{arm}-{cell}"))
}

// qualification/

/// The quality gates' folder, at the evidence root (or `harness qualify --out`'s).
pub const QUALIFICATION_DIR: &str = "qualification";
/// The qualification outcome, in `qualification/` (copied to `results/`).
pub const QUALIFICATION_FILE: &str = "qualification.json";
/// `qualification/qualification.json`, relative to the evidence root.
pub const QUALIFICATION_OUTCOME_PATH: &str = "qualification/qualification.json";
/// `qualification/unit.json`, relative to the evidence root.
pub const QUALIFICATION_UNIT_PATH: &str = "qualification/unit.json";
/// An arm's gate run, in `qualification/<arm>/`.
pub const ARM_FILE: &str = "arm.json";
/// The GSM set's description, in `qualification/inputs/`.
pub const GSM_SET_FILE: &str = "gsm.set.json";
/// The serial reference answers of the parity gate, in `qualification/<arm>/`.
pub const PARITY_REFERENCE_FILE: &str = "parity.reference.jsonl";

/// `<gate>.items.jsonl`, in `qualification/inputs/`.
pub fn items_file(gate: &str) -> String {
    format!("{gate}.items.jsonl")
}

/// `<gate>.responses.jsonl`, in `qualification/<arm>/`.
pub fn responses_file(gate: &str) -> String {
    format!("{gate}.responses.jsonl")
}

/// `<gate>.scores.json`, in `qualification/<arm>/`.
pub fn scores_file(gate: &str) -> String {
    format!("{gate}.scores.json")
}

// discarded/ (after --resume; not evidence, covered by the manifest)

/// Partial units moved aside by `--resume`, at the evidence root.
pub const DISCARDED_DIR: &str = "discarded";
/// Why a partial unit was moved aside, in `discarded/<n>-<unit>/`.
pub const DISCARD_FILE: &str = "discard.json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_built_from_the_names() {
        let under = |path: &str, dir: &str, name: &str| assert_eq!(path, format!("{dir}/{name}"));
        under(PROMPTS_PATH, INPUTS_DIR, PROMPTS_FILE);
        under(CATALOG_PATH, INPUTS_DIR, CATALOG_FILE);
        under(QUALIFICATION_OUTCOME_PATH, QUALIFICATION_DIR, QUALIFICATION_FILE);
        under(QUALIFICATION_UNIT_PATH, QUALIFICATION_DIR, super::super::UNIT_FILE);
        under(QUALIFICATION_RESULT_FILE, RESULTS_DIR, QUALIFICATION_FILE);
        for p in [
            SUMMARIES_FILE,
            MATRIX_CSV_FILE,
            MATRIX_PARQUET_FILE,
            REQUESTS_CSV_FILE,
            REQUESTS_PARQUET_FILE,
            EVIDENCE_FILE,
            REPORT_MD_FILE,
            REPORT_HTML_FILE,
            FIGURES_DIR,
        ] {
            assert!(p.strip_prefix(RESULTS_DIR).is_some_and(|r| r.starts_with('/') && !r[1..].contains('/')), "{p}");
        }
        assert_eq!(requests_path(0, "a", "c"), "raw/b0/a/c.requests.jsonl");
        assert_eq!(cell_summary_path(1, "a", "c"), "results/cells/b1-a-c.summary.json");
        assert_eq!(trace_path("c"), "inputs/traces/c.trace.jsonl");
        assert_eq!(arrivals_path("c", "csv"), "inputs/arrivals/c.csv");
    }

    /// Every evidence file name (matched as a whole path component), name ending
    /// (matched at a component's end) and folder name (matched as the first component
    /// of a path, or as the whole argument of `.join(...)`).
    fn forbidden() -> (Vec<&'static str>, Vec<&'static str>, Vec<&'static str>) {
        use super::super::*;
        let last = |p: &'static str| p.rsplit('/').next().unwrap();
        let files = vec![
            PLAN_FILE,
            MANIFEST_FILE,
            RUN_FILE,
            SEQUENTIAL_FILE,
            COMPARE_FILE,
            COMPARE_REPORT_FILE,
            PROMPTS_FILE,
            CATALOG_FILE,
            SERVER_LOG_FILE,
            STARTUP_FILE,
            WARMUP_FILE,
            RECEIPTS_FILE,
            SCRAPES_FILE,
            MEMORY_FILE,
            ARM_OUTCOME_FILE,
            UNIT_FILE,
            PARITY_FILE,
            last(SUMMARIES_FILE),
            last(MATRIX_CSV_FILE),
            last(MATRIX_PARQUET_FILE),
            last(REQUESTS_CSV_FILE),
            last(REQUESTS_PARQUET_FILE),
            last(EVIDENCE_FILE),
            last(REPORT_MD_FILE),
            last(REPORT_HTML_FILE),
            QUALIFICATION_FILE,
            ARM_FILE,
            STOP_FILE,
            GSM_SET_FILE,
            PARITY_REFERENCE_FILE,
            DISCARD_FILE,
            last(DERIVED_PATH),
            last(DISPATCH_FILE),
            last(SBATCH_FILE),
        ];
        let endings =
            vec![TRACE_SUFFIX, REQUESTS_SUFFIX, SUMMARY_SUFFIX, ".items.jsonl", ".responses.jsonl", ".scores.json"];
        let dirs = vec![
            INPUTS_DIR,
            RAW_DIR,
            RESULTS_DIR,
            QUALIFICATION_DIR,
            DISCARDED_DIR,
            PILOTS_DIR,
            SLURM_DIR,
            TRACES_DIR,
            ARRIVALS_DIR,
            CELLS_DIR,
        ];
        (files, endings, dirs)
    }

    /// Literals that spell an evidence name's shape for a file that is not evidence:
    /// (file under `src/`, the literal, why).
    const NOT_EVIDENCE: &[(&str, &str, &str)] = &[
        ("commands/bench_loadgen/mod.rs", "rate-{rate_rps}.requests.jsonl", "bench-loadgen's --records-dir"),
        ("commands/bench_loadgen/mod.rs", "rate-{rate_rps}-{}.requests.jsonl", "bench-loadgen's --records-dir"),
        ("commands/bench/mod.rs", "plan.toml", "the scratch plan file `harness run` is given, outside the evidence"),
    ];

    /// One string literal of a source file: its line, its text (escapes left as
    /// written) and whether it is the whole argument of `.join(...)`.
    struct Literal {
        line: usize,
        text: String,
        joined: bool,
    }

    /// The string literals of `src` outside comments and outside items under
    /// `#[cfg(test)]` (skipped to the end of the item: its `;` or its closing brace).
    fn product_literals(src: &str) -> Vec<Literal> {
        let c: Vec<char> = src.chars().collect();
        let mut out = Vec::new();
        // The last few significant tokens, to spot `.join(` and `#[cfg(test)]`.
        let mut recent: Vec<String> = Vec::new();
        let (mut i, mut line) = (0, 1);
        // While skipping a test item: the brace depth inside it.
        let mut skip: Option<i32> = None;
        let push = |recent: &mut Vec<String>, t: String| {
            recent.push(t);
            if recent.len() > 8 {
                recent.remove(0);
            }
        };
        while i < c.len() {
            let ch = c[i];
            let next = c.get(i + 1).copied();
            if ch == '\n' {
                line += 1;
                i += 1;
            } else if ch == '/' && next == Some('/') {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            } else if ch == '/' && next == Some('*') {
                i += 2;
                while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
                i += 2;
            } else if ch == '\'' {
                // A char literal ('x', '\n', '"') or a lifetime ('a).
                if next == Some('\\') {
                    i += 2;
                    while i < c.len() && c[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            } else if ch == '"' || ((ch == 'r' || ch == 'b') && matches!(next, Some('"') | Some('#') | Some('r'))) {
                // A string: "..", r".." / r#".."#, b"..", br"..".
                let start_line = line;
                let mut j = i;
                if c[j] == 'b' {
                    j += 1;
                }
                let raw = c.get(j) == Some(&'r');
                if raw {
                    j += 1;
                }
                let mut hashes = 0;
                while c.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if c.get(j) != Some(&'"') {
                    // An identifier starting with r or b.
                    push(&mut recent, ch.to_string());
                    i += 1;
                    continue;
                }
                j += 1;
                let mut text = String::new();
                while let Some(&d) = c.get(j) {
                    if !raw && d == '\\' {
                        text.push(d);
                        if let Some(&e) = c.get(j + 1) {
                            text.push(e);
                            line += usize::from(e == '\n');
                        }
                        j += 2;
                        continue;
                    }
                    if d == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    line += usize::from(d == '\n');
                    text.push(d);
                    j += 1;
                }
                let closes = c[j..].iter().find(|x| !x.is_whitespace()) == Some(&')');
                let joined = closes && recent.len() >= 2 && recent[recent.len() - 2..] == ["join", "("];
                if skip.is_none() {
                    out.push(Literal { line: start_line, text, joined });
                }
                push(&mut recent, "\"\"".into());
                i = j;
            } else if ch.is_alphanumeric() || ch == '_' {
                let mut j = i;
                while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
                    j += 1;
                }
                push(&mut recent, c[i..j].iter().collect());
                i = j;
            } else if ch.is_whitespace() {
                i += 1;
            } else {
                push(&mut recent, ch.to_string());
                match (ch, skip) {
                    ('{', Some(d)) => skip = Some(d + 1),
                    ('}', Some(d)) if d <= 1 => skip = None,
                    ('}', Some(d)) => skip = Some(d - 1),
                    (';', Some(0)) => skip = None,
                    (']', None)
                        if recent.len() >= 7
                            && recent[recent.len() - 7..] == ["#", "[", "cfg", "(", "test", ")", "]"] =>
                    {
                        skip = Some(0)
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        out
    }

    /// Why `lit` spells an evidence name, if it does. Only literals without
    /// whitespace are paths; prose that mentions a file (an error message, a check's
    /// title) is not one.
    fn offence(lit: &Literal) -> Option<String> {
        let (files, endings, dirs) = forbidden();
        let text = lit.text.as_str();
        if text.is_empty() || text.chars().any(char::is_whitespace) {
            return None;
        }
        let parts: Vec<&str> = text.split('/').collect();
        if let Some(f) = parts.iter().find(|p| files.contains(p)) {
            return Some(format!("the file name {f:?}"));
        }
        if let Some(e) = parts.iter().find_map(|p| endings.iter().find(|e| p.ends_with(**e))) {
            return Some(format!("the name ending {e:?}"));
        }
        if (parts.len() > 1 || lit.joined) && dirs.contains(&parts[0]) {
            return Some(format!("the folder name {:?}", parts[0]));
        }
        None
    }

    /// The rule (issue 55): no evidence file or folder name is written as a string
    /// literal outside `evidence/`. Every name is defined once, here or next to its
    /// record type, and product code elsewhere uses that name (`evidence::PLAN_FILE`,
    /// `Evidence::unit_dir`, `evidence::requests_path`, ...). Scans every `.rs` file
    /// under `harness/src` outside `evidence/` and `fixtures/` (test fixtures, never
    /// shipped), skipping test files (`tests.rs`, `*_tests.rs`), items under
    /// `#[cfg(test)]` and comments; a literal offends when, as a path without
    /// whitespace, one of its `/`-separated parts is an evidence file name or ends
    /// like one (`.requests.jsonl`, ...), or its first part is an evidence folder
    /// followed by more (`raw/b0`) or it is `.join("raw")`'s whole argument. Files
    /// that only share an evidence name's shape are listed in `NOT_EVIDENCE`.
    #[test]
    fn no_evidence_name_is_spelled_outside_evidence() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src.clone()];
        let mut found = Vec::new();
        let mut scanned = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
                if path.is_dir() {
                    if rel != "evidence" && rel != "fixtures" {
                        stack.push(path);
                    }
                    continue;
                }
                let name = path.file_name().unwrap().to_string_lossy();
                if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                    continue;
                }
                scanned += 1;
                for lit in product_literals(&std::fs::read_to_string(&path).unwrap()) {
                    if NOT_EVIDENCE.iter().any(|(f, l, _)| *f == rel && *l == lit.text) {
                        continue;
                    }
                    if let Some(why) = offence(&lit) {
                        found.push(format!("src/{rel}:{}: {:?} spells {why}", lit.line, lit.text));
                    }
                }
            }
        }
        assert!(scanned > 100, "scanned only {scanned} files under {}", src.display());
        found.sort();
        assert!(
            found.is_empty(),
            "evidence names written outside evidence/ (use the names evidence/ defines):\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_scan_sees_literals_and_skips_tests_and_comments() {
        let src = r##"
// "plan.toml" in a comment
fn a(dir: &Path) { dir.join("raw"); let _ = format!("{x}/server.log"); let c = '"'; let s = "prose: plan.toml"; }
/* "run.json" */
#[cfg(test)]
mod tests { fn b() { let _ = "plan.toml"; let _ = "}"; } }
fn after() -> &'static str { r#"results/matrix.csv"# }
"##;
        let lits = product_literals(src);
        let bad: Vec<_> = lits.iter().filter_map(|l| offence(l).map(|w| (l.line, w))).collect();
        assert_eq!(
            bad,
            [
                (3, "the folder name \"raw\"".to_string()),
                (3, "the file name \"server.log\"".to_string()),
                (7, "the file name \"matrix.csv\"".to_string())
            ]
        );
    }
}
