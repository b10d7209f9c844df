//! One side of a gate (baseline or candidate) as the rules see it: the matrix rows
//! (one per scheduled block, arm and cell, with every numeric column), the study's
//! identity and a trimmed qualification. Read from an evidence directory opened
//! through `evidence::Sealed` (refused, exit 2, unless finished and unchanged since
//! sealed) (`results/matrix.csv`, `results/evidence.json` or `manifest.json`, and the
//! qualification from `evidence.json`, `results/qualification.json` or
//! `qualification/qualification.json`) or from a baseline file. Owns the baseline
//! file format `harness-gate-baseline/1` ([`Side`] serialized), its export and its
//! reading. Must not evaluate rules, and never writes inside an evidence directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::GateError;
use crate::evidence::{RowStatus, Sealed, UnitState};
use crate::metrics::FIELDS;

/// Version of the baseline file.
pub const BASELINE_FORMAT: &str = "harness-gate-baseline/1";

/// One row of `results/matrix.csv`: a scheduled (block, arm, cell).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRow {
    pub block: u32,
    pub arm: String,
    pub role: String,
    pub cell: String,
    /// `confirmation` or `descriptive`.
    pub kind: String,
    /// The load in words (`closed-loop concurrency 4`): both sides must agree.
    pub load: String,
    /// The server invocation's status (`completed`, ... or `missing`).
    pub unit_status: UnitState,
    /// `measured`, `not_run` or `no_summary`.
    pub status: RowStatus,
    /// Every numeric column with a value (`FIELDS` and `failed_<class>`); a measure
    /// with no sample is absent.
    pub values: BTreeMap<String, f64>,
}

impl MatrixRow {
    pub fn measured(&self) -> bool {
        self.status == RowStatus::Measured
    }

    /// Failed requests of a measured row.
    pub fn failed(&self) -> u64 {
        self.values.get("failed").copied().unwrap_or(0.0) as u64
    }
}

/// One arm's qualification verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualArm {
    pub arm: String,
    pub role: String,
    pub qualified: bool,
    #[serde(default)]
    pub reasons: Vec<String>,
}

/// One arm's serial parity result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualParity {
    pub arm: String,
    pub pass: bool,
    pub mismatches: usize,
    #[serde(default)]
    pub rule: String,
}

/// One paired quality comparison (`nll`, `gsm`, `retrieval`) with its upper bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualComparison {
    pub gate: String,
    pub candidate: String,
    pub control: String,
    pub pass: bool,
    /// NLL: upper bound of the mean paired difference; GSM, retrieval: loss-rate
    /// upper bound. Absent when the comparison could not be made.
    pub upper: Option<f64>,
    pub limit: Option<f64>,
    #[serde(default)]
    pub detail: String,
}

/// The part of `qualification.json` the gate reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Qualification {
    /// Where it was read, relative to the evidence directory (or the file given).
    pub source: String,
    pub arms: Vec<QualArm>,
    pub parity: Vec<QualParity>,
    pub comparisons: Vec<QualComparison>,
}

impl Qualification {
    pub fn role_of(&self, arm: &str) -> Option<&str> {
        self.arms.iter().find(|a| a.arm == arm).map(|a| a.role.as_str())
    }
}

/// One side; serialized, the baseline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub format: String,
    pub study: Option<String>,
    pub plan_sha256: Option<String>,
    pub git: Option<Value>,
    /// The evidence directory the numbers come from (as given when exported).
    pub evidence: String,
    /// `None`: the side has no `results/matrix.csv` (e.g. a `harness qualify` directory).
    pub matrix: Option<Vec<MatrixRow>>,
    pub qualification: Option<Qualification>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GateError + '_ {
    move |error| GateError::Io { path: path.to_path_buf(), error }
}

/// `results/matrix.csv`, relative to the evidence directory.
const MATRIX: &str = crate::evidence::MATRIX_CSV_FILE;

/// Where a study's own qualification may be, after `results/evidence.json`'s.
const QUALIFICATION_FILES: [&str; 2] =
    [crate::evidence::QUALIFICATION_RESULT_FILE, crate::evidence::QUALIFICATION_OUTCOME_PATH];

/// The listed JSON file `rel` of `ev` (`None`: not in the manifest).
fn sealed_json(ev: &Sealed, rel: &str) -> Result<Option<Value>, GateError> {
    let Some(bytes) = ev.read_opt(rel)? else { return Ok(None) };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| GateError::Json { path: ev.root().join(rel), message: e.to_string() })
}

/// A user's JSON file (a baseline or qualification file); `None` when absent.
fn read_json(path: &Path) -> Result<Option<Value>, GateError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = crate::evidence::read_input(path).map_err(io(path))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| GateError::Json { path: path.to_path_buf(), message: e.to_string() })
}

impl Side {
    /// A side from an evidence directory or a baseline file. `qualification`
    /// overrides where the qualification is read (a `qualification.json` file or a
    /// directory holding one, `qualification/` or `results/`).
    pub fn open(path: &Path, qualification: Option<&Path>) -> Result<Side, GateError> {
        let mut side = if path.is_file() {
            Side::from_file(path)?
        } else if path.is_dir() {
            Side::from_dir(path)?
        } else {
            return Err(GateError::NotEvidence { path: path.to_path_buf(), message: "does not exist".into() });
        };
        if let Some(q) = qualification {
            side.qualification = Some(read_qualification_override(q)?);
        }
        Ok(side)
    }

    /// A baseline file (`harness-gate-baseline/1`).
    pub fn from_file(path: &Path) -> Result<Side, GateError> {
        let value = read_json(path)?.expect("checked is_file");
        let format = value.get("format").and_then(Value::as_str).unwrap_or("");
        if format != BASELINE_FORMAT {
            return Err(GateError::NotEvidence {
                path: path.to_path_buf(),
                message: format!("a file given as a side must be a {BASELINE_FORMAT} file, found format {format:?}"),
            });
        }
        serde_json::from_value(value).map_err(|e| GateError::Json { path: path.to_path_buf(), message: e.to_string() })
    }

    /// An evidence directory (see the module doc for what is read), opened through
    /// [`Sealed`]: a directory that is unfinished or differs from its manifest is
    /// refused before anything is read.
    pub fn from_dir(dir: &Path) -> Result<Side, GateError> {
        Side::from_sealed(&Sealed::open(dir)?)
    }

    /// The side of an opened evidence directory.
    pub fn from_sealed(ev: &Sealed) -> Result<Side, GateError> {
        let dir = ev.root();
        let matrix = match ev.read_opt(MATRIX)? {
            Some(bytes) => Some(parse_matrix(&dir.join(MATRIX), &bytes)?),
            None => None,
        };
        let evidence = sealed_json(ev, crate::evidence::EVIDENCE_FILE)?;
        let manifest = serde_json::to_value(ev.manifest()).ok();
        let meta = evidence.as_ref().or(manifest.as_ref());
        let text = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str).map(str::to_string);
        let mut qualification = None;
        if let Some(q) = evidence.as_ref().and_then(|e| e.get("qualification")).filter(|q| !q.is_null()) {
            qualification = Some(trim_qualification(
                q,
                &format!("{}#qualification", crate::evidence::EVIDENCE_FILE),
                &dir.join(crate::evidence::RESULTS_DIR),
            )?);
        }
        for rel in QUALIFICATION_FILES {
            if qualification.is_none()
                && let Some(q) = sealed_json(ev, rel)?
            {
                qualification = Some(trim_qualification(&q, rel, &dir.join(rel))?);
            }
        }
        if matrix.is_none() && qualification.is_none() {
            return Err(GateError::NotEvidence {
                path: dir.to_path_buf(),
                message: "no results/matrix.csv and no qualification.json: run `harness report` (or `harness run`, \
                          `harness qualify`) first"
                    .into(),
            });
        }
        Ok(Side {
            format: BASELINE_FORMAT.into(),
            study: text("study"),
            plan_sha256: text("plan_sha256"),
            git: meta.and_then(|m| m.get("git")).filter(|g| !g.is_null()).cloned(),
            evidence: dir.display().to_string(),
            matrix,
            qualification,
        })
    }

    /// Cells of the matrix, in first-seen order.
    pub fn cells(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self.matrix.iter().flatten() {
            if !out.contains(&r.cell.as_str()) {
                out.push(&r.cell);
            }
        }
        out
    }
}

/// `--qualification`: a `qualification.json` file, or an evidence directory (a
/// `harness qualify --out` directory, opened through [`Sealed`]) holding one
/// directly, in `qualification/` or in `results/`.
fn read_qualification_override(path: &Path) -> Result<Qualification, GateError> {
    if path.is_dir() {
        let ev = Sealed::open(path)?;
        for rel in std::iter::once(crate::evidence::QUALIFICATION_FILE).chain(QUALIFICATION_FILES.iter().rev().copied())
        {
            if let Some(value) = sealed_json(&ev, rel)? {
                let file = path.join(rel);
                return trim_qualification(&value, &file.display().to_string(), &file);
            }
        }
        return Err(GateError::NotEvidence {
            path: path.to_path_buf(),
            message: "no qualification.json here, in qualification/ or in results/".into(),
        });
    }
    let value = read_json(path)?
        .ok_or_else(|| GateError::NotEvidence { path: path.to_path_buf(), message: "does not exist".into() })?;
    trim_qualification(&value, &path.display().to_string(), path)
}

#[derive(Deserialize)]
struct RawParity {
    arm: String,
    pass: bool,
    #[serde(default)]
    mismatches: Vec<Value>,
    #[serde(default)]
    rule: String,
}

#[derive(Deserialize)]
struct RawBound {
    #[serde(alias = "loss_upper")]
    upper: f64,
    limit: f64,
}

#[derive(Deserialize)]
struct RawComparison {
    gate: String,
    candidate: String,
    control: String,
    pass: bool,
    loss: Option<RawBound>,
    nll: Option<RawBound>,
    #[serde(default)]
    detail: String,
}

#[derive(Deserialize)]
struct RawQualification {
    arms: Vec<QualArm>,
    #[serde(default)]
    parity: Vec<RawParity>,
    #[serde(default)]
    comparisons: Vec<RawComparison>,
}

/// The gate's view of a `QualifyOutcome` (`harness-qualification/v1`).
fn trim_qualification(value: &Value, source: &str, path: &Path) -> Result<Qualification, GateError> {
    let raw: RawQualification = serde_json::from_value(value.clone())
        .map_err(|e| GateError::Json { path: path.to_path_buf(), message: format!("qualification: {e}") })?;
    Ok(Qualification {
        source: source.to_string(),
        arms: raw.arms,
        parity: raw
            .parity
            .into_iter()
            .map(|p| QualParity { arm: p.arm, pass: p.pass, mismatches: p.mismatches.len(), rule: p.rule })
            .collect(),
        comparisons: raw
            .comparisons
            .into_iter()
            .map(|c| {
                let bound = c.nll.or(c.loss);
                QualComparison {
                    gate: c.gate,
                    candidate: c.candidate,
                    control: c.control,
                    pass: c.pass,
                    upper: bound.as_ref().map(|b| b.upper),
                    limit: bound.as_ref().map(|b| b.limit),
                    detail: c.detail,
                }
            })
            .collect(),
    })
}

const KEY_COLUMNS: [&str; 8] = ["block", "arm", "role", "cell", "kind", "load", "unit_status", "status"];

/// Reads a `matrix.csv` file by column name; every key column must be there.
pub fn read_matrix(path: &Path) -> Result<Vec<MatrixRow>, GateError> {
    let bytes = crate::evidence::read_input(path).map_err(io(path))?;
    parse_matrix(path, &bytes)
}

/// Parses the bytes of `matrix.csv` (`path` names it in errors).
fn parse_matrix(path: &Path, bytes: &[u8]) -> Result<Vec<MatrixRow>, GateError> {
    let err = |message: String| GateError::Matrix { path: path.to_path_buf(), message };
    let text = std::str::from_utf8(bytes).map_err(|e| err(format!("not UTF-8 text: {e}")))?;
    let text = text.strip_prefix(crate::evidence::BOM).unwrap_or(text);
    let records = super::csv::parse(text).map_err(err)?;
    let Some((header, body)) = records.split_first() else {
        return Err(err("empty file (no header)".into()));
    };
    let col = |name: &str| header.iter().position(|h| h == name);
    let mut keys = [0usize; KEY_COLUMNS.len()];
    for (slot, name) in keys.iter_mut().zip(KEY_COLUMNS) {
        *slot = col(name).ok_or_else(|| err(format!("no column {name:?}")))?;
    }
    let numeric: Vec<(usize, &str)> = header
        .iter()
        .enumerate()
        .filter(|(_, h)| FIELDS.iter().any(|(n, _)| n == h) || h.starts_with("failed_"))
        .map(|(i, h)| (i, h.as_str()))
        .collect();
    let mut rows = Vec::with_capacity(body.len());
    for (i, rec) in body.iter().enumerate() {
        let line = i + 2;
        if rec.len() != header.len() {
            return Err(err(format!("row {line}: {} fields, the header has {}", rec.len(), header.len())));
        }
        let block = rec[keys[0]]
            .parse::<u32>()
            .map_err(|_| err(format!("row {line}: block {:?} is not a block number", rec[keys[0]])))?;
        let mut values = BTreeMap::new();
        for &(c, name) in &numeric {
            let v = &rec[c];
            if v.is_empty() || v == "NaN" {
                continue;
            }
            let x: f64 = v.parse().map_err(|_| err(format!("row {line}: {name} {v:?} is not a number")))?;
            values.insert(name.to_string(), x);
        }
        let s = |k: usize| rec[keys[k]].clone();
        let unit_status = UnitState::parse(&rec[keys[6]])
            .ok_or_else(|| err(format!("row {line}: unit_status {:?} is not a unit status", rec[keys[6]])))?;
        let status = RowStatus::parse(&rec[keys[7]]).ok_or_else(|| {
            err(format!("row {line}: status {:?} is not one of measured, not_run, no_summary", rec[keys[7]]))
        })?;
        rows.push(MatrixRow {
            block,
            arm: s(1),
            role: s(2),
            cell: s(3),
            kind: s(4),
            load: s(5),
            unit_status,
            status,
            values,
        });
    }
    Ok(rows)
}

/// `harness gate --export-baseline DIR --out FILE`: the side read from `dir`
/// (with its qualification, or the one at `qualification`), written as a baseline file.
pub fn export(dir: &Path, qualification: Option<&Path>, out: &Path) -> Result<Side, GateError> {
    let mut side = Side::from_dir(dir)?;
    if let Some(q) = qualification {
        side.qualification = Some(read_qualification_override(q)?);
    }
    crate::evidence::write_json(out, &side)?;
    Ok(side)
}

/// Where the JSON verdict goes without `--json`: `<candidate>.gate.json` beside
/// the candidate directory (never inside it: its files are covered by its manifest).
pub fn default_json_out(candidate: &Path) -> Result<PathBuf, GateError> {
    let abs = std::fs::canonicalize(candidate).map_err(io(candidate))?;
    let name = abs.file_name().ok_or_else(|| GateError::Args(format!("{}: give --json", candidate.display())))?;
    let mut file = name.to_os_string();
    file.push(".gate.json");
    Ok(abs.with_file_name(file))
}
