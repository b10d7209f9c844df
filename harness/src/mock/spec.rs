//! The mock's spec: what `harness mock --spec FILE` (TOML) and its flags say about
//! token times, output lengths, reasoning, the queue and injected errors, checked
//! field by field (every error names the key path). Owns the spec's format, its
//! defaults and its validation. Must not draw a number (`dist` does) or serve.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::MockError;

/// A distribution of a time in milliseconds (or of a count, for output lengths).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
pub enum DistSpec {
    /// Always `value`.
    Fixed { value: f64 },
    /// Normal with `mean` and `sd`; a draw below zero is clamped to zero.
    Normal { mean: f64, sd: f64 },
    /// Log-normal with the given `median` (e^mu) and `sigma` (the sd of the log).
    Lognormal { median: f64, sigma: f64 },
    /// Drawn uniformly from the values of `file` (one number a line, `#` comments).
    Empirical { file: PathBuf },
}

/// A time: a distribution plus linear terms in the prompt length and in the
/// number of requests in service when the time is drawn. (No `deny_unknown_fields`
/// here: serde refuses it beside `flatten`; the distribution denies unknown keys.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeSpec {
    #[serde(flatten)]
    pub dist: DistSpec,
    /// Milliseconds added per prompt token.
    #[serde(default)]
    pub per_prompt_token_ms: f64,
    /// Milliseconds added per request in service (itself included).
    #[serde(default)]
    pub per_in_flight_ms: f64,
}

impl TimeSpec {
    pub fn fixed(ms: f64) -> TimeSpec {
        TimeSpec { dist: DistSpec::Fixed { value: ms }, per_prompt_token_ms: 0.0, per_in_flight_ms: 0.0 }
    }
}

/// `[queue]`: at most `max_in_service` requests are served at once; the rest wait
/// in arrival order (FIFO). Absent: no limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    pub max_in_service: u64,
}

/// `[reasoning]`: the first `tokens` output tokens of a chat answer stream as
/// reasoning deltas (`delta.<field>`), as vLLM's reasoning parsers stream them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningSpec {
    pub tokens: u32,
    /// The delta field: `reasoning_content` (default) or `reasoning`.
    #[serde(default = "reasoning_field")]
    pub field: String,
    /// Also on `/v1/completions` (as text: vLLM's completions route has no
    /// reasoning field, so this only shifts where the content starts). Default false.
    #[serde(default)]
    pub on_completions: bool,
}

fn reasoning_field() -> String {
    "reasoning_content".into()
}

/// `[errors]`: per-request probabilities of an injected failure (drawn from the
/// seed and the request's number, so a rerun injects the same ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSpec {
    /// Answer 500 at once.
    #[serde(default)]
    pub http_500: f64,
    /// Close the connection after `after_tokens` token events (no `[DONE]`).
    #[serde(default)]
    pub reset: f64,
    /// Pause `stall_ms` after `after_tokens` token events, then go on.
    #[serde(default)]
    pub stall: f64,
    #[serde(default = "stall_ms")]
    pub stall_ms: f64,
    #[serde(default = "after_tokens")]
    pub after_tokens: u32,
}

impl Default for ErrorSpec {
    fn default() -> ErrorSpec {
        ErrorSpec { http_500: 0.0, reset: 0.0, stall: 0.0, stall_ms: stall_ms(), after_tokens: after_tokens() }
    }
}

fn stall_ms() -> f64 {
    1000.0
}

fn after_tokens() -> u32 {
    1
}

/// The whole spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockSpec {
    /// Seed of every draw.
    #[serde(default)]
    pub seed: u64,
    /// The model id served (`/v1/models`, the `model` of every answer).
    #[serde(default = "model")]
    pub model: String,
    /// Time from the start of service to the first token.
    #[serde(default = "default_ttft")]
    pub ttft: TimeSpec,
    /// Time between consecutive tokens.
    #[serde(default = "default_itl")]
    pub itl: TimeSpec,
    /// Output length when the request does not force it (`ignore_eos` false):
    /// drawn, rounded, at least 1 and at most `max_tokens`. Absent: `max_tokens`.
    #[serde(default)]
    pub output_tokens: Option<DistSpec>,
    /// `max_tokens` of a request that names none.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u32,
    #[serde(default)]
    pub queue: Option<QueueSpec>,
    #[serde(default)]
    pub reasoning: Option<ReasoningSpec>,
    #[serde(default)]
    pub errors: ErrorSpec,
}

fn model() -> String {
    "mock".into()
}
fn default_ttft() -> TimeSpec {
    TimeSpec::fixed(10.0)
}
fn default_itl() -> TimeSpec {
    TimeSpec::fixed(5.0)
}
fn default_max_tokens() -> u32 {
    16
}

impl Default for MockSpec {
    fn default() -> MockSpec {
        MockSpec {
            seed: 0,
            model: model(),
            ttft: default_ttft(),
            itl: default_itl(),
            output_tokens: None,
            default_max_tokens: default_max_tokens(),
            queue: None,
            reasoning: None,
            errors: ErrorSpec::default(),
        }
    }
}

fn invalid(field: &str, problem: impl Into<String>) -> MockError {
    MockError::Spec { field: field.to_string(), problem: problem.into() }
}

fn non_negative(field: &str, v: f64) -> Result<(), MockError> {
    if v.is_finite() && v >= 0.0 { Ok(()) } else { Err(invalid(field, format!("must be finite and >= 0, got {v}"))) }
}

fn probability(field: &str, v: f64) -> Result<(), MockError> {
    if (0.0..=1.0).contains(&v) { Ok(()) } else { Err(invalid(field, format!("must be within [0, 1], got {v}"))) }
}

/// Reads an empirical file's values (milliseconds), each finite and >= 0.
pub fn read_empirical(field: &str, path: &Path) -> Result<Vec<f64>, MockError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(field, format!("cannot read {}: {e}", path.display())))?;
    let mut values = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let v: f64 = line
            .parse()
            .map_err(|_| invalid(field, format!("{} line {}: {line:?} is not a number", path.display(), i + 1)))?;
        non_negative(&format!("{field} ({} line {})", path.display(), i + 1), v)?;
        values.push(v);
    }
    if values.is_empty() {
        return Err(invalid(field, format!("{} holds no value", path.display())));
    }
    Ok(values)
}

impl DistSpec {
    /// Checks the parameters (`field` is the key path, e.g. `ttft`).
    pub fn validate(&self, field: &str) -> Result<(), MockError> {
        match self {
            DistSpec::Fixed { value } => non_negative(&format!("{field}.value"), *value),
            DistSpec::Normal { mean, sd } => {
                non_negative(&format!("{field}.mean"), *mean)?;
                non_negative(&format!("{field}.sd"), *sd)
            }
            DistSpec::Lognormal { median, sigma } => {
                non_negative(&format!("{field}.sigma"), *sigma)?;
                if median.is_finite() && *median > 0.0 {
                    Ok(())
                } else {
                    Err(invalid(&format!("{field}.median"), format!("must be finite and > 0, got {median}")))
                }
            }
            DistSpec::Empirical { file } => read_empirical(&format!("{field}.file"), file).map(|_| ()),
        }
    }
}

impl TimeSpec {
    fn validate(&self, field: &str) -> Result<(), MockError> {
        self.dist.validate(field)?;
        non_negative(&format!("{field}.per_prompt_token_ms"), self.per_prompt_token_ms)?;
        non_negative(&format!("{field}.per_in_flight_ms"), self.per_in_flight_ms)
    }
}

impl MockSpec {
    /// Reads and validates a spec file.
    pub fn from_file(path: &Path) -> Result<MockSpec, MockError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| MockError::SpecFile { path: path.to_path_buf(), problem: e.to_string() })?;
        let mut spec: MockSpec = toml::from_str(&text)
            .map_err(|e| MockError::SpecFile { path: path.to_path_buf(), problem: e.to_string() })?;
        // Empirical files are relative to the spec's folder.
        let base = path.parent().unwrap_or(Path::new("."));
        for d in
            [Some(&mut spec.ttft.dist), Some(&mut spec.itl.dist), spec.output_tokens.as_mut()].into_iter().flatten()
        {
            if let DistSpec::Empirical { file } = d
                && file.is_relative()
            {
                *file = base.join(&*file);
            }
        }
        spec.validate()?;
        Ok(spec)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), MockError> {
        self.ttft.validate("ttft")?;
        self.itl.validate("itl")?;
        if let Some(o) = &self.output_tokens {
            o.validate("output_tokens")?;
        }
        if self.default_max_tokens == 0 {
            return Err(invalid("default_max_tokens", "must be at least 1"));
        }
        if let Some(q) = &self.queue
            && q.max_in_service == 0
        {
            return Err(invalid("queue.max_in_service", "must be at least 1 (omit [queue] for no limit)"));
        }
        if let Some(r) = &self.reasoning
            && !matches!(r.field.as_str(), "reasoning_content" | "reasoning")
        {
            return Err(invalid(
                "reasoning.field",
                format!("must be reasoning_content or reasoning, got {:?}", r.field),
            ));
        }
        let e = &self.errors;
        probability("errors.http_500", e.http_500)?;
        probability("errors.reset", e.reset)?;
        probability("errors.stall", e.stall)?;
        let total = e.http_500 + e.reset + e.stall;
        if total > 1.0 {
            return Err(invalid("errors", format!("http_500 + reset + stall must be at most 1, got {total}")));
        }
        non_negative("errors.stall_ms", e.stall_ms)?;
        if self.model.is_empty() {
            return Err(invalid("model", "must not be empty"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MockSpec, MockError> {
        let spec: MockSpec = toml::from_str(text)
            .map_err(|e| MockError::SpecFile { path: "spec.toml".into(), problem: e.to_string() })?;
        spec.validate()?;
        Ok(spec)
    }

    fn field_of(text: &str) -> String {
        match parse(text).unwrap_err() {
            MockError::Spec { field, .. } => field,
            other => panic!("not a field error: {other}"),
        }
    }

    #[test]
    fn a_full_spec_reads_and_defaults_fill_the_rest() {
        let s = parse(
            r#"seed = 7
            [ttft]
            dist = "lognormal"
            median = 20.0
            sigma = 0.3
            per_prompt_token_ms = 0.01
            [itl]
            dist = "normal"
            mean = 5.0
            sd = 1.0
            per_in_flight_ms = 0.2
            [queue]
            max_in_service = 4
            [reasoning]
            tokens = 3
            [errors]
            http_500 = 0.1
            reset = 0.05"#,
        )
        .unwrap();
        assert_eq!(s.ttft.dist, DistSpec::Lognormal { median: 20.0, sigma: 0.3 });
        assert_eq!(s.queue, Some(QueueSpec { max_in_service: 4 }));
        assert_eq!(s.reasoning.as_ref().unwrap().field, "reasoning_content");
        assert_eq!((s.errors.stall_ms, s.errors.after_tokens, s.model.as_str()), (1000.0, 1, "mock"));
        assert_eq!(parse("").unwrap(), MockSpec::default());
    }

    #[test]
    fn bad_values_name_their_field() {
        assert_eq!(field_of("[ttft]\ndist = \"fixed\"\nvalue = -1.0"), "ttft.value");
        assert_eq!(field_of("[itl]\ndist = \"fixed\"\nvalue = nan"), "itl.value");
        assert_eq!(field_of("[itl]\ndist = \"normal\"\nmean = 1.0\nsd = -2.0"), "itl.sd");
        assert_eq!(field_of("[ttft]\ndist = \"lognormal\"\nmedian = 0.0\nsigma = 1.0"), "ttft.median");
        assert_eq!(field_of("[ttft]\ndist = \"lognormal\"\nmedian = 1.0\nsigma = inf"), "ttft.sigma");
        assert_eq!(field_of("[queue]\nmax_in_service = 0"), "queue.max_in_service");
        assert_eq!(field_of("[errors]\nhttp_500 = 1.5"), "errors.http_500");
        assert_eq!(field_of("[errors]\nhttp_500 = 0.6\nreset = 0.6"), "errors");
        assert_eq!(field_of("[ttft]\ndist = \"fixed\"\nvalue = 1.0\nper_in_flight_ms = -1.0"), "ttft.per_in_flight_ms");
        assert_eq!(field_of("[ttft]\ndist = \"empirical\"\nfile = \"/nonexistent/x.txt\""), "ttft.file");
        assert!(matches!(parse("[ttft]\ndist = \"gamma\"\nvalue = 1.0"), Err(MockError::SpecFile { .. })));
        assert!(matches!(parse("bogus = 1"), Err(MockError::SpecFile { .. })));
        assert!(matches!(parse("[itl]\ndist = \"fixed\"\nvalue = 1.0\nbogus = 2"), Err(MockError::SpecFile { .. })));
    }

    #[test]
    fn the_documented_example_spec_reads() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mock-example.toml");
        let s = MockSpec::from_file(&path).unwrap();
        assert_eq!((s.queue.map(|q| q.max_in_service), s.reasoning.map(|r| r.tokens)), (Some(8), Some(8)));
    }

    #[test]
    fn empirical_files_are_read_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let good = tmp.path().join("good.txt");
        std::fs::write(&good, "# ms\n1.5\n2\n\n3 # last\n").unwrap();
        assert_eq!(read_empirical("ttft.file", &good).unwrap(), [1.5, 2.0, 3.0]);
        let bad = tmp.path().join("bad.txt");
        std::fs::write(&bad, "1\n-2\n").unwrap();
        let e = read_empirical("ttft.file", &bad).unwrap_err().to_string();
        assert!(e.contains("ttft.file") && e.contains("line 2"), "{e}");
        std::fs::write(&bad, "# nothing\n").unwrap();
        assert!(read_empirical("ttft.file", &bad).unwrap_err().to_string().contains("no value"));
        let spec = tmp.path().join("spec.toml");
        std::fs::write(&spec, "[itl]\ndist = \"empirical\"\nfile = \"good.txt\"\n").unwrap();
        let s = MockSpec::from_file(&spec).unwrap();
        assert_eq!(s.itl.dist, DistSpec::Empirical { file: tmp.path().join("good.txt") });
    }
}
