//! Validation of cells, hypotheses and the `[derive]` table (see `validate` for the
//! rest). Owns the rules that tie cells to loads, derived references, counts and
//! retries, and hypotheses to arms and confirmation cells. Must not touch files.

use super::derive::{CountRule, DeriveSpec, DerivedLoads, MAX_REQUESTS, compute};
use super::schema::{AnalysisFile, CellFile, DeriveFile, HypothesisFile, NumOrRef, OneOrMany};
use super::types::{Arm, ArmRole, Arrival, Cell, CellKind, Count, Endpoint, Hypothesis, Load, Metric, PanelSpec, Rate};
use super::validate::Checker;

/// The validated `[derive]` table and, when its formula applies, its output.
pub(super) type Derive = (DeriveSpec, Option<DerivedLoads>);

/// With `in_study_pilots` (`[pilots]`), `pilot_rates` must be absent and the formula
/// waits for the pilots (no output yet).
pub(super) fn derive(c: &mut Checker, d: Option<DeriveFile>, in_study_pilots: bool) -> Option<Derive> {
    let d = d?;
    let before = c.issues.len();
    let pilot_rates = match (d.pilot_rates, in_study_pilots) {
        (Some(_), true) => {
            c.err(
                "derive.pilot_rates",
                "the plan has [pilots]: its pilot rates are measured inside the study; remove pilot_rates \
                 (or remove [pilots] to use hand-written rates)",
            );
            Vec::new()
        }
        (None, true) => Vec::new(),
        (Some(rates), false) => rates,
        (None, false) => {
            c.err("derive.pilot_rates", "required (the pilot rates), unless the plan declares [pilots]");
            Vec::new()
        }
    };
    if pilot_rates.is_empty() && !in_study_pilots && c.issues.len() == before {
        c.err("derive.pilot_rates", "must list at least one pilot rate");
    }
    for (i, &r) in pilot_rates.iter().enumerate() {
        c.rate(&format!("derive.pilot_rates[{i}]"), r);
    }
    if !(d.near_fraction.is_finite() && d.near_fraction > 0.0 && d.near_fraction <= 1.0) {
        c.err("derive.near_fraction", format!("must be in (0, 1], got {}", d.near_fraction));
    }
    for (name, &f) in &d.fractions {
        let key = format!("derive.fractions.{name}");
        c.name(&key, name);
        if name == "near" || name == "count" {
            c.err(&key, "`near` and `count` are reserved names");
        }
        if !(f.is_finite() && f > 0.0 && f < 1.0) {
            c.err(&key, format!("must be in (0, 1), got {f}"));
        }
    }
    let count = match (d.count_floor, d.count_duration_s, d.count_multiple) {
        (None, None, None) => None,
        (Some(floor), Some(duration_s), Some(multiple)) => {
            let floor = c.int("derive.count_floor", floor, 1, MAX_REQUESTS as i64);
            let duration = c.seconds("derive.count_duration_s", duration_s, false);
            let multiple = c.int("derive.count_multiple", multiple, 1, 1 << 20);
            match (floor, duration, multiple) {
                (Some(floor), Some(duration_s), Some(multiple)) => Some(CountRule { floor, duration_s, multiple }),
                _ => None,
            }
        }
        _ => {
            c.err(
                "derive.count_floor",
                "count_floor, count_duration_s and count_multiple go together: set all or none",
            );
            None
        }
    };
    let spec = DeriveSpec { pilot_rates, near_fraction: d.near_fraction, fractions: d.fractions, count, note: d.note };
    let loads = if c.issues.len() == before && !in_study_pilots {
        compute(&spec).map_err(|issues| c.issues.extend(issues)).ok()
    } else {
        None
    };
    Some((spec, loads))
}

/// What a cell's own `endpoint` is judged against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Routes {
    /// `request.endpoint`: a cell's endpoint when it names none.
    pub default: Endpoint,
    /// The panel can be sent as chat messages (`PanelSource::has_chat_text`).
    pub chat_source: bool,
    /// A session panel (`prompts.max_turns`): chat only.
    pub session_panel: bool,
    /// `request.token_ids`: a cell's `token_ids` when it sets none.
    pub token_ids: bool,
}

/// A cell's `endpoint` (`key`), judged against the panel.
fn cell_endpoint(c: &mut Checker, key: &str, name: &str, v: Option<&str>, r: Routes) -> Endpoint {
    let e = super::validate::endpoint(c, key, v, r.default);
    if v.is_some() && e == Endpoint::Chat && !r.chat_source {
        c.err(key, format!("cell {name:?} sends chat messages: {}", super::validate::CHAT_SOURCES));
    }
    if v.is_some() && e == Endpoint::Completions && r.session_panel {
        c.err(
            key,
            format!(
                "cell {name:?}: a session panel (prompts.max_turns) sends chat history, so every cell must be on \
                 the chat endpoint (token IDs cannot carry replies)"
            ),
        );
    }
    e
}

pub(super) fn cells(
    c: &mut Checker,
    files: Vec<CellFile>,
    panel: &PanelSpec,
    derive: Option<&Derive>,
    routes: Routes,
) -> Vec<Cell> {
    if files.is_empty() {
        c.err("cells", "the plan needs at least one [[cells]] entry");
    }
    let mut out: Vec<Cell> = Vec::new();
    // The `[[cells]]` index of each cell in `out` (a sweep expands into several).
    let mut origin: Vec<usize> = Vec::new();
    for (i, f) in super::sweep::expand(c, files) {
        let k = format!("cells[{i}]");
        c.name(&format!("{k}.name"), &f.name);
        if let Some(first) = out.iter().position(|x| x.name == f.name) {
            c.err(format!("{k}.name"), format!("duplicate cell name {:?} (also cells[{}])", f.name, origin[first]));
        }
        origin.push(i);
        let load = load(c, &k, &f, derive);
        let count = match f.count {
            NumOrRef::Num(n) => c.int(&format!("{k}.count"), n, 1, MAX_REQUESTS as i64).map(Count::Fixed),
            NumOrRef::Ref(r) if r == "derived:count" => {
                if derive.is_none_or(|d| d.0.count.is_none()) {
                    c.err(
                        format!("{k}.count"),
                        "derived:count needs [derive] with count_floor, count_duration_s and count_multiple",
                    );
                }
                Some(Count::Derived)
            }
            NumOrRef::Ref(r) => {
                c.err(format!("{k}.count"), format!("{r:?}: use an integer or \"derived:count\""));
                None
            }
            NumOrRef::List(_) => {
                c.err(format!("{k}.count"), "one count per cell (only rate and concurrency sweep)");
                None
            }
        };
        let by_trace = f.load == "trace" && f.trace_lengths == Some(true);
        if by_trace && panel.max_turns.is_some() {
            c.err(
                format!("{k}.trace_lengths"),
                "a session panel (prompts.max_turns) sets each turn's output length; trace rows cannot",
            );
        }
        let input_tokens = match f.input_tokens {
            Some(_) if panel.source.is_dataset() => {
                c.err(format!("{k}.input_tokens"), "a dataset panel's entries have their own lengths; leave it out");
                None
            }
            None if panel.source.is_dataset() => None,
            Some(_) if by_trace => {
                c.err(
                    format!("{k}.input_tokens"),
                    "with trace_lengths = true the trace file sets each prompt's length",
                );
                None
            }
            // Not used: each request's length comes from its trace row.
            None if by_trace => panel.lengths.first().copied(),
            Some(l) => {
                let l = c.int(&format!("{k}.input_tokens"), l, 1, 1 << 24).unwrap_or(0) as u32;
                if l != 0 && !panel.lengths.contains(&l) {
                    c.err(
                        format!("{k}.input_tokens"),
                        format!("{l} is not one of prompts.lengths {:?}", panel.lengths),
                    );
                }
                Some(l)
            }
            None if panel.lengths.len() == 1 => Some(panel.lengths[0]),
            None => {
                c.err(format!("{k}.input_tokens"), "required when prompts.lengths lists several lengths");
                None
            }
        };
        let retries = c.int(&format!("{k}.retries"), f.retries.unwrap_or(0), 0, 100).unwrap_or(0) as u32;
        if f.kind == CellKind::Confirmation && retries != 0 {
            c.err(format!("{k}.retries"), format!("confirmation cells must have retries = 0, got {retries}"));
        }
        let recorder = super::validate_analysis::recorder(c, &k, f.recorder.as_deref(), f.kind);
        let endpoint = cell_endpoint(c, &format!("{k}.endpoint"), &f.name, f.endpoint.as_deref(), routes);
        let token_ids = f.token_ids.unwrap_or(routes.token_ids);
        let max_concurrency = match f.max_concurrency {
            Some(v) if matches!(f.load.as_str(), "open" | "constant" | "trace") => {
                c.int(&format!("{k}.max_concurrency"), v, 1, 1 << 20).map(|v| v as u32)
            }
            Some(_) => {
                let why =
                    if f.load == "closed" { "a closed loop's cap is its concurrency" } else { "one request at a time" };
                c.err(
                    format!("{k}.max_concurrency"),
                    format!("only open, constant and trace cells take this key (load = {:?}: {why})", f.load),
                );
                None
            }
            None => None,
        };
        if routes.session_panel && token_ids != routes.token_ids {
            c.err(
                format!("{k}.token_ids"),
                "a session panel's turns are built from [request]: set request.token_ids instead",
            );
        }
        // Invalid values are already reported; stand-ins keep the cell's name known
        // to hypotheses and orders, and never leave validation.
        out.push(Cell {
            name: f.name,
            kind: f.kind,
            load: load.unwrap_or(Load::Closed { concurrency: 1 }),
            count: count.unwrap_or(Count::Fixed(1)),
            input_tokens,
            retries,
            recorder,
            endpoint,
            token_ids,
            max_concurrency,
        });
    }
    out
}

fn load(c: &mut Checker, k: &str, f: &CellFile, derive: Option<&Derive>) -> Option<Load> {
    let only = |what: &str| format!("only {what} cells take this key (load = {:?})", f.load);
    let (open, closed, isolated) = (only("open-loop"), only("closed-loop"), only("isolated"));
    let key = |name: &str| format!("{k}.{name}");
    if f.load != "open" && f.load != "constant" {
        c.forbid(&key("rate"), &f.rate, &only("open-loop and constant"));
    }
    if f.load != "open" {
        c.forbid(&key("arrival"), &f.arrival, &open);
        c.forbid(&key("burstiness"), &f.burstiness, &open);
    }
    if f.load != "closed" {
        c.forbid(&key("concurrency"), &f.concurrency, &closed);
    }
    if f.load != "isolated" {
        c.forbid(&key("spacing_s"), &f.spacing_s, &isolated);
    }
    if f.load != "trace" {
        let trace = only("trace");
        c.forbid(&key("trace"), &f.trace, &trace);
        c.forbid(&key("time_scale"), &f.time_scale, &trace);
        c.forbid(&key("trace_lengths"), &f.trace_lengths, &trace);
    }
    match f.load.as_str() {
        "closed" => {
            let conc = match f.concurrency {
                Some(OneOrMany::One(conc)) => conc,
                // `sweep::expand` has made one cell per listed value.
                Some(OneOrMany::Many(_)) => return None,
                None => {
                    c.err(key("concurrency"), "required for a closed-loop cell");
                    return None;
                }
            };
            let concurrency = c.int(&key("concurrency"), conc, 1, 1 << 20)? as u32;
            Some(Load::Closed { concurrency })
        }
        "isolated" => {
            let Some(s) = f.spacing_s else {
                c.err(key("spacing_s"), "required for an isolated cell");
                return None;
            };
            let spacing_s = c.seconds(&key("spacing_s"), s, false)?;
            Some(Load::Isolated { spacing_s })
        }
        "trace" => super::validate_loads::trace_load(c, k, f),
        "constant" => Some(Load::Open { rate: rate(c, k, f, derive)?, arrival: Arrival::Constant }),
        "open" => {
            let rate = match &f.rate {
                None => {
                    c.err(key("rate"), "required for an open-loop cell");
                    None
                }
                Some(NumOrRef::Num(r)) => c.rate(&key("rate"), *r).map(Rate::Fixed),
                Some(NumOrRef::Ref(r)) => derived_rate(c, &key("rate"), r, derive),
                // `sweep::expand` has made one cell per listed value.
                Some(NumOrRef::List(_)) => None,
            };
            let arrival = match (f.arrival.as_deref().unwrap_or("poisson"), f.burstiness) {
                ("poisson", None) => Some(Arrival::Poisson),
                ("poisson", Some(_)) => {
                    c.err(key("burstiness"), "only gamma arrivals take a burstiness (arrival = \"gamma\")");
                    None
                }
                ("gamma", Some(b)) => {
                    c.positive(&key("burstiness"), b, false).map(|burstiness| Arrival::Gamma { burstiness })
                }
                ("gamma", None) => {
                    c.err(key("burstiness"), "required for gamma arrivals");
                    None
                }
                (other, _) => {
                    c.err(key("arrival"), format!("unknown arrival {other:?} (use \"poisson\" or \"gamma\")"));
                    None
                }
            };
            Some(Load::Open { rate: rate?, arrival: arrival? })
        }
        other => {
            c.err(
                key("load"),
                format!("unknown load {other:?} (use \"closed\", \"open\", \"constant\", \"isolated\" or \"trace\")"),
            );
            None
        }
    }
}

/// The `rate` of a constant-rate cell (required).
fn rate(c: &mut Checker, k: &str, f: &CellFile, derive: Option<&Derive>) -> Option<Rate> {
    let key = format!("{k}.rate");
    match &f.rate {
        None => {
            c.err(&key, format!("required for a {} cell", f.load));
            None
        }
        Some(NumOrRef::Num(r)) => c.rate(&key, *r).map(Rate::Fixed),
        Some(NumOrRef::Ref(r)) => derived_rate(c, &key, r, derive),
        Some(NumOrRef::List(_)) => None,
    }
}

fn derived_rate(c: &mut Checker, key: &str, r: &str, derive: Option<&Derive>) -> Option<Rate> {
    let Some(name) = r.strip_prefix("derived:") else {
        c.err(key, format!("{r:?}: use a number or \"derived:<load>\""));
        return None;
    };
    let Some((spec, _)) = derive else {
        c.err(key, format!("refers to {r:?} but the plan has no [derive] table"));
        return None;
    };
    if name != "near" && !spec.fractions.contains_key(name) {
        let mut known: Vec<&str> = vec!["near"];
        known.extend(spec.fractions.keys().map(String::as_str));
        c.err(key, format!("{r:?} is not a derived load (known: {known:?})"));
        return None;
    }
    Some(Rate::Derived(name.to_string()))
}

pub(super) fn hypotheses(
    c: &mut Checker,
    analysis: Option<AnalysisFile>,
    files: Vec<HypothesisFile>,
    arms: &[Arm],
    cells: &[Cell],
) -> (Option<f64>, Vec<Hypothesis>) {
    let alpha = analysis.map(|a| a.alpha);
    match alpha {
        Some(a) if !(a.is_finite() && a > 0.0 && a < 1.0) => {
            c.err("analysis.alpha", format!("must be in (0, 1), got {a}"));
        }
        None if !files.is_empty() => c.err("analysis.alpha", "required when the plan states hypotheses"),
        _ => {}
    }
    let mut out: Vec<Hypothesis> = Vec::new();
    for (i, h) in files.into_iter().enumerate() {
        let k = format!("hypotheses[{i}]");
        let name =
            h.name.unwrap_or_else(|| format!("{}:{}:{}-vs-{}", h.metric.as_str(), h.cell, h.candidate, h.control));
        if let Some(first) = out.iter().position(|x| x.name == name) {
            c.err(format!("{k}.name"), format!("duplicate hypothesis {name:?} (also hypotheses[{first}])"));
        }
        match cells.iter().find(|x| x.name == h.cell) {
            None => c.err(format!("{k}.cell"), format!("unknown cell {:?}", h.cell)),
            Some(cell) if cell.kind != CellKind::Confirmation => c.err(
                format!("{k}.cell"),
                format!("{:?} is a descriptive cell; hypotheses test confirmation cells", h.cell),
            ),
            Some(_) => {}
        }
        for (field, arm, role) in
            [("candidate", &h.candidate, ArmRole::Candidate), ("control", &h.control, ArmRole::Control)]
        {
            match arms.iter().find(|a| &a.name == arm) {
                None => c.err(format!("{k}.{field}"), format!("unknown arm {arm:?}")),
                Some(a) if a.role != role => {
                    c.err(format!("{k}.{field}"), format!("arm {arm:?} has role {}, not {field}", a.role.as_str()))
                }
                Some(a) if h.metric == Metric::EngineTpot && a.receipts.is_none() => c.err(
                    format!("{k}.metric"),
                    format!("engine_tpot is measured from the server's receipts, and arm {arm:?} has no `receipts`"),
                ),
                Some(_) => {}
            }
        }
        if h.candidate == h.control {
            c.err(&k, format!("candidate and control are the same arm {:?}", h.candidate));
        }
        if !(h.threshold.is_finite() && (0.0..1.0).contains(&h.threshold)) {
            c.err(format!("{k}.threshold"), format!("must be in [0, 1) (a fraction: 0.01 = 1%), got {}", h.threshold));
        }
        out.push(Hypothesis {
            name,
            metric: h.metric,
            cell: h.cell,
            candidate: h.candidate,
            control: h.control,
            threshold: h.threshold,
        });
    }
    (alpha, out)
}
