//! Per-step receipts (`--receipts FILE`): one JSON line per scheduler step, so
//! a study can prove what the scheduler did. Each line is flushed when written.

use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct Receipt {
    pub step: u64,
    /// Monotonic nanoseconds since server start.
    pub t_ns: u64,
    /// Request ids admitted for the first time in this step.
    pub admitted: Vec<String>,
    /// Request ids re-admitted after a preemption.
    pub resumed: Vec<String>,
    pub preempted: Vec<String>,
    pub finished: Vec<String>,
    /// `finish_reason` of each `finished` entry, in order (stop, length, error).
    pub finish_reasons: Vec<&'static str>,
    /// Sequences computed in this step.
    pub scheduled: usize,
    pub prefill_tokens: usize,
    /// Prompt tokens of this step's admissions found in the prefix cache.
    pub prefix_hit_tokens: usize,
    pub decode_tokens: usize,
    pub running: usize,
    pub waiting: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
}

pub struct ReceiptWriter {
    out: BufWriter<File>,
}

impl ReceiptWriter {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(ReceiptWriter { out: BufWriter::new(File::create(path)?) })
    }

    pub fn write(&mut self, r: &Receipt) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, r)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}
