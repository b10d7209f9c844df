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
//! Every product is computed in exact decimal arithmetic (`Decimal`: an integer
//! mantissa and a power-of-ten scale) on the decimal text of each number, so
//! 0.29 * 100 is exactly 29 and 0.9 * 3.2222222222 is exactly 2.89999999998 (near
//! 2.8, not 2.9). A plan number's decimal text is recovered from its `f64` as the
//! shortest text that reads back as the same `f64`, which is the text written in the
//! plan for any number of up to 15 significant digits.

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

/// An exact non-negative decimal: `mantissa / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal {
    mantissa: u128,
    scale: u32,
}

/// Largest scale kept: beyond it a product's denominator would not fit in `u128`.
const MAX_SCALE: u32 = 36;

impl Decimal {
    /// An integer.
    pub fn from_int(n: u64) -> Decimal {
        Decimal { mantissa: u128::from(n), scale: 0 }
    }

    /// Parses plain decimal text such as `16.6504` or `3` (no sign, no exponent).
    pub fn parse(text: &str) -> Option<Decimal> {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let digits = || int.bytes().chain(frac.bytes());
        if !digits().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let frac = frac.trim_end_matches('0');
        let scale = u32::try_from(frac.len()).ok().filter(|&s| s <= MAX_SCALE)?;
        let mut mantissa: u128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
        }
        Some(Decimal { mantissa, scale })
    }

    /// The decimal text of a finite non-negative `f64` (its shortest round-trip
    /// form; Rust never writes an exponent there). `None` for NaN, infinities,
    /// negatives and values whose digits do not fit.
    pub fn from_f64(x: f64) -> Option<Decimal> {
        if !x.is_finite() || x < 0.0 {
            return None;
        }
        Decimal::parse(&format!("{x}"))
    }

    /// The exact product, `None` on overflow.
    pub fn mul(self, other: Decimal) -> Option<Decimal> {
        let scale = self.scale + other.scale;
        if scale > MAX_SCALE {
            return None;
        }
        Some(Decimal { mantissa: self.mantissa.checked_mul(other.mantissa)?, scale })
    }

    fn denominator(self) -> u128 {
        10u128.pow(self.scale)
    }

    /// Rounds down to an integer; `None` when it exceeds `u64`.
    pub fn floor(self) -> Option<u64> {
        u64::try_from(self.mantissa / self.denominator()).ok()
    }

    /// Rounds up to an integer; `None` when it exceeds `u64`.
    pub fn ceil(self) -> Option<u64> {
        u64::try_from(self.mantissa.div_ceil(self.denominator())).ok()
    }

    /// The value in tenths when it is a whole number of tenths.
    pub fn exact_tenths(self) -> Option<u64> {
        let t = self.mul(Decimal::from_int(10))?;
        (t.mantissa % t.denominator() == 0).then(|| t.floor()).flatten()
    }
}

/// `floor(factor * x)` for plan numbers, exactly; `None` when a number has no exact
/// decimal form that fits (validation keeps plan numbers far from that).
fn floor_product(factors: &[f64], x: Decimal) -> Option<u64> {
    factors.iter().try_fold(x, |acc, &f| acc.mul(Decimal::from_f64(f)?))?.floor()
}

fn ceil_product(a: f64, b: f64) -> Option<u64> {
    Decimal::from_f64(a)?.mul(Decimal::from_f64(b)?)?.ceil()
}

/// Applies the formula. `spec` is assumed validated (positive finite pilots).
pub fn compute(spec: &DeriveSpec) -> Result<DerivedLoads, Vec<Issue>> {
    let mut issues = Vec::new();
    let slower = spec.pilot_rates.iter().copied().fold(f64::INFINITY, f64::min);
    let faster = spec.pilot_rates.iter().copied().fold(0.0, f64::max);
    let overflow = |key: &str| Issue::new(key, "too many digits for exact decimal arithmetic");
    let Some(near) = floor_product(&[spec.near_fraction, slower], Decimal::from_int(10)) else {
        return Err(vec![overflow("derive.pilot_rates")]);
    };
    if near == 0 {
        issues.push(Issue::new(
            "derive.near_fraction",
            format!("the near load rounds down to 0.0 req/s (slower pilot {slower})"),
        ));
    }
    let mut rates_tenths = BTreeMap::from([("near".to_string(), near)]);
    for (name, &f) in &spec.fractions {
        let Some(t) = floor_product(&[f], Decimal::from_int(near)) else {
            issues.push(overflow(&format!("derive.fractions.{name}")));
            continue;
        };
        if t == 0 && near > 0 {
            issues.push(Issue::new(
                format!("derive.fractions.{name}"),
                format!("{f} of the near load rounds down to 0.0 req/s"),
            ));
        }
        rates_tenths.insert(name.clone(), t);
    }
    let count = match spec.count.as_ref() {
        None => None,
        Some(rule) => match ceil_product(rule.duration_s, faster) {
            Some(c) => Some(rule.floor.max(c).div_ceil(rule.multiple).saturating_mul(rule.multiple)),
            None => {
                issues.push(overflow("derive.count_duration_s"));
                None
            }
        },
    };
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
                    .and_then(Decimal::from_f64)
                    .and_then(Decimal::exact_tenths);
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
    fn products_are_exact_decimals_not_snapped_floats() {
        // 10 * 0.9 * 3.2222222222 = 28.999999999800 exactly: near is 2.8. A 9-decimal
        // snap of the f64 product (28.9999999998...) gave 29, i.e. 2.9.
        let spec = DeriveSpec {
            pilot_rates: vec![3.2222222222, 4.0],
            near_fraction: 0.9,
            fractions: BTreeMap::from([("half".into(), 0.5)]),
            count: Some(CountRule { floor: 1, duration_s: 10.0, multiple: 1 }),
            note: None,
        };
        let d = compute(&spec).unwrap();
        assert_eq!(tenths_str(d.rates_tenths["near"]), "2.8");
        assert_eq!(d.rates_tenths["half"], 14);
        assert_eq!(d.count, Some(40));
        // Above a whole number by less than a 9-decimal snap keeps: 30 * 1.00000000001
        // = 30.0000000003, so the count rounds up to 31 (the snap made it 30).
        let spec = DeriveSpec {
            pilot_rates: vec![1.00000000001],
            near_fraction: 1.0,
            fractions: BTreeMap::new(),
            count: Some(CountRule { floor: 1, duration_s: 30.0, multiple: 1 }),
            note: None,
        };
        assert_eq!(compute(&spec).unwrap().count, Some(31));
    }

    #[test]
    fn decimal_parsing_and_rounding() {
        let d = |t: &str| Decimal::parse(t).unwrap();
        assert_eq!(d("16.6504"), Decimal { mantissa: 166504, scale: 4 });
        assert_eq!(d("16.65040"), d("16.6504"));
        assert_eq!(d("3."), Decimal::from_int(3));
        assert_eq!(d(".5"), Decimal { mantissa: 5, scale: 1 });
        for bad in ["", ".", "-1", "1e5", "1.2.3", " 1"] {
            assert_eq!(Decimal::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Decimal::from_f64(0.1), Some(d("0.1")));
        assert_eq!(Decimal::from_f64(1e-7), Some(d("0.0000001")));
        assert_eq!(Decimal::from_f64(f64::NAN), None);
        assert_eq!(Decimal::from_f64(-1.0), None);
        assert_eq!(d("2.5").floor(), Some(2));
        assert_eq!(d("2.5").ceil(), Some(3));
        assert_eq!(d("2").ceil(), Some(2));
        assert_eq!(d("14.9").exact_tenths(), Some(149));
        assert_eq!(d("14.95").exact_tenths(), None);
        assert_eq!(d("0.1").mul(d("0.2")), Some(d("0.02")));
    }

    #[test]
    fn derived_table_is_checked_exactly() {
        let spec = reference();
        let expected = compute(&spec).unwrap();
        let table = |near: &str| -> BTreeMap<String, toml::Value> {
            toml::from_str(&format!("near = {near}\nlow = 3.7\nmoderate = 8.1\ncount = 768\n")).unwrap()
        };
        let mut issues = Vec::new();
        assert!(check_table(&table("14.9"), Some(&expected), &mut issues).is_some(), "{issues:?}");
        assert!(check_table(&table("14.90000001"), Some(&expected), &mut issues).is_none());
        assert_eq!(issues.len(), 1, "{issues:?}");
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
