//! The unpooled matrix: one row per scheduled (block, arm, cell), with the study's
//! name and plan hash (so matrices of several studies concatenate), the arm's key
//! settings (`argv: ...` or `url: ...`, the plan's template), every per-cell measure
//! of `CellSummary` (`metrics::FIELDS`, the field catalogue, in struct order), the spread columns
//! (`spread::SPREAD_COLUMNS`: mean lengths; p90, sd, min, max of TTFT, TPOT, ITL,
//! E2E), the cell's load, the server invocation's status and one `failed_<class>`
//! column per failure class seen in the study. Rows for cells that never ran (their
//! server was down) are kept with empty measures. Built as a polars `DataFrame` and
//! written as `matrix.csv` and `matrix.parquet` (uncompressed, one row group:
//! byte-identical on every rebuild).
//!
//! Types are the same whichever file a reader opens: every integer column is Int64,
//! every other number Float64, text String; a numeric column with no value in any
//! row (e.g. `concurrency` in a study without closed-loop cells) is Float64 in both
//! files, written as `NaN` in every CSV cell (an empty CSV column reads as text) and
//! as nulls in Parquet. Owns the column names. Must not aggregate rows.

use std::collections::BTreeSet;

use polars::prelude::{Column, DataFrame, DataType};
use polars_io::SerWriter;
use polars_io::csv::write::CsvWriter;
use polars_io::parquet::write::{ParquetCompression, ParquetWriter};

use super::ReportError;
use crate::analysis::spread::{SPREAD_COLUMNS, Spread};
use crate::analysis::study::Loaded;
use crate::evidence::{RowStatus, UnitState};
use crate::metrics::CellSummary;
use crate::metrics::{FIELDS, Getter};
use crate::plan::{Arm, Arrival, ResolvedCell, ResolvedLoad, Server};

fn polars_err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Matrix(e.to_string())
}

/// One matrix row before it becomes columns.
struct Row<'a> {
    block: u32,
    arm: &'a str,
    role: &'a str,
    settings: String,
    cell: &'a str,
    kind: &'a str,
    load: String,
    rate: Option<f64>,
    concurrency: Option<u32>,
    unit_status: UnitState,
    status: RowStatus,
    error: Option<&'a str>,
    summary: Option<&'a CellSummary>,
    spread: Option<&'a Spread>,
}

/// The arm's key settings as the matrix shows them: its argv template or its URL.
pub fn arm_settings(arm: &Arm) -> String {
    match &arm.server {
        Server::Spawn { argv, .. } => format!("argv: {}", argv.join(" ")),
        Server::External { url } => format!("url: {url}"),
    }
}

fn load_text(rc: &ResolvedCell) -> (String, Option<f64>, Option<u32>) {
    let (label, rate, concurrency) = match rc.load {
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
    };
    (format!("{label}{}", rc.cap_note()), rate, concurrency.or(rc.max_concurrency))
}

/// How the matrix's `load` column (and `harness bench`) describes a cell's load.
pub fn load_label(rc: &ResolvedCell) -> String {
    load_text(rc).0
}

fn rows(l: &Loaded) -> Vec<Row<'_>> {
    let plan = &l.frozen.plan;
    let mut out = Vec::new();
    for block in &l.schedule.blocks {
        for arm in &block.arms {
            let role = plan.arm(arm).map_or("", |a| a.role.as_str());
            let settings = plan.arm(arm).map(arm_settings).unwrap_or_default();
            let unit = l.units.iter().find(|u| u.status.block == block.index && &u.status.arm == arm);
            for cell in &block.cells {
                let Some(rc) = l.resolved.iter().find(|c| &c.name == cell) else { continue };
                let (load, rate, concurrency) = load_text(rc);
                let data = l.cells.iter().find(|c| c.block == block.index && &c.arm == arm && &c.cell == cell);
                let (status, error, summary) = match data.map(|d| &d.summary) {
                    None => (RowStatus::NotRun, None, None),
                    Some(Ok(s)) => (RowStatus::Measured, None, Some(s)),
                    Some(Err(e)) => (RowStatus::NoSummary, Some(e.as_str()), None),
                };
                let spread = data.filter(|_| summary.is_some()).map(|d| &d.spread);
                out.push(Row {
                    block: block.index,
                    arm,
                    role,
                    settings: settings.clone(),
                    cell,
                    kind: rc.kind.as_str(),
                    load,
                    rate,
                    concurrency,
                    unit_status: unit.map_or(UnitState::Missing, |u| u.status.status),
                    status,
                    error,
                    summary,
                    spread,
                });
            }
        }
    }
    out
}

fn text_col(name: &str, values: Vec<String>) -> Column {
    Column::new(name.into(), values)
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A numeric column with no value in any row becomes Float64 (see the module doc).
fn typed(col: Column) -> Result<Column, ReportError> {
    let all_null = !col.is_empty() && col.null_count() == col.len();
    if all_null && col.dtype().is_integer() { col.cast(&DataType::Float64).map_err(polars_err) } else { Ok(col) }
}

/// The matrix as a `DataFrame` (see the module doc for its rows and columns).
pub fn dataframe(l: &Loaded) -> Result<DataFrame, ReportError> {
    let rows = rows(l);
    let n = rows.len();
    let mut cols = vec![
        text_col("study", vec![l.frozen.plan.study.name.clone(); n]),
        text_col("plan_sha256", vec![l.frozen.sha256.clone(); n]),
        Column::new("block".into(), rows.iter().map(|r| i64::from(r.block)).collect::<Vec<i64>>()),
        text_col("arm", rows.iter().map(|r| r.arm.to_string()).collect()),
        text_col("role", rows.iter().map(|r| r.role.to_string()).collect()),
        text_col("arm_settings", rows.iter().map(|r| r.settings.clone()).collect()),
        text_col("cell", rows.iter().map(|r| r.cell.to_string()).collect()),
        text_col("kind", rows.iter().map(|r| r.kind.to_string()).collect()),
        text_col("load", rows.iter().map(|r| r.load.clone()).collect()),
        Column::new("offered_rate_rps".into(), rows.iter().map(|r| r.rate).collect::<Vec<Option<f64>>>()),
        Column::new(
            "concurrency".into(),
            rows.iter().map(|r| r.concurrency.map(i64::from)).collect::<Vec<Option<i64>>>(),
        ),
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
    let ints = |f: &dyn Fn(&Row<'_>) -> Option<u64>| rows.iter().map(|r| f(r).map(int)).collect::<Vec<Option<i64>>>();
    for &(name, getter) in FIELDS {
        let col = match getter {
            Getter::Count(f) => Column::new(name.into(), ints(&|r| r.summary.map(f))),
            Getter::Value(f) => {
                Column::new(name.into(), rows.iter().map(|r| r.summary.map(f)).collect::<Vec<Option<f64>>>())
            }
            Getter::Maybe(f) => {
                Column::new(name.into(), rows.iter().map(|r| r.summary.and_then(f)).collect::<Vec<Option<f64>>>())
            }
            Getter::MaybeCount(f) => Column::new(name.into(), ints(&|r| r.summary.and_then(f))),
        };
        cols.push(col);
    }
    for (i, name) in SPREAD_COLUMNS.iter().enumerate() {
        let values: Vec<Option<f64>> = rows.iter().map(|r| r.spread.and_then(|s| s.values()[i])).collect();
        cols.push(Column::new((*name).into(), values));
    }
    let classes: BTreeSet<&String> =
        rows.iter().filter_map(|r| r.summary).flat_map(|s| s.failed_by_class.keys()).collect();
    for class in classes {
        let values = ints(&|r| r.summary.map(|s| s.failed_by_class.get(class).copied().unwrap_or(0)));
        cols.push(Column::new(format!("failed_{class}").into(), values));
    }
    let cols = cols.into_iter().map(typed).collect::<Result<Vec<_>, _>>()?;
    DataFrame::new(n, cols).map_err(polars_err)
}

/// `matrix.csv` bytes.
pub fn csv_bytes(df: &mut DataFrame) -> Result<Vec<u8>, ReportError> {
    // A float column with no value in any row: NaN in every cell, so that CSV
    // readers type it as a number (an empty column reads as text).
    let height = df.height();
    let cols: Vec<Column> = df
        .columns()
        .iter()
        .map(|c| {
            if height > 0 && c.null_count() == height && c.dtype() == &DataType::Float64 {
                Column::new(c.name().clone(), vec![f64::NAN; height])
            } else {
                c.clone()
            }
        })
        .collect();
    let mut csv = DataFrame::new(height, cols).map_err(polars_err)?;
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf).include_header(true).finish(&mut csv).map_err(polars_err)?;
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

#[cfg(test)]
mod tests {
    use polars_io::SerReader;
    use polars_io::csv::read::CsvReadOptions;
    use polars_io::parquet::read::ParquetReader;

    use super::*;

    #[test]
    fn csv_and_parquet_read_back_with_the_same_types_all_null_columns_included() {
        let cols = [
            Column::new("count".into(), vec![Some(3i64), None]),
            Column::new("no_count".into(), vec![None::<i64>, None]),
            Column::new("no_value".into(), vec![None::<f64>, None]),
            Column::new("value".into(), vec![Some(1.5f64), None]),
            Column::new("note".into(), vec![None::<String>, Some("x".into())]),
        ];
        let cols = cols.into_iter().map(typed).collect::<Result<Vec<_>, _>>().unwrap();
        let mut df = DataFrame::new(2, cols).unwrap();
        let csv = csv_bytes(&mut df).unwrap();
        let parquet = parquet_bytes(&mut df).unwrap();
        let from_csv = CsvReadOptions::default()
            .with_has_header(true)
            .into_reader_with_file_handle(std::io::Cursor::new(csv.clone()))
            .finish()
            .unwrap();
        let from_parquet = ParquetReader::new(std::io::Cursor::new(parquet)).finish().unwrap();
        assert_eq!(from_csv.schema(), from_parquet.schema(), "{}", String::from_utf8_lossy(&csv));
        let dtypes: Vec<DataType> = from_parquet.dtypes();
        assert_eq!(
            dtypes,
            [DataType::Int64, DataType::Float64, DataType::Float64, DataType::Float64, DataType::String]
        );
        assert_eq!(from_parquet.column("no_value").unwrap().null_count(), 2, "nulls in Parquet");
        assert!(String::from_utf8_lossy(&csv).contains("3,NaN,NaN,1.5,"), "{}", String::from_utf8_lossy(&csv));
    }
}
