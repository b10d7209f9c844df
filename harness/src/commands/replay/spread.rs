//! Replay's own recomputation of the matrix's spread columns of one cell, from its
//! raw records (each valid request measured by `measures::one`, without calling
//! `metrics`, `stats` or `report`): mean input and output tokens; for TTFT (from
//! send), TPOT, ITL (pooled gaps) and E2E (from send) the nearest-rank p90, the
//! population standard deviation (divided by n), min and max, in ms. Owns replay's
//! copy of the column names. Must not read files.

use super::measures::{one, rank};
use super::records::Rec;

/// The spread columns, in order (a test checks them against the report's).
pub const SPREAD_NAMES: [&str; 18] = [
    "input_tokens_mean",
    "output_tokens_mean",
    "ttft_p90_ms",
    "ttft_sd_ms",
    "ttft_min_ms",
    "ttft_max_ms",
    "tpot_p90_ms",
    "tpot_sd_ms",
    "tpot_min_ms",
    "tpot_max_ms",
    "itl_p90_ms",
    "itl_sd_ms",
    "itl_min_ms",
    "itl_max_ms",
    "e2e_p90_ms",
    "e2e_sd_ms",
    "e2e_min_ms",
    "e2e_max_ms",
];

fn mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() { None } else { Some(v.iter().sum::<f64>() / v.len() as f64) }
}

fn four(ns: &[f64]) -> [Option<f64>; 4] {
    let Some(m) = mean(ns) else { return [None; 4] };
    let mut s = ns.to_vec();
    s.sort_by(f64::total_cmp);
    let sd = (ns.iter().map(|x| (x - m).powi(2)).sum::<f64>() / ns.len() as f64).sqrt();
    let ms = |v: f64| Some(v / 1e6);
    [ms(s[rank(s.len(), 90.0) - 1]), ms(sd), ms(s[0]), ms(s[s.len() - 1])]
}

/// The spread values of a cell's records (`Err`: a valid record that cannot be measured).
pub fn spread(records: &[Rec]) -> Result<Vec<Option<f64>>, String> {
    let valid = records.iter().filter(|r| r.valid()).map(one).collect::<Result<Vec<_>, _>>()?;
    let prompts: Vec<f64> = valid.iter().map(|o| o.prompt as f64).collect();
    let outputs: Vec<f64> = valid.iter().map(|o| o.output as f64).collect();
    let mut v = vec![mean(&prompts), mean(&outputs)];
    v.extend(four(&valid.iter().filter_map(|o| o.ttft.map(|t| t.0 as f64)).collect::<Vec<_>>()));
    v.extend(four(&valid.iter().filter_map(|o| o.tpot).collect::<Vec<_>>()));
    v.extend(four(&valid.iter().flat_map(|o| o.gaps.iter().map(|&g| g as f64)).collect::<Vec<_>>()));
    v.extend(four(&valid.iter().map(|o| o.e2e.0 as f64).collect::<Vec<_>>()));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_and_report_name_the_same_spread_columns() {
        assert_eq!(SPREAD_NAMES, crate::analysis::spread::SPREAD_COLUMNS);
    }

    #[test]
    fn four_is_p90_population_sd_min_max() {
        let [p90, sd, min, max] = four(&[2e6, 4e6, 6e6]);
        assert_eq!((p90, min, max), (Some(6.0), Some(2.0), Some(6.0)));
        assert!((sd.unwrap() - (8.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(four(&[]), [None; 4]);
    }
}
