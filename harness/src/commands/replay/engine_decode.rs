//! Replay's own recomputation of a cell's engine decode measures from the kept
//! receipts (`engine_decode_steps`, `engine_tpot_ms`), written from the definition
//! in `docs/design.md` section 5 without calling `metrics`: each of the cell's
//! requests (by response id) spans the steps from its first admission to its
//! finish (to the last step when it never finished); the cell's steps are the
//! union of those spans; a decode step is a cell step with no prefill tokens, at
//! least one decode token and a cell step just before it, lasting
//! `t_ns(step) - t_ns(step - 1)`; engine TPOT = summed durations / decode tokens.
//! Must not read files.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::records::Receipt;

/// What one receipt line contributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub step: u64,
    pub t_ns: u64,
    /// Ids admitted fresh or resumed in this step.
    pub entered: Vec<String>,
    pub finished: Vec<String>,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
}

impl Step {
    pub fn of(r: &Receipt) -> Step {
        Step {
            step: r.step,
            t_ns: r.t_ns,
            entered: r.admitted.iter().chain(&r.resumed).cloned().collect(),
            finished: r.finished.clone(),
            prefill_tokens: r.prefill_tokens,
            decode_tokens: r.decode_tokens,
        }
    }
}

/// `(decode steps, engine TPOT in ms)` of the cell whose requests have `ids`.
pub fn measure(timeline: &[Step], ids: &HashSet<&str>) -> (u64, Option<f64>) {
    let last = timeline.iter().map(|s| s.step).max().unwrap_or(0);
    let mut first: HashMap<&str, u64> = HashMap::new();
    for s in timeline {
        for id in s.entered.iter().filter(|id| ids.contains(id.as_str())) {
            first.entry(id.as_str()).and_modify(|x| *x = (*x).min(s.step)).or_insert(s.step);
        }
    }
    let mut end: HashMap<&str, u64> = HashMap::new();
    for s in timeline {
        for id in &s.finished {
            if let Some(&a) = first.get(id.as_str())
                && s.step >= a
            {
                end.entry(id.as_str()).and_modify(|x| *x = (*x).min(s.step)).or_insert(s.step);
            }
        }
    }
    // The union of the spans: how many of the cell's requests are in flight at each
    // step, by a running sum of +1 at each span's start and -1 after its end.
    let mut delta: BTreeMap<u64, i64> = BTreeMap::new();
    for (id, &a) in &first {
        *delta.entry(a).or_default() += 1;
        *delta.entry(end.get(id).copied().unwrap_or(last) + 1).or_default() -= 1;
    }
    let mut covered: Vec<(u64, u64)> = Vec::new(); // disjoint [from, to) step ranges
    let (mut open, mut from) = (0i64, 0u64);
    for (&at, &d) in &delta {
        let was = open;
        open += d;
        if was == 0 && open > 0 {
            from = at;
        } else if was > 0 && open == 0 {
            covered.push((from, at));
        }
    }
    let in_cell = |step: u64| {
        let i = covered.partition_point(|&(_, to)| to <= step);
        covered.get(i).is_some_and(|&(a, _)| a <= step)
    };
    let time: BTreeMap<u64, u64> = timeline.iter().map(|s| (s.step, s.t_ns)).collect();
    let (mut n, mut tokens, mut ns) = (0u64, 0u64, 0u64);
    for s in timeline.iter().filter(|s| s.prefill_tokens == 0 && s.decode_tokens > 0 && s.step > 0) {
        if !(in_cell(s.step) && in_cell(s.step - 1)) {
            continue;
        }
        let Some(&before) = time.get(&(s.step - 1)) else { continue };
        n += 1;
        tokens += s.decode_tokens;
        ns += s.t_ns.saturating_sub(before);
    }
    (n, (tokens > 0).then(|| ns as f64 / tokens as f64 / 1e6))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(step: u64, t_ms: u64, entered: &[&str], finished: &[&str], prefill: u64, decode: u64) -> Step {
        Step {
            step,
            t_ns: t_ms * 1_000_000,
            entered: entered.iter().map(|x| x.to_string()).collect(),
            finished: finished.iter().map(|x| x.to_string()).collect(),
            prefill_tokens: prefill,
            decode_tokens: decode,
        }
    }

    #[test]
    fn the_cells_decode_steps_by_span() {
        let t = vec![
            s(0, 100, &["a", "b"], &[], 256, 0),
            s(1, 110, &[], &[], 0, 2),
            s(2, 122, &[], &[], 0, 2),
            s(3, 130, &[], &["a"], 0, 2),
            s(4, 134, &[], &["b"], 0, 1),
            s(5, 900, &["c"], &[], 128, 0),
            s(6, 905, &[], &["c"], 0, 1),
        ];
        let (n, tpot) = measure(&t, &["a", "b"].into());
        assert_eq!(n, 4);
        assert!((tpot.unwrap() - 34.0 / 7.0).abs() < 1e-12);
        assert_eq!(measure(&t, &["c"].into()), (1, Some(5.0)));
        assert_eq!(measure(&t, &["zz"].into()), (0, None));
        // Two rounds of one cell with another cell's steps between: the first decode
        // step after the gap has no cell step before it and does not count.
        let rounds = vec![
            s(0, 0, &["a"], &[], 16, 0),
            s(1, 5, &[], &["a"], 0, 1),
            s(2, 50, &["x"], &[], 16, 0),
            s(3, 55, &[], &["x"], 0, 1),
            s(4, 60, &["b"], &[], 0, 1),
            s(5, 70, &[], &["b"], 0, 1),
        ];
        assert_eq!(measure(&rounds, &["a", "b"].into()), (2, Some(7.5)));
        assert_eq!(measure(&rounds, &["x"].into()), (1, Some(5.0)));
    }
}
