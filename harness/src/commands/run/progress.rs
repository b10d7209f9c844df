//! What a person watching a study sees: an indicatif bar over all planned requests
//! with the current block / arm / cell, requests sent, completed and failed, and the
//! elapsed time against the plan's estimate; or, with `--quiet` (CI), one plain line
//! per cell start and end. Must not influence the run: it only reads counters.

use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;

use crate::load::Counters;

pub struct Progress {
    bar: Option<ProgressBar>,
    /// Whether a finished cell's table is printed (never with `--quiet`).
    cell_tables: bool,
}

/// Refreshes the bar from one cell's counters until dropped.
pub struct CellTicker {
    task: Option<JoinHandle<()>>,
}

impl Drop for CellTicker {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

fn fmt_s(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

impl Progress {
    /// `total` planned requests; `expected_s` the plan's estimate when it has one.
    pub fn new(quiet: bool, total: u64, expected_s: Option<f64>) -> Progress {
        if quiet {
            return Progress { bar: None, cell_tables: false };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let expected = expected_s.map_or("expected n/a".to_string(), |s| format!("expected ~{}", fmt_s(s)));
        let template = "{elapsed_precise} ({prefix}) [{bar:30}] {pos}/{len} requests  {msg}";
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(expected);
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar: Some(bar), cell_tables: true }
    }

    /// Leaves out the per-cell tables when `show` is false (`harness bench`).
    pub fn with_cell_tables(mut self, show: bool) -> Progress {
        self.cell_tables &= show;
        self
    }

    /// Whether each finished cell's table is printed.
    pub fn cell_tables(&self) -> bool {
        self.cell_tables
    }

    /// Prints a line above the bar (or plainly when there is no visible bar).
    pub fn println(&self, text: &str) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.println(text),
            _ => println!("{text}"),
        }
    }

    /// Prints to stderr, above the bar when one is shown (what a fault explains).
    pub fn eprintln(&self, text: &str) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.suspend(|| eprintln!("{text}")),
            _ => eprintln!("{text}"),
        }
    }

    pub fn quiet(&self) -> bool {
        self.bar.is_none()
    }

    /// A note while no cell runs (server start, warmup, stop).
    pub fn status(&self, label: &str, what: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(format!("{label}: {what}")),
            None => println!("{label}: {what}"),
        }
    }

    /// Starts showing one cell; `done_before` requests of earlier cells are finished.
    pub fn cell(&self, label: String, counters: Arc<Counters>, done_before: u64) -> CellTicker {
        let Some(bar) = self.bar.clone() else {
            println!("{label}: start");
            return CellTicker { task: None };
        };
        let task = tokio::spawn(async move {
            loop {
                let (sent, ok, failed) = counters.snapshot();
                bar.set_position(done_before + ok + failed);
                bar.set_message(format!("{label}: sent {sent}, completed {ok}, failed {failed}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        CellTicker { task: Some(task) }
    }

    /// Marks `done` requests finished in total.
    pub fn set_done(&self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
