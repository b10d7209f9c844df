//! Resolution of derived references: turns each cell's `derived:*` rate and count
//! into numbers from `[derived]`, and refuses a plan whose loads are not derived yet.
//! Must not compute loads (that is `derive`) nor guess a value that is missing.

use super::error::{Issue, PlanError};
use super::types::{Arrival, BodyKind, Cell, CellKind, Count, Load, Plan, Rate, Recorder};

/// A cell with every number concrete and what it sends: what the trace generator,
/// the runner and the readers use, so none of them looks the cell up again.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCell {
    pub name: String,
    pub kind: CellKind,
    /// The body the cell sends: its route (`cells[].endpoint`, else
    /// `request.endpoint`) and whether it asks for token IDs.
    pub body: BodyKind,
    /// How each answer is recorded (`cells[].recorder`).
    pub recorder: Recorder,
    pub load: ResolvedLoad,
    pub count: u64,
    /// `None`: a dataset panel's entries, in order.
    pub input_tokens: Option<u32>,
    pub retries: u32,
    /// `cells[].max_concurrency` of an open, constant or trace cell.
    pub max_concurrency: Option<u32>,
}

/// A cell's load with every number concrete (`Trace`: offsets from the cell's trace
/// file, `Load::Trace`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ResolvedLoad {
    Closed { concurrency: u32 },
    Open { rate_rps: f64, arrival: Arrival },
    Isolated { spacing_ns: u64 },
    Trace { time_scale: f64, lengths: bool },
}

impl Plan {
    /// The number a rate stands for, if known.
    pub fn rate_of(&self, rate: &Rate) -> Option<f64> {
        match rate {
            Rate::Fixed(r) => Some(*r),
            Rate::Derived(name) => self.derived.as_ref()?.rate(name),
        }
    }

    /// The number a count stands for, if known.
    pub fn count_of(&self, count: Count) -> Option<u64> {
        match count {
            Count::Fixed(n) => Some(n),
            Count::Derived => self.derived.as_ref()?.count,
        }
    }

    /// Refuses a plan with a `derived:*` reference that `[derived]` does not fill,
    /// naming each such cell key. `harness run` calls this before anything else.
    pub fn require_derived(&self) -> Result<(), PlanError> {
        let fix = if self.pilots.is_some() {
            "the plan's [pilots] derive it when `harness run` runs them"
        } else {
            "run `harness plan derive PLAN --write` first"
        };
        let mut issues = Vec::new();
        for (i, cell) in self.cells.iter().enumerate() {
            if let Load::Open { rate: rate @ Rate::Derived(name), .. } = &cell.load
                && self.rate_of(rate).is_none()
            {
                issues.push(Issue::new(
                    format!("cells[{i}].rate"),
                    format!("cell {:?} uses derived:{name}, which is not derived yet; {fix}", cell.name),
                ));
            }
            if self.count_of(cell.count).is_none() {
                issues.push(Issue::new(
                    format!("cells[{i}].count"),
                    format!("cell {:?} uses derived:count, which is not derived yet; {fix}", cell.name),
                ));
            }
        }
        if issues.is_empty() { Ok(()) } else { Err(PlanError::Invalid(issues)) }
    }

    /// The cell with its numbers filled in, or `None` when a reference is underived.
    pub fn try_resolve(&self, cell: &Cell) -> Option<ResolvedCell> {
        let load = match &cell.load {
            Load::Closed { concurrency } => ResolvedLoad::Closed { concurrency: *concurrency },
            Load::Open { rate, arrival } => ResolvedLoad::Open { rate_rps: self.rate_of(rate)?, arrival: *arrival },
            Load::Isolated { spacing_s } => ResolvedLoad::Isolated { spacing_ns: (spacing_s * 1e9).round() as u64 },
            Load::Trace { time_scale, lengths, .. } => {
                ResolvedLoad::Trace { time_scale: *time_scale, lengths: *lengths }
            }
        };
        Some(ResolvedCell {
            name: cell.name.clone(),
            kind: cell.kind,
            body: BodyKind { endpoint: cell.endpoint, token_ids: cell.token_ids },
            recorder: cell.recorder,
            load,
            count: self.count_of(cell.count)?,
            input_tokens: cell.input_tokens,
            retries: cell.retries,
            max_concurrency: cell.max_concurrency,
        })
    }

    /// Every cell resolved, in plan order; fails like [`Plan::require_derived`].
    pub fn resolved_cells(&self) -> Result<Vec<ResolvedCell>, PlanError> {
        self.require_derived()?;
        self.cells
            .iter()
            .map(|c| {
                self.try_resolve(c).ok_or_else(|| PlanError::invalid(format!("cells.{}", c.name), "cannot be resolved"))
            })
            .collect()
    }
}

impl ResolvedCell {
    /// Seconds from the first to the last intended arrival, when the load fixes it:
    /// open loop (count - 1) / rate on average, isolated (count - 1) * spacing.
    /// `None` for closed loop, whose pace the server sets, and for a trace file
    /// (the plan does not read it).
    pub fn arrival_span_s(&self) -> Option<f64> {
        let gaps = self.count.saturating_sub(1) as f64;
        match self.load {
            ResolvedLoad::Open { rate_rps, .. } => Some(gaps / rate_rps),
            ResolvedLoad::Isolated { spacing_ns } => Some(gaps * spacing_ns as f64 / 1e9),
            ResolvedLoad::Closed { .. } | ResolvedLoad::Trace { .. } => None,
        }
    }

    /// The most requests in flight the client allows: a closed loop's concurrency,
    /// or an open, constant or trace cell's `max_concurrency`.
    pub fn in_flight_cap(&self) -> Option<u32> {
        match self.load {
            ResolvedLoad::Closed { concurrency } => Some(concurrency),
            _ => self.max_concurrency,
        }
    }

    /// `", at most C in flight"` for a capped open, constant or trace cell, else "".
    pub fn cap_note(&self) -> String {
        match (self.load, self.max_concurrency) {
            (ResolvedLoad::Closed { .. }, _) | (_, None) => String::new(),
            (_, Some(c)) => format!(", at most {c} in flight"),
        }
    }
}
