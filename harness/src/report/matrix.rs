//! The unpooled matrix: one row per scheduled (block, arm, cell), with every per-cell
//! measure of `CellSummary` (`fields::FIELDS`, in struct order), the cell's load, the
//! server invocation's status and one `failed_<class>` column per failure class seen
//! in the study. Rows for cells that never ran (their server was down) are kept with
//! empty measures. Built as a polars `DataFrame` and written as `matrix.csv` and
//! `matrix.parquet` (uncompressed, one row group: byte-identical on every rebuild).
//! Owns the column names. Must not aggregate rows.

use std::collections::BTreeSet;

use polars::prelude::{Column, DataFrame};
use polars_io::SerWriter;
use polars_io::csv::write::CsvWriter;
use polars_io::parquet::write::{ParquetCompression, ParquetWriter};

use super::ReportError;
use super::fields::{FIELDS, Getter};
use super::load::Loaded;
use crate::metrics::CellSummary;
use crate::plan::{Arrival, ResolvedLoad};

fn polars_err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Matrix(e.to_string())
}

/// One matrix row before it becomes columns.
struct Row<'a> {
    block: u32,
    arm: &'a str,
    role: &'a str,
    cell: &'a str,
    kind: &'a str,
    load: String,
    rate: Option<f64>,
    concurrency: Option<u32>,
    unit_status: &'a str,
    status: &'static str,
    error: Option<&'a str>,
    summary: Option<&'a CellSummary>,
}

fn load_text(load: ResolvedLoad) -> (String, Option<f64>, Option<u32>) {
    match load {
        ResolvedLoad::Closed { concurrency } => {
            (format!("closed-loop concurrency {concurrency}"), None, Some(concurrency))
        }
        ResolvedLoad::Open { rate_rps, arrival } => {
            let arrival = match arrival {
                Arrival::Poisson => "poisson".to_string(),
                Arrival::Constant => "constant".to_string(),
                Arrival::Gamma { burstiness } => format!("gamma burstiness {burstiness}"),
            };
            (format!("open-loop {rate_rps} req/s {arrival}"), Some(rate_rps), None)
        }
        ResolvedLoad::Isolated { spacing_ns } => (format!("isolated every {} s", spacing_ns as f64 / 1e9), None, None),
        ResolvedLoad::Trace { time_scale, .. } => (format!("trace file, time scale {time_scale}"), None, None),
    }
}

/// How the matrix's `load` column (and `harness bench`) describes a cell's load.
pub fn load_label(load: ResolvedLoad) -> String {
    load_text(load).0
}

fn rows(l: &Loaded) -> Vec<Row<'_>> {
    let plan = &l.frozen.plan;
    let mut out = Vec::new();
    for block in &l.schedule.blocks {
        for arm in &block.arms {
            let role = plan.arm(arm).map_or("", |a| a.role.as_str());
            let unit = l.units.iter().find(|u| u.status.block == block.index && &u.status.arm == arm);
            for cell in &block.cells {
                let Some(rc) = l.resolved.iter().find(|c| &c.name == cell) else { continue };
                let (load, rate, concurrency) = load_text(rc.load);
                let data = l.cells.iter().find(|c| c.block == block.index && &c.arm == arm && &c.cell == cell);
                let (status, error, summary) = match data.map(|d| &d.summary) {
                    None => ("not_run", None, None),
                    Some(Ok(s)) => ("measured", None, Some(s)),
                    Some(Err(e)) => ("no_summary", Some(e.as_str()), None),
                };
                out.push(Row {
                    block: block.index,
                    arm,
                    role,
                    cell,
                    kind: rc.kind.as_str(),
                    load,
                    rate,
                    concurrency,
                    unit_status: unit.map_or("missing", |u| u.status.status.as_str()),
                    status,
                    error,
                    summary,
                });
            }
        }
    }
    out
}

fn text_col(name: &str, values: Vec<String>) -> Column {
    Column::new(name.into(), values)
}

/// The matrix as a `DataFrame` (see the module doc for its rows and columns).
pub fn dataframe(l: &Loaded) -> Result<DataFrame, ReportError> {
    let rows = rows(l);
    let mut cols = vec![
        Column::new("block".into(), rows.iter().map(|r| r.block).collect::<Vec<u32>>()),
        text_col("arm", rows.iter().map(|r| r.arm.to_string()).collect()),
        text_col("role", rows.iter().map(|r| r.role.to_string()).collect()),
        text_col("cell", rows.iter().map(|r| r.cell.to_string()).collect()),
        text_col("kind", rows.iter().map(|r| r.kind.to_string()).collect()),
        text_col("load", rows.iter().map(|r| r.load.clone()).collect()),
        Column::new("offered_rate_rps".into(), rows.iter().map(|r| r.rate).collect::<Vec<Option<f64>>>()),
        Column::new("concurrency".into(), rows.iter().map(|r| r.concurrency).collect::<Vec<Option<u32>>>()),
        text_col("unit_status", rows.iter().map(|r| r.unit_status.to_string()).collect()),
        text_col("status", rows.iter().map(|r| r.status.to_string()).collect()),
        Column::new(
            "summary_error".into(),
            rows.iter().map(|r| r.error.map(str::to_string)).collect::<Vec<Option<String>>>(),
        ),
        Column::new(
            "percentile_method".into(),
            rows.iter().map(|r| r.summary.map(|s| s.percentile_method.clone())).collect::<Vec<Option<String>>>(),
        ),
    ];
    for &(name, getter) in FIELDS {
        let col = match getter {
            Getter::Count(f) => {
                Column::new(name.into(), rows.iter().map(|r| r.summary.map(f)).collect::<Vec<Option<u64>>>())
            }
            Getter::Value(f) => {
                Column::new(name.into(), rows.iter().map(|r| r.summary.map(f)).collect::<Vec<Option<f64>>>())
            }
            Getter::Maybe(f) => {
                Column::new(name.into(), rows.iter().map(|r| r.summary.and_then(f)).collect::<Vec<Option<f64>>>())
            }
            Getter::MaybeCount(f) => {
                Column::new(name.into(), rows.iter().map(|r| r.summary.and_then(f)).collect::<Vec<Option<u64>>>())
            }
        };
        cols.push(col);
    }
    let classes: BTreeSet<&String> =
        rows.iter().filter_map(|r| r.summary).flat_map(|s| s.failed_by_class.keys()).collect();
    for class in classes {
        let values: Vec<Option<u64>> =
            rows.iter().map(|r| r.summary.map(|s| s.failed_by_class.get(class).copied().unwrap_or(0))).collect();
        cols.push(Column::new(format!("failed_{class}").into(), values));
    }
    DataFrame::new(rows.len(), cols).map_err(polars_err)
}

/// `matrix.csv` bytes.
pub fn csv_bytes(df: &mut DataFrame) -> Result<Vec<u8>, ReportError> {
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf).include_header(true).finish(df).map_err(polars_err)?;
    Ok(buf)
}

/// `matrix.parquet` bytes.
pub fn parquet_bytes(df: &mut DataFrame) -> Result<Vec<u8>, ReportError> {
    let mut buf = Vec::new();
    ParquetWriter::new(&mut buf)
        .with_compression(ParquetCompression::Uncompressed)
        .with_row_group_size(None)
        .set_parallel(false)
        .finish(df)
        .map_err(polars_err)?;
    Ok(buf)
}
