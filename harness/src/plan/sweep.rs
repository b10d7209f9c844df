//! Sweeps: a cell that lists several rates (`rate = [1, 4, 8, 16]`, open-loop or
//! constant) or several concurrencies (`concurrency = [1, 4]`, closed loop) stands
//! for one cell per listed value, in list order, at the sweep's place among the
//! cells: `<name>-r<rate>` and `<name>-c<concurrency>` (the value as Rust prints it:
//! 4.0 -> `4`, 0.5 -> `0.5`). Every later layer (schedule, traces, report, replay)
//! sees only the expanded cells, exactly as if they had been written by hand.
//! Owns the expansion and its naming. Must not judge the values themselves: each
//! expanded cell is validated like any other (its issues keep the sweep's
//! `cells[i]` key).

use super::schema::{CellFile, NumOrRef, OneOrMany};
use super::validate::Checker;

/// The name of one cell of a rate sweep.
pub fn rate_cell_name(name: &str, rate: f64) -> String {
    format!("{name}-r{rate}")
}

/// The name of one cell of a concurrency sweep.
pub fn concurrency_cell_name(name: &str, concurrency: i64) -> String {
    format!("{name}-c{concurrency}")
}

fn check_list<T: PartialEq + std::fmt::Display>(c: &mut Checker, key: &str, values: &[T]) -> bool {
    if values.is_empty() {
        c.err(key, "an empty sweep: list at least one value");
        return false;
    }
    for (j, v) in values.iter().enumerate() {
        if values[..j].contains(v) {
            c.err(key, format!("the sweep lists {v} twice"));
            return false;
        }
    }
    true
}

/// Every cell file with its index in `[[cells]]`; a sweep becomes one file per value.
pub(super) fn expand(c: &mut Checker, files: Vec<CellFile>) -> Vec<(usize, CellFile)> {
    let mut out = Vec::with_capacity(files.len());
    for (i, f) in files.into_iter().enumerate() {
        match (&f.rate, &f.concurrency) {
            (Some(NumOrRef::List(rates)), _) => {
                if check_list(c, &format!("cells[{i}].rate"), rates) {
                    for &r in rates {
                        let name = rate_cell_name(&f.name, r);
                        out.push((i, CellFile { name, rate: Some(NumOrRef::Num(r)), ..f.clone() }));
                    }
                }
            }
            (_, Some(OneOrMany::Many(values))) => {
                if check_list(c, &format!("cells[{i}].concurrency"), values) {
                    for &v in values {
                        let name = concurrency_cell_name(&f.name, v);
                        out.push((i, CellFile { name, concurrency: Some(OneOrMany::One(v)), ..f.clone() }));
                    }
                }
            }
            _ => out.push((i, f)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_print_values_as_written() {
        assert_eq!(rate_cell_name("sg", 4.0), "sg-r4");
        assert_eq!(rate_cell_name("sg", 0.5), "sg-r0.5");
        assert_eq!(rate_cell_name("sg", 14.9), "sg-r14.9");
        assert_eq!(concurrency_cell_name("cl", 32), "cl-c32");
    }
}
