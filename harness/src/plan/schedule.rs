//! The run schedule: which blocks exist, and in each block the arm order and the cell
//! order, from the plan's counterbalancing schemes. Owns those orders; the runner
//! follows them. Must not time, start or run anything.
//!
//! Blocks `0..count` are confirmation blocks: every arm runs every confirmation cell.
//! Blocks `count..count + descriptive` are descriptive blocks: every arm runs every
//! descriptive cell. Each arm gets a fresh server per block. Schemes, for block b:
//! - `fixed`: plan order.
//! - `alternate`: plan order when b is even, reversed when b is odd.
//! - `latin`: row b mod R of a balanced Latin square (Williams design) over the n
//!   items in plan order: row r, position j holds item (w[j] + r) mod n, with
//!   w = 0, 1, n-1, 2, n-2, ...; for odd n the n mirrored rows follow (R = 2n), for
//!   even n R = n. Over R blocks each item takes each position equally often and
//!   each ordered pair is adjacent equally often.
//! - explicit list of rows: row b mod len; a cell row lists every cell, and a block
//!   keeps those of its own kind, in the row's order.

use super::types::{CellKind, Order, Plan};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub blocks: Vec<ScheduledBlock>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledBlock {
    pub index: u32,
    pub kind: CellKind,
    /// Arm names in start order.
    pub arms: Vec<String>,
    /// Cell names in run order, the same for every arm of the block.
    pub cells: Vec<String>,
}

/// Rows of the balanced Latin square over `n` items (see the module doc).
pub fn latin_rows(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let w: Vec<usize> = (0..n)
        .map(|j| match j {
            0 => 0,
            j if j % 2 == 1 => j.div_ceil(2),
            j => n - j / 2,
        })
        .collect();
    let mut rows: Vec<Vec<usize>> = (0..n).map(|r| w.iter().map(|&x| (x + r) % n).collect()).collect();
    if n % 2 == 1 {
        let mirrored: Vec<Vec<usize>> = rows.iter().map(|row| row.iter().rev().copied().collect()).collect();
        rows.extend(mirrored);
    }
    rows
}

/// The arm order of round `k` of an interleaved block (`blocks.rounds` >= 1): the
/// block's arm order in even rounds, reversed in odd ones (ABBA ABBA ...), so that
/// over two rounds every arm runs first once and a drift within a round pair
/// weighs on both arms alike.
pub fn round_arms(block_arms: &[String], k: u32) -> Vec<String> {
    if k % 2 == 1 { block_arms.iter().rev().cloned().collect() } else { block_arms.to_vec() }
}

/// The entries of round `k` of `rounds` of a trace of `n` entries: the k-th of
/// `rounds` contiguous slices, as equal as integers allow (sizes differ by at
/// most one; an empty range when `n < rounds` leaves that round out).
pub fn round_range(n: usize, rounds: u32, k: u32) -> std::ops::Range<usize> {
    let r = rounds.max(1) as usize;
    let k = (k as usize).min(r);
    (n * k / r)..(n * (k + 1).min(r) / r)
}

/// How many blocks one full cycle of `order` over `n` items takes.
pub fn cycle_len(order: &Order, n: usize) -> usize {
    match order {
        Order::Fixed => 1,
        Order::Alternate => 2,
        Order::Latin => latin_rows(n).len(),
        Order::Explicit(rows) => rows.len().max(1),
    }
}

/// `items` (in plan order) arranged for block `b`.
pub fn arrange(order: &Order, items: &[String], b: u32) -> Vec<String> {
    let b = b as usize;
    match order {
        Order::Fixed => items.to_vec(),
        Order::Alternate if b % 2 == 1 => items.iter().rev().cloned().collect(),
        Order::Alternate => items.to_vec(),
        Order::Latin => {
            let rows = latin_rows(items.len());
            rows[b % rows.len()].iter().map(|&i| items[i].clone()).collect()
        }
        Order::Explicit(rows) if rows.is_empty() => items.to_vec(),
        Order::Explicit(rows) => rows[b % rows.len()].iter().filter(|name| items.contains(name)).cloned().collect(),
    }
}

impl Plan {
    /// Every block in run order, with its arm order and cell order.
    pub fn schedule(&self) -> Schedule {
        let arms: Vec<String> = self.arms.iter().map(|a| a.name.clone()).collect();
        let of_kind = |kind: CellKind| -> Vec<String> {
            self.cells.iter().filter(|c| c.kind == kind).map(|c| c.name.clone()).collect()
        };
        let (conf, desc) = (of_kind(CellKind::Confirmation), of_kind(CellKind::Descriptive));
        let total = self.blocks.count + self.blocks.descriptive;
        let blocks = (0..total)
            .map(|b| {
                let (kind, cells) = if b < self.blocks.count {
                    (CellKind::Confirmation, &conf)
                } else {
                    (CellKind::Descriptive, &desc)
                };
                ScheduledBlock {
                    index: b,
                    kind,
                    arms: arrange(&self.blocks.arm_order, &arms, b),
                    cells: arrange(&self.blocks.cell_order, cells, b),
                }
            })
            .collect();
        Schedule { blocks }
    }

    /// Notes (not errors) about balance: a confirmation block count that is not a
    /// multiple of a scheme's cycle leaves some orders more frequent than others.
    pub fn balance_notes(&self) -> Vec<String> {
        let n_conf = self.cells.iter().filter(|c| c.kind == CellKind::Confirmation).count();
        let mut notes = Vec::new();
        for (what, order, n) in
            [("arm_order", &self.blocks.arm_order, self.arms.len()), ("cell_order", &self.blocks.cell_order, n_conf)]
        {
            let cycle = cycle_len(order, n);
            if n > 1 && !(self.blocks.count as usize).is_multiple_of(cycle) {
                notes.push(format!(
                    "blocks.{what}: {} confirmation blocks is not a multiple of the scheme's \
                     cycle of {cycle}, so the orders are not exactly balanced",
                    self.blocks.count
                ));
            }
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("x{i}")).collect()
    }

    #[test]
    fn alternate_reverses_odd_blocks() {
        let items = names(3);
        assert_eq!(arrange(&Order::Alternate, &items, 0), ["x0", "x1", "x2"]);
        assert_eq!(arrange(&Order::Alternate, &items, 1), ["x2", "x1", "x0"]);
        assert_eq!(arrange(&Order::Alternate, &items, 2), ["x0", "x1", "x2"]);
        assert_eq!(arrange(&Order::Fixed, &items, 1), ["x0", "x1", "x2"]);
    }

    #[test]
    fn latin_rows_are_as_documented() {
        assert_eq!(latin_rows(2), vec![vec![0, 1], vec![1, 0]]);
        assert_eq!(
            latin_rows(3),
            vec![vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![2, 1, 0], vec![0, 2, 1], vec![1, 0, 2],]
        );
        assert_eq!(latin_rows(4), vec![vec![0, 1, 3, 2], vec![1, 2, 0, 3], vec![2, 3, 1, 0], vec![3, 0, 2, 1]]);
    }

    #[test]
    fn rounds_alternate_the_arm_order_and_cover_the_trace_once() {
        let arms = vec!["a".to_string(), "b".to_string()];
        assert_eq!(round_arms(&arms, 0), ["a", "b"]);
        assert_eq!(round_arms(&arms, 1), ["b", "a"]);
        assert_eq!(round_arms(&arms, 2), ["a", "b"]);
        for (n, rounds) in [(96, 4), (97, 4), (3, 4), (0, 2), (10, 1), (7, 3)] {
            let ranges: Vec<_> = (0..rounds).map(|k| round_range(n, rounds, k)).collect();
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(n));
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{n} in {rounds}: contiguous");
            }
            let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{n} in {rounds}: {sizes:?}");
        }
        assert_eq!(round_range(96, 4, 1), 24..48);
    }

    #[test]
    fn latin_squares_are_balanced() {
        for n in 2..=7 {
            let rows = latin_rows(n);
            let mut position = vec![vec![0; n]; n];
            let mut adjacent = vec![vec![0; n]; n];
            for row in &rows {
                let mut sorted = row.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n}: not a permutation");
                for (j, &x) in row.iter().enumerate() {
                    position[x][j] += 1;
                }
                for pair in row.windows(2) {
                    adjacent[pair[0]][pair[1]] += 1;
                }
            }
            let per = rows.len() / n;
            for (a, (pos, adj)) in position.iter().zip(&adjacent).enumerate() {
                assert!(pos.iter().all(|&k| k == per), "n={n}: positions");
                for (b, &count) in adj.iter().enumerate() {
                    let want = if a == b { 0 } else { rows.len() / n };
                    assert_eq!(count, want, "n={n}: pair {a}->{b}");
                }
            }
        }
    }

    #[test]
    fn explicit_rows_cycle_and_filter() {
        let order =
            Order::Explicit(vec![vec!["c".into(), "a".into(), "b".into()], vec!["b".into(), "c".into(), "a".into()]]);
        let items: Vec<String> = vec!["a".into(), "b".into()];
        assert_eq!(arrange(&order, &items, 0), ["a", "b"]);
        assert_eq!(arrange(&order, &items, 1), ["b", "a"]);
        assert_eq!(arrange(&order, &items, 2), ["a", "b"]);
    }
}
