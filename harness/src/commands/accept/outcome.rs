//! The result of an acceptance run: one `CaseResult` per case (verdict, first
//! failure reason, timings, counts, findings, the offending payload), the server it
//! ran against, the settings and the SHA-256 of every payload sent; rendered as
//! JSON (`--json`) and as a Markdown table. Owns the record layout. Must not run
//! cases or decide verdicts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// A case's verdict. `Skipped` is only for what the server does not expose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    #[serde(rename = "pass")]
    Pass,
    #[serde(rename = "fail")]
    Fail,
    #[serde(rename = "skipped (not exposed)")]
    Skipped,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skipped => "skipped (not exposed)",
        }
    }
}

/// Most failure messages kept per case (the first is the reason).
const MAX_FAILURES: usize = 20;

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub title: String,
    pub verdict: Verdict,
    /// The first failure (or why it was skipped).
    pub reason: Option<String>,
    /// Every failure, first first (at most 20).
    pub failures: Vec<String>,
    pub timings_s: BTreeMap<String, f64>,
    pub counts: BTreeMap<String, u64>,
    /// What the case observed besides pass or fail.
    pub findings: Vec<String>,
    /// The offending payload and answer, on failure; anything else worth keeping.
    pub evidence: BTreeMap<String, Value>,
}

impl CaseResult {
    pub fn new(name: &str, title: &str) -> CaseResult {
        CaseResult {
            name: name.into(),
            title: title.into(),
            verdict: Verdict::Pass,
            reason: None,
            failures: Vec::new(),
            timings_s: BTreeMap::new(),
            counts: BTreeMap::new(),
            findings: Vec::new(),
            evidence: BTreeMap::new(),
        }
    }

    pub fn time(&mut self, key: &str, d: Duration) {
        self.timings_s.insert(key.into(), (d.as_secs_f64() * 1e6).round() / 1e6);
    }

    pub fn secs(&mut self, key: &str, s: f64) {
        self.timings_s.insert(key.into(), (s * 1e6).round() / 1e6);
    }

    pub fn count(&mut self, key: &str, n: u64) {
        self.counts.insert(key.into(), n);
    }

    pub fn finding(&mut self, f: impl Into<String>) {
        self.findings.push(f.into());
    }

    pub fn evidence(&mut self, key: &str, v: Value) {
        self.evidence.entry(key.into()).or_insert(v);
    }

    /// Records a failure; the first one becomes the reason.
    pub fn fail(&mut self, why: impl Into<String>) {
        let why = why.into();
        self.verdict = Verdict::Fail;
        if self.reason.is_none() {
            self.reason = Some(why.clone());
        }
        if self.failures.len() < MAX_FAILURES {
            self.failures.push(why);
        }
    }

    /// A failure with the request body and the answer that showed it.
    pub fn fail_with(&mut self, why: impl Into<String>, body: &[u8], answer: &str) {
        if self.verdict != Verdict::Fail {
            self.evidence("offending_request", Value::String(super::http::clip(&String::from_utf8_lossy(body), 4000)));
            self.evidence("offending_answer", Value::String(super::http::clip(answer, 4000)));
        }
        self.fail(why);
    }

    pub fn skip(&mut self, why: impl Into<String>) {
        self.verdict = Verdict::Skipped;
        self.reason = Some(why.into());
    }
}

/// The server a run went against.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    pub url: String,
    pub kind: String,
    /// Why that kind: the flag, or the detection evidence.
    pub kind_source: String,
    pub model: String,
    pub max_context: Option<u64>,
    /// `--plan` runs: the arm and its server log.
    pub arm: Option<String>,
    pub server_log: Option<String>,
    pub startup_s: Option<f64>,
    /// `--plan` runs: how the server stopped (`exited_on_sigterm`, ...).
    pub stop: Option<String>,
}

/// One payload as sent (the same bytes go to every server of a comparison).
#[derive(Debug, Clone, Serialize)]
pub struct PayloadRecord {
    pub name: String,
    pub bytes: usize,
    pub sha256: String,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct AcceptOutcome {
    pub server: ServerInfo,
    pub settings: Value,
    pub cases: Vec<CaseResult>,
    pub payloads: Vec<PayloadRecord>,
    /// SHA-256 over the payload digests in order: equal across two runs iff every
    /// payload was byte-identical.
    pub payload_set_sha256: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub wall_s: f64,
}

impl AcceptOutcome {
    /// Whether any case failed (the command exits non-zero).
    pub fn failed(&self) -> bool {
        self.failed > 0
    }

    pub fn case(&self, name: &str) -> Option<&CaseResult> {
        self.cases.iter().find(|c| c.name == name)
    }

    pub fn tally(&mut self) {
        let n = |v: Verdict| self.cases.iter().filter(|c| c.verdict == v).count();
        (self.passed, self.failed, self.skipped) = (n(Verdict::Pass), n(Verdict::Fail), n(Verdict::Skipped));
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"cannot serialize: {e}\"}}"))
    }

    /// The Markdown report: a header and one table row per case.
    pub fn markdown(&self) -> String {
        let s = &self.server;
        let mut out = format!(
            "## Acceptance: {} ({}, model {:?})\n\nServer kind {} ({}); max context {}; payload set sha256 {}.\n\n",
            s.url,
            s.arm.as_deref().map_or("--url".to_string(), |a| format!("arm {a}")),
            s.model,
            s.kind,
            s.kind_source,
            s.max_context.map_or("not published".into(), |n| n.to_string()),
            &self.payload_set_sha256[..self.payload_set_sha256.len().min(16)],
        );
        out.push_str("| case | verdict | timings (s) | counts | notes |\n| --- | --- | --- | --- | --- |\n");
        for c in &self.cases {
            let timings: Vec<String> = c.timings_s.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
            let counts: Vec<String> = c.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let mut notes: Vec<String> = c.reason.iter().cloned().collect();
            notes.extend(c.findings.iter().cloned());
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                cell(&c.name),
                c.verdict.as_str(),
                cell(&timings.join(", ")),
                cell(&counts.join(", ")),
                cell(&notes.join("; "))
            ));
        }
        out.push_str(&format!(
            "\n{} passed, {} failed, {} skipped (not exposed); {:.2} s in all. Verdict: {}.\n",
            self.passed,
            self.failed,
            self.skipped,
            self.wall_s,
            if self.failed() { "FAIL" } else { "PASS" }
        ));
        out
    }
}

/// A Markdown table cell: no pipes or newlines, at most 400 characters.
fn cell(s: &str) -> String {
    let flat = s.replace('|', "\\|").replace(['\n', '\r'], " ");
    super::http::clip(&flat, 400)
}
