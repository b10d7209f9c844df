//! Values that several evidence files share, typed once for every writer and
//! reader: a server invocation's status (`arm_outcome.json` `status`, the
//! `unit.json` record's `status` of a study unit, compare's `unit.json`). Owns
//! their spellings. Must not decide what a status
//! means for a claim: `report` and `replay` do.

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

    /// Whether a file's status text is `Completed`.
    pub fn is_completed(s: &str) -> bool {
        UnitStatus::parse(s) == Some(UnitStatus::Completed)
    }

    /// Nothing was measured: the unit may be run again when a study resumes.
    pub fn measured_nothing(self) -> bool {
        matches!(self, UnitStatus::StartFailed | UnitStatus::IdentityFailed)
    }
}

impl std::fmt::Display for UnitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
        assert!(UnitStatus::is_completed("completed") && !UnitStatus::is_completed("server_died"));
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
