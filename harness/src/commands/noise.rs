//! `harness noise DIR`: where a finished study's variance sits (between blocks,
//! between servers, within a server), per cell group and measure. Owns the
//! command's flags and its optional JSON file; the decomposition is `noise`'s.

use std::path::PathBuf;

use crate::analysis::noise::{NoiseError, NoiseReport};
use crate::plan::Metric;

#[derive(Debug, Clone, clap::Args)]
pub struct NoiseArgs {
    /// The evidence directory of a finished study (e.g. reports/noise-cpu).
    pub dir: PathBuf,
    /// Measures to decompose (plan metric names).
    #[arg(long, value_delimiter = ',', default_values_t = ["throughput_rps".to_string(), "e2e_p95_intended".to_string()])]
    pub metrics: Vec<String>,
    /// Also write the decomposition as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Analyses the study at `args.dir` and writes the JSON when asked; `main.rs` prints.
pub fn run(args: &NoiseArgs) -> Result<NoiseReport, NoiseError> {
    let metrics = args
        .metrics
        .iter()
        .map(|m| {
            Metric::ALL.iter().copied().find(|x| x.as_str() == m).ok_or_else(|| {
                NoiseError::Metric(m.clone(), Metric::ALL.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(", "))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let report = crate::analysis::noise::analyse(&args.dir, &metrics)?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        crate::evidence::write_atomic(path, text.as_bytes())
            .map_err(|e| NoiseError::Write { path: path.clone(), message: e.to_string() })?;
    }
    Ok(report)
}
