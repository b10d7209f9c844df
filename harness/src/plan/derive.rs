//! Pilot-derived loads and counts: the frozen formula, the `[derived]` table that
//! `harness plan derive --write` adds to a plan, and the check that such a table
//! equals the formula's output. Must not run pilots or read results files: pilot
//! rates come from the plan's `[derive]` table, written by a person.
//!
//! Formula (all rates in requests/s, kept as integer tenths to avoid float drift):
//! - near = floor(10 * near_fraction * min(pilot_rates)) / 10
//! - each named fraction f: floor(10 * f * near) / 10
//! - count = max(count_floor, ceil(count_duration_s * max(pilot_rates))), rounded up
//!   to a multiple of count_multiple.
//!
//! Every floor/ceil first rounds its argument to 9 decimals, so a product such as
//! 0.29 * 100 = 28.999999999999996 counts as 29.

use std::collections::BTreeMap;

use super::error::{Issue, PlanError};

/// Most requests one cell may hold (a trace is built in memory).
pub const MAX_REQUESTS: u64 = 10_000_000;

/// The `[derive]` table: pilot results and the formula's constants.
#[derive(Debug, Clone, PartialEq)]
pub struct DeriveSpec {
    /// Completed requests/s of the excluded pilots (e.g. one per control arm).
    pub pilot_rates: Vec<f64>,
    /// Fraction of the slower pilot that is the near load (0.9 in the reference).
    pub near_fraction: f64,
    /// Named loads as fractions of the near load, e.g. low = 0.25, moderate = 0.55.
    pub fractions: BTreeMap<String, f64>,
    pub count: Option<CountRule>,
    pub note: Option<String>,
}

/// How the request count is derived.
#[derive(Debug, Clone, PartialEq)]
pub struct CountRule {
    pub floor: u64,
    pub duration_s: f64,
    pub multiple: u64,
}

/// The formula's output, as written in `[derived]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivedLoads {
    /// Rates in tenths of a request per second, keyed `near` and each fraction name.
    pub rates_tenths: BTreeMap<String, u64>,
    pub count: Option<u64>,
}

impl DerivedLoads {
    /// A derived rate in requests/s.
    pub fn rate(&self, name: &str) -> Option<f64> {
        self.rates_tenths.get(name).map(|&t| t as f64 / 10.0)
    }
}

/// Renders integer tenths exactly, e.g. 149 -> "14.9".
pub fn tenths_str(tenths: u64) -> String {
    format!("{}.{}", tenths / 10, tenths % 10)
}

fn snap(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

fn floor_robust(x: f64) -> u64 {
    snap(x).floor().max(0.0) as u64
}

fn ceil_robust(x: f64) -> u64 {
    snap(x).ceil().max(0.0) as u64
}

/// Applies the formula. `spec` is assumed validated (positive finite pilots).
pub fn compute(spec: &DeriveSpec) -> Result<DerivedLoads, Vec<Issue>> {
    let mut issues = Vec::new();
    let slower = spec.pilot_rates.iter().copied().fold(f64::INFINITY, f64::min);
    let faster = spec.pilot_rates.iter().copied().fold(0.0, f64::max);
    let near = floor_robust(10.0 * spec.near_fraction * slower);
    if near == 0 {
        issues.push(Issue::new(
            "derive.near_fraction",
            format!("the near load rounds down to 0.0 req/s (slower pilot {slower})"),
        ));
    }
    let mut rates_tenths = BTreeMap::from([("near".to_string(), near)]);
    for (name, &f) in &spec.fractions {
        let t = floor_robust(f * near as f64);
        if t == 0 && near > 0 {
            issues.push(Issue::new(
                format!("derive.fractions.{name}"),
                format!("{f} of the near load rounds down to 0.0 req/s"),
            ));
        }
        rates_tenths.insert(name.clone(), t);
    }
    let count = spec.count.as_ref().map(|rule| {
        let c = rule.floor.max(ceil_robust(rule.duration_s * faster));
        c.div_ceil(rule.multiple) * rule.multiple
    });
    if let Some(c) = count.filter(|&c| c > MAX_REQUESTS) {
        issues.push(Issue::new(
            "derive.count_duration_s",
            format!("the derived count {c} exceeds {MAX_REQUESTS} requests"),
        ));
    }
    if issues.is_empty() { Ok(DerivedLoads { rates_tenths, count }) } else { Err(issues) }
}

/// Checks a `[derived]` table read from the plan against the formula's output.
pub(super) fn check_table(
    table: &BTreeMap<String, toml::Value>,
    expected: Option<&DerivedLoads>,
    issues: &mut Vec<Issue>,
) -> Option<DerivedLoads> {
    let Some(expected) = expected else {
        issues.push(Issue::new(
            "derived",
            "the plan has a [derived] table but no valid [derive] table to check it against",
        ));
        return None;
    };
    let before = issues.len();
    let rerun = "rerun `harness plan derive PLAN --write`";
    for (key, value) in table {
        let (want, ok) = match key.as_str() {
            "count" => (expected.count.map(|c| c.to_string()), value.as_integer().map(|i| i as u64) == expected.count),
            name => {
                let want = expected.rates_tenths.get(name).copied();
                let got = value
                    .as_float()
                    .or(value.as_integer().map(|i| i as f64))
                    .map(|x| snap(x * 10.0))
                    .filter(|t| t.fract() == 0.0 && *t >= 0.0)
                    .map(|t| t as u64);
                (want.map(tenths_str), want.is_some() && got == want)
            }
        };
        match want {
            None => issues.push(Issue::new(format!("derived.{key}"), "not a load or count that [derive] defines")),
            Some(want) if !ok => issues.push(Issue::new(
                format!("derived.{key}"),
                format!("{value} does not match the [derive] formula ({want}); {rerun}"),
            )),
            Some(_) => {}
        }
    }
    let mut wanted: Vec<&str> = expected.rates_tenths.keys().map(String::as_str).collect();
    if expected.count.is_some() {
        wanted.push("count");
    }
    for key in wanted {
        if !table.contains_key(key) {
            issues.push(Issue::new(format!("derived.{key}"), format!("missing; {rerun}")));
        }
    }
    (issues.len() == before).then(|| expected.clone())
}

/// The `[derived]` table as TOML text (ends with a newline).
pub fn derived_table_text(loads: &DerivedLoads) -> String {
    let mut s = String::from("[derived]\n# Written by `harness plan derive --write` from [derive]; do not edit.\n");
    for (name, &t) in &loads.rates_tenths {
        s.push_str(&format!("{name} = {}\n", tenths_str(t)));
    }
    if let Some(c) = loads.count {
        s.push_str(&format!("count = {c}\n"));
    }
    s
}

fn is_derived_header(line: &str) -> bool {
    let t = line.trim();
    let t = t.split('#').next().unwrap_or("").trim();
    t == "[derived]"
}

/// Returns the plan text with its `[derived]` table replaced (or appended at the end).
/// Every other byte of the plan is kept. The result is re-validated and must carry
/// exactly `loads`; otherwise the rewrite is refused.
pub fn rewrite_with_derived(text: &str, loads: &DerivedLoads) -> Result<String, PlanError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = String::with_capacity(text.len() + 256);
    let mut i = 0;
    let mut replaced = false;
    while i < lines.len() {
        if !replaced && is_derived_header(lines[i]) {
            // Drop the table up to its last key line; blank and comment lines after
            // it belong to whatever follows and are kept.
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim_start().starts_with('[') {
                end += 1;
            }
            let last_key = (start..end).rev().find(|&j| {
                let t = lines[j].trim();
                !t.is_empty() && !t.starts_with('#')
            });
            i = last_key.map_or(start, |j| j + 1);
            replaced = true;
            continue;
        }
        out.push_str(lines[i]);
        i += 1;
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(&derived_table_text(loads));
    let plan = super::parse(&out)?;
    if plan.derived.as_ref() != Some(loads) {
        return Err(PlanError::invalid(
            "derived",
            "the rewritten plan does not carry the derived values (is `derived` also set \
             as an inline table or dotted key?); edit the plan by hand",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> DeriveSpec {
        DeriveSpec {
            pilot_rates: vec![16.6504, 16.8997],
            near_fraction: 0.9,
            fractions: BTreeMap::from([("low".into(), 0.25), ("moderate".into(), 0.55)]),
            count: Some(CountRule { floor: 512, duration_s: 45.0, multiple: 32 }),
            note: None,
        }
    }

    #[test]
    fn reproduces_the_reference_example_exactly() {
        let d = compute(&reference()).unwrap();
        assert_eq!(d.rates_tenths["near"], 149);
        assert_eq!(d.rates_tenths["low"], 37);
        assert_eq!(d.rates_tenths["moderate"], 81);
        assert_eq!(d.rate("near"), Some(14.9));
        assert_eq!(d.rate("low"), Some(3.7));
        assert_eq!(d.rate("moderate"), Some(8.1));
        assert_eq!(d.count, Some(768));
    }

    #[test]
    fn reproduces_the_8k_reference_loads() {
        let mut spec = reference();
        spec.pilot_rates = vec![3.2635, 3.3398];
        let d = compute(&spec).unwrap();
        assert_eq!(tenths_str(d.rates_tenths["near"]), "2.9");
        // 0.55 * 2.9 = 1.595 -> 1.5. The reference's 8K low/moderate loads (0.8, 1.6) are
        // not 25%/55% of 2.9 rounded down: its plans state them as literal rates.
        assert_eq!(tenths_str(d.rates_tenths["moderate"]), "1.5");
    }

    #[test]
    fn rounding_is_robust_to_float_error() {
        // 0.29 * 100 is 28.999999999999996 in f64; it must count as 29 tenths.
        let spec = DeriveSpec {
            pilot_rates: vec![100.0],
            near_fraction: 0.1,
            fractions: BTreeMap::from([("x".into(), 0.29)]),
            count: Some(CountRule { floor: 1, duration_s: 0.29, multiple: 1 }),
            note: None,
        };
        let d = compute(&spec).unwrap();
        assert_eq!(d.rates_tenths["near"], 100);
        assert_eq!(d.rates_tenths["x"], 29);
        assert_eq!(d.count, Some(29));
    }

    #[test]
    fn derived_table_text_is_exact() {
        let d = compute(&reference()).unwrap();
        assert_eq!(
            derived_table_text(&d),
            "[derived]\n# Written by `harness plan derive --write` from [derive]; do not edit.\n\
             low = 3.7\nmoderate = 8.1\nnear = 14.9\ncount = 768\n"
        );
    }
}
