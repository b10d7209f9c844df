//! `blocks.randomize_setup`: every spawned unit's `startup.json` env carries the
//! setup pad of the length the seed rule gives for its block and arm (SHA-256 of
//! `b"harness/setup/v1\0"`, the study seed, the block and the arm name; its first 8
//! bytes as a little-endian u64 modulo 4096), and no unit carries one when the plan
//! does not randomize. Recomputed here from that rule, not from `trace`. `None`
//! when the plan neither randomizes nor any startup record has a pad.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::read::read_json;
use super::{Check, Mismatch};
use crate::evidence::{STARTUP_FILE, StartupRecord};
use crate::plan::Plan;

pub const NAME: &str = "setup randomization: each server's environment pad";
const PAD: &str = "HARNESS_SETUP_PAD";

fn pad_len(seed: u64, block: u32, arm: &str) -> usize {
    let mut h = Sha256::new();
    h.update(b"harness/setup/v1\0");
    h.update(seed.to_le_bytes());
    h.update(block.to_le_bytes());
    h.update(arm.as_bytes());
    let d = h.finalize();
    (u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]) % 4096) as usize
}

pub fn check(root: &Path, plan: &Plan) -> Option<Check> {
    let mut m = Vec::new();
    let mut checked = 0;
    let mut any_pad = false;
    for b in 0..plan.blocks.count + plan.blocks.descriptive {
        for arm in &plan.arms {
            let rel = format!("{}/{STARTUP_FILE}", crate::evidence::unit_path(b, &arm.name));
            let Ok(v) = read_json::<StartupRecord>(root, &rel) else { continue };
            if v.kind != "spawn" {
                continue;
            }
            checked += 1;
            let got = v.env.as_ref().and_then(|e| e.get(PAD)).map(String::as_str);
            any_pad |= got.is_some();
            let want = plan.blocks.randomize_setup.then(|| pad_len(plan.study.seed, b, &arm.name));
            let ok = match (got, want) {
                (Some(p), Some(n)) => p.len() == n && p.bytes().all(|c| c == b'x'),
                (None, None) => true,
                _ => false,
            };
            if !ok {
                let shown = got.map_or("absent".to_string(), |p| format!("{} bytes", p.len()));
                let wanted = want.map_or("absent (blocks.randomize_setup is false)".to_string(), |n| format!("{n} x"));
                m.push(Mismatch::new(rel, format!("env.{PAD}"), shown, wanted));
            }
        }
    }
    if !plan.blocks.randomize_setup && !any_pad {
        return None;
    }
    Some(Check::of(NAME, format!("{checked} spawned servers"), m))
}
