//! The per-request table: one row per request record of the study (every
//! `raw/b<block>/<arm>/<cell>.requests.jsonl`, in schedule order, records in file
//! order), with the study, plan hash, block, arm, cell, status and failure class,
//! token counts, each request's own measures in ms, its interleaved round, its
//! study-clock stamps in ns (intended, dispatch, send, first token-bearing event,
//! `[DONE]`; since the start of the session that ran it, `run.json` `sessions`), the
//! finish reason, and the session with the same four stamps as wall time (ms since
//! the Unix epoch: the session's `started_unix_ms` plus the stamp; the session
//! reads the wall clock just before it starts its study clock, so within a
//! millisecond), so a time series plots straight from it, written as
//! `results/requests.csv` and `results/requests.parquet` (AIPerf's profile export is
//! the peer). The measures come from `metrics::measure_request` (the definitions of
//! DESIGN section 5); the ITL summary is over that request's gaps between
//! token-bearing events (mean, nearest-rank p50, max). Every integer column is
//! Int64 and every measure Float64, so a CSV reader's inference and the Parquet
//! schema agree. Owns the column names. Must not aggregate across requests.

use std::path::Path;

use polars::prelude::{Column, DataFrame};

use super::ReportError;
use crate::analysis::study::{Loaded, read_records};
use crate::evidence::request_record::RequestRecord;
use crate::evidence::{Evidence, REQUESTS_CSV_FILE, REQUESTS_PARQUET_FILE, RequestStatus, write_bytes};
use crate::metrics::{INCOMPLETE_CLASS, RequestMeasures, measure_request};
use crate::stats::percentile_u64;

/// The columns, in order.
pub const COLUMNS: [&str; 35] = [
    "study",
    "plan_sha256",
    "block",
    "arm",
    "cell",
    "index",
    "id",
    "status",
    "failure_class",
    "http_status",
    "input_tokens_intended",
    "output_tokens_intended",
    "input_tokens",
    "output_tokens",
    "ttft_ms",
    "ttft_from_intended_ms",
    "tpot_ms",
    "e2e_ms",
    "e2e_from_intended_ms",
    "itl_samples",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_max_ms",
    "round",
    "intended_ns",
    "dispatch_ns",
    "send_ns",
    "first_token_ns",
    "done_ns",
    "finish_reason",
    "session",
    "intended_unix_ms",
    "send_unix_ms",
    "first_token_unix_ms",
    "done_unix_ms",
];

/// One row before it becomes columns.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRow {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub index: u64,
    pub id: String,
    pub status: RequestStatus,
    pub failure_class: Option<String>,
    pub http_status: Option<u16>,
    pub input_tokens_intended: u32,
    pub output_tokens_intended: u32,
    pub measures: Option<RequestMeasures>,
    /// The interleaved round that sent it (`None`, written 0: a block that is not
    /// interleaved runs each cell in one round).
    pub round: Option<u32>,
    /// Study-clock stamps (ns since the session's start): intended arrival,
    /// dispatch, HTTP send, first token-bearing event, `[DONE]`.
    pub intended_ns: u64,
    pub dispatch_ns: Option<u64>,
    pub send_ns: Option<u64>,
    pub first_token_ns: Option<u64>,
    pub done_ns: Option<u64>,
    pub finish_reason: Option<String>,
    /// The session that ran it and that session's wall-clock start (ms since the
    /// Unix epoch), when recorded.
    pub session: Option<u32>,
    pub session_started_unix_ms: Option<u64>,
}

impl RequestRow {
    pub fn of(r: &RequestRecord) -> RequestRow {
        let (status, failure_class, measures) = if r.is_valid() {
            match measure_request(r) {
                Ok(m) => (RequestStatus::Ok, None, Some(m)),
                Err(_) => (RequestStatus::Unmeasurable, None, None),
            }
        } else {
            let class = r.failure.as_ref().map_or(INCOMPLETE_CLASS, |f| f.class());
            (RequestStatus::Failed, Some(class.to_string()), None)
        };
        RequestRow {
            block: r.block,
            arm: r.arm.clone(),
            cell: r.cell.clone(),
            index: r.index,
            id: r.id.clone(),
            status,
            failure_class,
            http_status: r.status,
            input_tokens_intended: r.prompt_tokens_intended,
            output_tokens_intended: r.output_tokens_intended,
            measures,
            round: r.round,
            intended_ns: r.intended_ns,
            dispatch_ns: r.dispatch_ns,
            send_ns: r.send_ns,
            first_token_ns: r.events.iter().find(|e| e.tokens > 0).map(|e| e.t_ns),
            done_ns: r.done_ns,
            finish_reason: r.finish_reason.clone(),
            session: None,
            session_started_unix_ms: None,
        }
    }

    /// A study-clock stamp as wall time (ms since the Unix epoch).
    fn unix_ms(&self, ns: Option<u64>) -> Option<f64> {
        Some(self.session_started_unix_ms? as f64 + ns? as f64 / 1e6)
    }

    fn ms(&self, f: impl Fn(&RequestMeasures) -> Option<f64>) -> Option<f64> {
        self.measures.as_ref().and_then(f).map(|ns| ns / 1e6)
    }

    fn itl(&self) -> (Option<i64>, Option<f64>, Option<f64>, Option<f64>) {
        let Some(m) = &self.measures else { return (None, None, None, None) };
        let gaps = &m.gaps_ns;
        let n = i64::try_from(gaps.len()).unwrap_or(i64::MAX);
        if gaps.is_empty() {
            return (Some(n), None, None, None);
        }
        let mean = gaps.iter().map(|&g| g as f64).sum::<f64>() / gaps.len() as f64 / 1e6;
        let p50 = percentile_u64(gaps, 50.0).ok().map(|g| g as f64 / 1e6);
        let max = gaps.iter().max().map(|&g| g as f64 / 1e6);
        (Some(n), Some(mean), p50, max)
    }
}

/// Every request record of the study in `root`, in schedule order.
pub fn read_rows(root: &Path, l: &Loaded) -> Result<Vec<RequestRow>, ReportError> {
    let ev = Evidence::open(root);
    let mut rows = Vec::new();
    for block in &l.schedule.blocks {
        for arm in &block.arms {
            for cell in &block.cells {
                let path = ev.requests_path(block.index, arm, cell);
                if path.is_file() {
                    let session = l
                        .units
                        .iter()
                        .find(|u| u.status.block == block.index && u.status.arm == *arm)
                        .and_then(|u| u.session);
                    let started = session.and_then(|i| l.sessions.get(i as usize)).and_then(|s| s.started_unix_ms);
                    rows.extend(read_records(&path)?.iter().map(|r| RequestRow {
                        session,
                        session_started_unix_ms: started,
                        ..RequestRow::of(r)
                    }));
                }
            }
        }
    }
    Ok(rows)
}

/// Writes `results/requests.csv` and `results/requests.parquet`; returns their
/// paths relative to `root`.
pub fn write(root: &Path, l: &Loaded) -> Result<[String; 2], ReportError> {
    let rows = read_rows(root, l)?;
    let mut df = dataframe(&l.frozen.plan.study.name, &l.frozen.sha256, &rows)?;
    write_bytes(&root.join(REQUESTS_CSV_FILE), &super::matrix::csv_bytes(&mut df)?)?;
    write_bytes(&root.join(REQUESTS_PARQUET_FILE), &super::matrix::parquet_bytes(&mut df)?)?;
    Ok([REQUESTS_CSV_FILE.to_string(), REQUESTS_PARQUET_FILE.to_string()])
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The table of `rows` for the study `study` whose plan hash is `plan_sha256`.
pub fn dataframe(study: &str, plan_sha256: &str, rows: &[RequestRow]) -> Result<DataFrame, ReportError> {
    let text = |name: &str, f: &dyn Fn(&RequestRow) -> String| {
        Column::new(name.into(), rows.iter().map(f).collect::<Vec<String>>())
    };
    let opt_text = |name: &str, f: &dyn Fn(&RequestRow) -> Option<String>| {
        Column::new(name.into(), rows.iter().map(f).collect::<Vec<Option<String>>>())
    };
    let ints = |name: &str, f: &dyn Fn(&RequestRow) -> Option<i64>| {
        Column::new(name.into(), rows.iter().map(f).collect::<Vec<Option<i64>>>())
    };
    let floats = |name: &str, f: &dyn Fn(&RequestRow) -> Option<f64>| {
        Column::new(name.into(), rows.iter().map(f).collect::<Vec<Option<f64>>>())
    };
    let cols = vec![
        text("study", &|_| study.to_string()),
        text("plan_sha256", &|_| plan_sha256.to_string()),
        ints("block", &|r| Some(i64::from(r.block))),
        text("arm", &|r| r.arm.clone()),
        text("cell", &|r| r.cell.clone()),
        ints("index", &|r| Some(int(r.index))),
        text("id", &|r| r.id.clone()),
        text("status", &|r| r.status.to_string()),
        opt_text("failure_class", &|r| r.failure_class.clone()),
        ints("http_status", &|r| r.http_status.map(i64::from)),
        ints("input_tokens_intended", &|r| Some(i64::from(r.input_tokens_intended))),
        ints("output_tokens_intended", &|r| Some(i64::from(r.output_tokens_intended))),
        ints("input_tokens", &|r| r.measures.as_ref().map(|m| int(m.prompt_tokens))),
        ints("output_tokens", &|r| r.measures.as_ref().map(|m| int(m.output_tokens))),
        floats("ttft_ms", &|r| r.ms(|m| m.ttft_ns.map(|v| v as f64))),
        floats("ttft_from_intended_ms", &|r| r.ms(|m| m.ttft_intended_ns.map(|v| v as f64))),
        floats("tpot_ms", &|r| r.ms(|m| m.tpot_ns)),
        floats("e2e_ms", &|r| r.ms(|m| Some(m.e2e_ns as f64))),
        floats("e2e_from_intended_ms", &|r| r.ms(|m| Some(m.e2e_intended_ns as f64))),
        ints("itl_samples", &|r| r.itl().0),
        floats("itl_mean_ms", &|r| r.itl().1),
        floats("itl_p50_ms", &|r| r.itl().2),
        floats("itl_max_ms", &|r| r.itl().3),
        ints("round", &|r| Some(i64::from(r.round.unwrap_or(0)))),
        ints("intended_ns", &|r| Some(int(r.intended_ns))),
        ints("dispatch_ns", &|r| r.dispatch_ns.map(int)),
        ints("send_ns", &|r| r.send_ns.map(int)),
        ints("first_token_ns", &|r| r.first_token_ns.map(int)),
        ints("done_ns", &|r| r.done_ns.map(int)),
        opt_text("finish_reason", &|r| r.finish_reason.clone()),
        ints("session", &|r| r.session.map(i64::from)),
        floats("intended_unix_ms", &|r| r.unix_ms(Some(r.intended_ns))),
        floats("send_unix_ms", &|r| r.unix_ms(r.send_ns)),
        floats("first_token_unix_ms", &|r| r.unix_ms(r.first_token_ns)),
        floats("done_unix_ms", &|r| r.unix_ms(r.done_ns)),
    ];
    debug_assert_eq!(cols.len(), COLUMNS.len());
    DataFrame::new(rows.len(), cols).map_err(|e| ReportError::Matrix(format!("requests table: {e}")))
}

#[cfg(test)]
mod tests {
    use polars::prelude::DataType;

    use super::*;
    use crate::evidence::request_record::{Failure, StreamEvent, Usage};

    /// A valid request sent at 1 ms (intended at 0) with token events at 11, 14, 20
    /// and 21 ms (one empty event at 12 ms), [DONE] at 25 ms, 4 output tokens.
    fn valid(index: u64) -> RequestRecord {
        let ev = |ms: u64, tokens: u32| StreamEvent { t_ns: ms * 1_000_000, tokens, token_ids: None, reasoning: 0 };
        RequestRecord {
            id: format!("r{index}"),
            cell: "c".into(),
            block: 1,
            arm: "a".into(),
            index,
            prompt: 0,
            prompt_tokens_intended: 16,
            output_tokens_intended: 4,
            intended_ns: 0,
            dispatch_ns: Some(500_000),
            admitted_ns: None,
            send_ns: Some(1_000_000),
            headers_ns: Some(5_000_000),
            events: vec![ev(11, 1), ev(12, 0), ev(14, 1), ev(20, 1), ev(21, 1)],
            done_ns: Some(25_000_000),
            status: Some(200),
            failure: None,
            usage: Some(Usage { prompt_tokens: 16, completion_tokens: 4, total_tokens: 20, reasoning_tokens: None }),
            finish_reason: Some("length".into()),
            server_request_id: None,
            light: false,
            turn: None,
            round: None,
        }
    }

    fn failed(index: u64) -> RequestRecord {
        let mut r = valid(index);
        r.events.clear();
        r.done_ns = None;
        r.usage = None;
        r.status = Some(401);
        r.failure = Some(Failure::HttpStatus { status: 401, body: "missing key".into() });
        r
    }

    #[test]
    fn one_row_per_request_with_its_own_measures_in_ms() {
        let rows: Vec<RequestRow> = [valid(0), failed(1)].iter().map(RequestRow::of).collect();
        let df = dataframe("s", "abc", &rows).unwrap();
        assert_eq!(df.get_column_names().iter().map(|c| c.as_str()).collect::<Vec<_>>(), COLUMNS);
        assert_eq!(df.height(), 2);
        let col = |name: &str| df.column(name).unwrap().as_materialized_series().clone();
        let f = |name: &str, row: usize| col(name).f64().unwrap().get(row);
        let i = |name: &str, row: usize| col(name).i64().unwrap().get(row);
        let s = |name: &str, row: usize| col(name).str().unwrap().get(row).map(str::to_string);
        assert_eq!((s("study", 0), s("plan_sha256", 1)), (Some("s".into()), Some("abc".into())));
        assert_eq!(
            (i("block", 0), i("index", 1), s("status", 0), s("status", 1)),
            (Some(1), Some(1), Some("ok".into()), Some("failed".into()))
        );
        assert_eq!(s("failure_class", 1).as_deref(), Some("http_status"));
        assert_eq!((i("http_status", 1), i("input_tokens", 0), i("output_tokens", 0)), (Some(401), Some(16), Some(4)));
        assert_eq!((i("input_tokens", 1), i("input_tokens_intended", 1)), (None, Some(16)));
        assert_eq!(f("ttft_ms", 0), Some(10.0));
        assert_eq!(f("ttft_from_intended_ms", 0), Some(11.0));
        // (21 - 11) / (4 - 1)
        assert_eq!(f("tpot_ms", 0), Some(10.0 / 3.0));
        assert_eq!((f("e2e_ms", 0), f("e2e_from_intended_ms", 0)), (Some(24.0), Some(25.0)));
        // Gaps between token-bearing events only: 3, 6, 1 ms.
        assert_eq!(i("itl_samples", 0), Some(3));
        assert_eq!(
            (f("itl_mean_ms", 0), f("itl_p50_ms", 0), f("itl_max_ms", 0)),
            (Some(10.0 / 3.0), Some(3.0), Some(6.0))
        );
        for name in ["ttft_ms", "tpot_ms", "e2e_ms", "itl_mean_ms"] {
            assert_eq!(f(name, 1), None, "{name} of a failed request");
        }
        for name in ["block", "index", "http_status", "input_tokens", "output_tokens", "itl_samples"] {
            assert_eq!(df.column(name).unwrap().dtype(), &DataType::Int64, "{name}");
        }
    }

    #[test]
    fn a_valid_request_with_timestamps_out_of_order_has_no_measures() {
        let mut r = valid(0);
        r.events[0].t_ns = 30_000_000;
        let row = RequestRow::of(&r);
        assert_eq!((row.status, row.measures.is_none()), (RequestStatus::Unmeasurable, true));
    }
}
