//! The statuses the evidence files spell, typed once for every writer and reader:
//! a server invocation's status ([`UnitStatus`]: `arm_outcome.json` `status`,
//! compare's `unit.json`), a scheduled unit as a reader finds it ([`UnitState`]:
//! `results/matrix.csv` `unit_status`), a cell of a server invocation
//! ([`CellStatus`]: `arm_outcome.json` `cells[].status`), a matrix row
//! ([`RowStatus`]: `results/matrix.csv` `status`), a request's row
//! ([`RequestStatus`]: `results/requests.csv` `status`) and a completion record's
//! ([`RecordStatus`]: `unit.json` `status`). Owns their spellings: no reader
//! compares a status as free text, and a file with an unknown spelling is refused
//! where it is read. Must not decide what a status means for a claim: `report` and
//! `replay` do.

use serde::{Deserialize, Serialize};

/// How one server invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitStatus {
    /// Started, identified, warmed up, every cell driven, stopped by the harness.
    Completed,
    /// The server did not start (or answer its health check) in time.
    StartFailed,
    /// The server was not what its arm claims (the study stops).
    IdentityFailed,
    /// The warmup failed.
    WarmupFailed,
    /// The server exited before the harness stopped it.
    ServerDied,
}

impl UnitStatus {
    pub const ALL: [UnitStatus; 5] = [
        UnitStatus::Completed,
        UnitStatus::StartFailed,
        UnitStatus::IdentityFailed,
        UnitStatus::WarmupFailed,
        UnitStatus::ServerDied,
    ];

    /// The spelling in the evidence files.
    pub fn as_str(self) -> &'static str {
        match self {
            UnitStatus::Completed => "completed",
            UnitStatus::StartFailed => "start_failed",
            UnitStatus::IdentityFailed => "identity_failed",
            UnitStatus::WarmupFailed => "warmup_failed",
            UnitStatus::ServerDied => "server_died",
        }
    }

    /// The status a file spells `s`, if it is one.
    pub fn parse(s: &str) -> Option<UnitStatus> {
        UnitStatus::ALL.into_iter().find(|u| u.as_str() == s)
    }

    /// Nothing was measured: the unit may be run again when a study resumes.
    pub fn measured_nothing(self) -> bool {
        matches!(self, UnitStatus::StartFailed | UnitStatus::IdentityFailed)
    }
}

/// A scheduled server invocation as a reader finds it: ended with a status, or
/// without a readable `arm_outcome.json`. Spelled as the status, `missing` or
/// `malformed` (`results/matrix.csv` `unit_status`, report and replay tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitState {
    Ended(UnitStatus),
    /// No `arm_outcome.json`: the unit never ran, or the study stopped first.
    Missing,
    /// An `arm_outcome.json` that does not parse (replay names the file).
    Malformed,
}

impl UnitState {
    pub fn as_str(self) -> &'static str {
        match self {
            UnitState::Ended(s) => s.as_str(),
            UnitState::Missing => "missing",
            UnitState::Malformed => "malformed",
        }
    }

    pub fn parse(s: &str) -> Option<UnitState> {
        match s {
            "missing" => Some(UnitState::Missing),
            "malformed" => Some(UnitState::Malformed),
            _ => UnitStatus::parse(s).map(UnitState::Ended),
        }
    }

    /// The state of a unit whose outcome file was read (`None`: there was none).
    pub fn of(status: Option<UnitStatus>) -> UnitState {
        status.map_or(UnitState::Missing, UnitState::Ended)
    }

    pub fn is_completed(self) -> bool {
        self == UnitState::Ended(UnitStatus::Completed)
    }
}

/// How one cell of a server invocation ended (`arm_outcome.json` `cells[].status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    /// Every request was sent and ended.
    Completed,
    /// The server died during the cell.
    Interrupted,
    /// The cell was never started (the server died or failed before it).
    NotRun,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Completed => "completed",
            CellStatus::Interrupted => "interrupted",
            CellStatus::NotRun => "not_run",
        }
    }
}

/// Whether a scheduled (block, arm, cell) has numbers (`results/matrix.csv` `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowStatus {
    /// Its summary was computed.
    Measured,
    /// It has no requests file: never run.
    NotRun,
    /// It has a requests file but no summary could be computed (the error is beside it).
    NoSummary,
}

impl RowStatus {
    pub const ALL: [RowStatus; 3] = [RowStatus::Measured, RowStatus::NotRun, RowStatus::NoSummary];

    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Measured => "measured",
            RowStatus::NotRun => "not_run",
            RowStatus::NoSummary => "no_summary",
        }
    }

    pub fn parse(s: &str) -> Option<RowStatus> {
        RowStatus::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// One request's row in `results/requests.csv` (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// Valid and completed: its measures are in the row.
    Ok,
    /// Failed or unfinished (`failure_class` says how).
    Failed,
    /// Valid, but its timestamps are out of order: no measures.
    Unmeasurable,
}

impl RequestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Ok => "ok",
            RequestStatus::Failed => "failed",
            RequestStatus::Unmeasurable => "unmeasurable",
        }
    }
}

/// The qualification's verdict in its completion record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QualificationVerdict {
    AllQualified,
    NotAllQualified,
}

/// A completion record's `status` (`unit.json`): the server invocation's status, or
/// the qualification's verdict for the `qualification` unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RecordStatus {
    Server(UnitStatus),
    Qualification(QualificationVerdict),
}

impl RecordStatus {
    /// The server invocation's status (`None` for the qualification's record).
    pub fn server(self) -> Option<UnitStatus> {
        match self {
            RecordStatus::Server(s) => Some(s),
            RecordStatus::Qualification(_) => None,
        }
    }

    pub fn is_completed(self) -> bool {
        self == RecordStatus::Server(UnitStatus::Completed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Server(s) => s.as_str(),
            RecordStatus::Qualification(QualificationVerdict::AllQualified) => "all_qualified",
            RecordStatus::Qualification(QualificationVerdict::NotAllQualified) => "not_all_qualified",
        }
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(UnitStatus, UnitState, CellStatus, RowStatus, RequestStatus, RecordStatus);

impl Serialize for UnitState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for UnitState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<UnitState, D::Error> {
        let s = String::deserialize(d)?;
        UnitState::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown unit status {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_reads_back_from_its_spelling_in_json() {
        for s in UnitStatus::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<UnitStatus>(&json).unwrap(), s);
            assert_eq!(UnitStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(UnitStatus::parse("missing"), None);
    }

    #[test]
    fn every_other_status_reads_back_from_its_spelling_and_unknown_ones_are_refused() {
        let states =
            UnitStatus::ALL.map(UnitState::Ended).into_iter().chain([UnitState::Missing, UnitState::Malformed]);
        for s in states {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<UnitState>(&json).unwrap(), s);
            assert_eq!(UnitState::parse(s.as_str()), Some(s));
        }
        assert!(UnitState::of(Some(UnitStatus::Completed)).is_completed() && !UnitState::of(None).is_completed());
        assert!(
            serde_json::from_str::<UnitState>("\"server_failed\"").unwrap_err().to_string().contains("server_failed")
        );
        for c in [CellStatus::Completed, CellStatus::Interrupted, CellStatus::NotRun] {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        }
        assert!(serde_json::from_str::<CellStatus>("\"done\"").is_err());
        for r in [RequestStatus::Ok, RequestStatus::Failed, RequestStatus::Unmeasurable] {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{r}\""));
        }
        for r in RowStatus::ALL {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{r}\""));
            assert_eq!(RowStatus::parse(r.as_str()), Some(r));
        }
        assert_eq!(RowStatus::parse("measured "), None);
        let records = UnitStatus::ALL.map(RecordStatus::Server).into_iter().chain(
            [QualificationVerdict::AllQualified, QualificationVerdict::NotAllQualified]
                .map(RecordStatus::Qualification),
        );
        for r in records {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{r}\""));
            assert_eq!(serde_json::from_str::<RecordStatus>(&json).unwrap(), r);
        }
        assert!(RecordStatus::Server(UnitStatus::Completed).is_completed());
        assert_eq!(RecordStatus::Qualification(QualificationVerdict::AllQualified).server(), None);
        assert!(serde_json::from_str::<RecordStatus>("\"qualified\"").is_err());
    }

    /// Every number an evidence file holds reads back as the one written (serde_json's
    /// `float_roundtrip`; its default parser is best-effort and can be one ulp off).
    #[test]
    fn floats_read_back_from_json_bit_for_bit() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut off = Vec::new();
        for _ in 0..200_000 {
            // xorshift64*: throughputs, logs and ratios of every magnitude.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            let v = f64::from_bits((bits >> 12) | 0x3FF0_0000_0000_0000) * 10f64.powi((bits % 20) as i32 - 10);
            let back: f64 = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
            if back.to_bits() != v.to_bits() {
                off.push(v);
            }
        }
        assert!(
            off.is_empty(),
            "{} of 200000 floats came back changed, e.g. {:?}",
            off.len(),
            &off[..off.len().min(3)]
        );
    }
}
