//! `[executor]`: where a study's blocks run. `local` (the default) runs every
//! block in the `harness run` process, as always; `slurm` hands each block, all of
//! its arms on one node, to a Slurm array task (`commands::run::slurm`). Owns the
//! keys' spelling, their validation and defaults, and what a plan must not do when
//! its blocks leave the machine (`Plan::dispatch_problems`). Must not run Slurm's
//! commands or decide where anything runs.
//!
//! Every value that reaches the batch script (`partition`, `gres`, `mem`,
//! `time_limit`, `account`, `constraint`, `extra_sbatch`) is refused when it holds a
//! line break or a NUL; Slurm itself judges the rest (`sbatch --test-only`, before
//! anything is written).

use std::path::PathBuf;

use serde::Deserialize;

use super::Issue;
use super::types::{Plan, Server};
use super::validate::Checker;

/// `max_resubmits` when the plan does not set it.
pub const DEFAULT_MAX_RESUBMITS: u32 = 2;
/// `start_timeout_s` when the plan does not set it: an hour in the queue.
pub const DEFAULT_START_TIMEOUT_S: f64 = 3600.0;
/// `poll_interval_s` when the plan does not set it.
pub const DEFAULT_POLL_INTERVAL_S: f64 = 1.0;

/// Options of `extra_sbatch` that the harness sets itself (each task's block, its
/// log, the array's name and working directory) and a plan must not override.
const OWNED_OPTIONS: [&str; 7] = ["--array", "-a", "--output", "-o", "--error", "-e", "--job-name"];

/// `[executor]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorFile {
    pub kind: Option<String>,
    pub partition: Option<String>,
    pub gres: Option<String>,
    pub cpus_per_task: Option<i64>,
    pub mem: Option<String>,
    pub time_limit: Option<String>,
    pub account: Option<String>,
    pub constraint: Option<String>,
    pub max_parallel: Option<i64>,
    #[serde(default)]
    pub extra_sbatch: Vec<String>,
    pub shared_root: Option<String>,
    pub max_resubmits: Option<i64>,
    pub start_timeout_s: Option<f64>,
    pub ports_per_task: Option<i64>,
    pub poll_interval_s: Option<f64>,
}

/// Which executor runs the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecutorKind {
    /// In the `harness run` process (today's behaviour).
    #[default]
    Local,
    /// One Slurm array task per block.
    Slurm,
}

impl ExecutorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Slurm => "slurm",
        }
    }

    /// The spelling of `executor.kind` and `--executor`.
    pub fn parse(s: &str) -> Option<ExecutorKind> {
        match s {
            "local" => Some(ExecutorKind::Local),
            "slurm" => Some(ExecutorKind::Slurm),
            _ => None,
        }
    }
}

/// `[executor]`, validated (every key has its default when absent).
#[derive(Debug, Clone, PartialEq)]
pub struct Executor {
    pub kind: ExecutorKind,
    /// `sbatch --partition`; `None`: the cluster's default partition.
    pub partition: Option<String>,
    /// `sbatch --gres`, e.g. `gpu:1`.
    pub gres: Option<String>,
    /// `sbatch --cpus-per-task`; `None`: Slurm's default (1).
    pub cpus_per_task: Option<u32>,
    /// `sbatch --mem`, e.g. `16G`.
    pub mem: Option<String>,
    /// `sbatch --time`, Slurm's spelling (`30`, `1:00:00`, `1-00:00:00`).
    pub time_limit: Option<String>,
    pub account: Option<String>,
    pub constraint: Option<String>,
    /// Tasks of the array running at once (`--array=...%N`); `None`: no limit.
    pub max_parallel: Option<u32>,
    /// Further `#SBATCH` options, one argument each, written as given.
    pub extra_sbatch: Vec<String>,
    /// A directory every node sees, at the same path; the evidence directory must
    /// lie under it. Relative: against the working directory. `None`: the working
    /// directory.
    pub shared_root: Option<PathBuf>,
    /// Times a block whose task failed, timed out or was preempted is submitted
    /// again before the study stops.
    pub max_resubmits: u32,
    /// Seconds a task may wait in the queue before the study stops.
    pub start_timeout_s: f64,
    /// The width of each task's port range: block k's servers listen on their arm's
    /// `port + k * ports_per_task`. `None`: the span of the arms' ports.
    pub ports_per_task: Option<u16>,
    /// Seconds between two looks at the queue (`squeue`).
    pub poll_interval_s: f64,
}

impl Default for Executor {
    fn default() -> Executor {
        Executor {
            kind: ExecutorKind::Local,
            partition: None,
            gres: None,
            cpus_per_task: None,
            mem: None,
            time_limit: None,
            account: None,
            constraint: None,
            max_parallel: None,
            extra_sbatch: Vec::new(),
            shared_root: None,
            max_resubmits: DEFAULT_MAX_RESUBMITS,
            start_timeout_s: DEFAULT_START_TIMEOUT_S,
            ports_per_task: None,
            poll_interval_s: DEFAULT_POLL_INTERVAL_S,
        }
    }
}

/// A value bound for a `#SBATCH` line: one line, no NUL, not empty.
fn line(c: &mut Checker, key: &str, v: Option<String>) -> Option<String> {
    let v = v?;
    if v.trim().is_empty() {
        c.err(key, "must not be empty (leave the key out for Slurm's default)");
        return None;
    }
    if v.chars().any(|ch| ch == '\n' || ch == '\r' || ch == '\0') {
        c.err(key, "must be one line (it becomes an #SBATCH line of the batch script)");
        return None;
    }
    Some(v)
}

/// `sbatch --time`'s spellings: minutes, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`,
/// or `UNLIMITED` / `INFINITE`.
fn time_limit_ok(v: &str) -> bool {
    if matches!(v.to_ascii_uppercase().as_str(), "UNLIMITED" | "INFINITE") {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (Some(d), r),
        None => (None, v),
    };
    if days.is_some_and(|d| !digits(d)) {
        return false;
    }
    let parts: Vec<&str> = rest.split(':').collect();
    parts.len() <= 3 && parts.iter().all(|p| digits(p))
}

/// `sbatch --mem`'s spelling: an integer with an optional K, M, G or T.
fn mem_ok(v: &str) -> bool {
    let num = v.strip_suffix(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']).unwrap_or(v);
    !num.is_empty() && num.len() <= 12 && num.bytes().all(|b| b.is_ascii_digit())
}

pub(super) fn validate(c: &mut Checker, f: Option<ExecutorFile>) -> Executor {
    let Some(f) = f else { return Executor::default() };
    let kind = match f.kind.as_deref() {
        None => ExecutorKind::Local,
        Some(k) => ExecutorKind::parse(k).unwrap_or_else(|| {
            c.err("executor.kind", format!("must be \"local\" or \"slurm\", got {k:?}"));
            ExecutorKind::Local
        }),
    };
    let mem = line(c, "executor.mem", f.mem);
    if let Some(m) = mem.as_deref().filter(|m| !mem_ok(m)) {
        c.err("executor.mem", format!("must be an integer with an optional K, M, G or T (sbatch --mem), got {m:?}"));
    }
    let time_limit = line(c, "executor.time_limit", f.time_limit);
    if let Some(t) = time_limit.as_deref().filter(|t| !time_limit_ok(t)) {
        c.err(
            "executor.time_limit",
            format!(
                "must be a Slurm time (minutes, \"H:MM:SS\", \"D-HH:MM:SS\" or \"UNLIMITED\", as sbatch --time), \
                 got {t:?}"
            ),
        );
    }
    let mut extra_sbatch = Vec::new();
    for (i, a) in f.extra_sbatch.into_iter().enumerate() {
        let key = format!("executor.extra_sbatch[{i}]");
        let Some(a) = line(c, &key, Some(a)) else { continue };
        if !a.starts_with('-') {
            c.err(&key, format!("must be an sbatch option (starting with -), got {a:?}"));
            continue;
        }
        let name = a.split('=').next().unwrap_or(&a);
        if OWNED_OPTIONS.contains(&name) || (name.starts_with("-a") && name.len() > 2 && !name.starts_with("--")) {
            c.err(
                &key,
                format!(
                    "{name} is set by the harness (each task's block, its log and the array's name); use the \
                     other [executor] keys"
                ),
            );
            continue;
        }
        extra_sbatch.push(a);
    }
    let cpus_per_task = f.cpus_per_task.and_then(|v| c.int("executor.cpus_per_task", v, 1, 100_000)).map(|v| v as u32);
    let max_parallel = f.max_parallel.and_then(|v| c.int("executor.max_parallel", v, 1, 1_000_000)).map(|v| v as u32);
    let max_resubmits = f
        .max_resubmits
        .map_or(Some(DEFAULT_MAX_RESUBMITS as u64), |v| c.int("executor.max_resubmits", v, 0, 100))
        .unwrap_or(0) as u32;
    let start_timeout_s = f
        .start_timeout_s
        .map_or(Some(DEFAULT_START_TIMEOUT_S), |v| c.seconds("executor.start_timeout_s", v, false))
        .unwrap_or(DEFAULT_START_TIMEOUT_S);
    let poll_interval_s = match f.poll_interval_s {
        None => DEFAULT_POLL_INTERVAL_S,
        Some(v) if (0.05..=60.0).contains(&v) => v,
        Some(v) => {
            c.err("executor.poll_interval_s", format!("must be in [0.05, 60] seconds, got {v}"));
            DEFAULT_POLL_INTERVAL_S
        }
    };
    let ports_per_task =
        f.ports_per_task.and_then(|v| c.int("executor.ports_per_task", v, 1, 65_535)).map(|v| v as u16);
    let shared_root = line(c, "executor.shared_root", f.shared_root).map(PathBuf::from);
    Executor {
        kind,
        partition: line(c, "executor.partition", f.partition),
        gres: line(c, "executor.gres", f.gres),
        cpus_per_task,
        mem,
        time_limit,
        account: line(c, "executor.account", f.account),
        constraint: line(c, "executor.constraint", f.constraint),
        max_parallel,
        extra_sbatch,
        shared_root,
        max_resubmits,
        start_timeout_s,
        ports_per_task,
        poll_interval_s,
    }
}

/// The spawned arms' ports: (lowest, highest).
fn port_span(plan: &Plan) -> Option<(u16, u16)> {
    let ports = plan.arms.iter().filter_map(|a| match a.server {
        Server::Spawn { port, .. } => Some(port),
        Server::External { .. } => None,
    });
    let (lo, hi) = ports.fold((u16::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
    (lo <= hi).then_some((lo, hi))
}

impl Plan {
    /// The width of each block's port range (`executor.ports_per_task`, else the
    /// span of the spawned arms' ports).
    pub fn ports_per_task(&self) -> u16 {
        self.executor.ports_per_task.unwrap_or_else(|| port_span(self).map_or(1, |(lo, hi)| hi - lo + 1))
    }

    /// The port of a spawned arm's server in block `block` of a dispatched study
    /// (`port + block * ports_per_task`); `None` for an external arm.
    pub fn dispatched_port(&self, arm: &super::Arm, block: u32) -> Option<u16> {
        let Server::Spawn { port, .. } = arm.server else { return None };
        u16::try_from(u32::from(port) + block * u32::from(self.ports_per_task())).ok()
    }

    /// `plan check`'s line for a plan whose `[executor]` says `slurm`.
    pub fn executor_text(&self) -> Option<String> {
        let e = &self.executor;
        if e.kind != ExecutorKind::Slurm {
            return None;
        }
        let or = |v: &Option<String>, d: &str| v.clone().unwrap_or_else(|| d.to_string());
        Some(format!(
            "executor slurm: one array task per block, all its arms on one node; {} at once; partition {}, {} \
             CPU(s) per task{}{}; block k's servers on their arm's port + k x {}; a failed task resubmitted up to \
             {} time(s); at most {} s in the queue",
            e.max_parallel.map_or("any number".to_string(), |n| n.to_string()),
            or(&e.partition, "(the cluster's default)"),
            e.cpus_per_task.unwrap_or(1),
            e.gres.as_ref().map(|g| format!(", gres {g}")).unwrap_or_default(),
            e.time_limit.as_ref().map(|t| format!(", time limit {t}")).unwrap_or_default(),
            self.ports_per_task(),
            e.max_resubmits,
            e.start_timeout_s
        ))
    }

    /// What keeps this plan's blocks from running as Slurm array tasks, by key:
    /// a `[sequential]` rule (it decides after each block, in order), CPU sets
    /// (each task's CPUs come from its allocation), ports past 65535, and arm ports
    /// closer than `ports_per_task` allows. Empty: it can be dispatched.
    pub fn dispatch_problems(&self) -> Vec<Issue> {
        let mut out = Vec::new();
        if self.sequential.is_some() {
            out.push(Issue::new(
                "sequential",
                "a [sequential] study decides after each block, in order: run it with the local executor",
            ));
        }
        if self.client.cpus.is_some() {
            out.push(Issue::new(
                "client.cpus",
                "with the slurm executor each task's CPUs come from its allocation (executor.cpus_per_task): \
                 remove client.cpus",
            ));
        }
        for (i, a) in self.arms.iter().enumerate().filter(|(_, a)| a.cpus.is_some()) {
            out.push(Issue::new(
                format!("arms[{i}].cpus"),
                format!(
                    "with the slurm executor each task's CPUs come from its allocation (executor.cpus_per_task): \
                     remove the cpus of arm {}",
                    a.name
                ),
            ));
        }
        if let Some((lo, hi)) = port_span(self) {
            let width = self.ports_per_task();
            if u32::from(hi - lo) >= u32::from(width) {
                out.push(Issue::new(
                    "executor.ports_per_task",
                    format!("{width} is narrower than the arms' ports {lo}..={hi}: the tasks' ranges would overlap"),
                ));
            }
            let blocks = self.blocks.count + self.blocks.descriptive;
            let last = u32::from(hi) + blocks.saturating_sub(1) * u32::from(width);
            if last > 65_535 {
                out.push(Issue::new(
                    "executor.ports_per_task",
                    format!(
                        "block {}'s servers would listen on port {last} (arm port + block x {width}), past 65535: \
                         lower the arms' ports",
                        blocks - 1
                    ),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml_text: &str) -> (Executor, Vec<Issue>) {
        let f: ExecutorFile = toml::from_str(toml_text).unwrap();
        let mut c = Checker { issues: Vec::new() };
        let e = validate(&mut c, Some(f));
        (e, c.issues)
    }

    #[test]
    fn defaults_and_every_key_read_back() {
        let (e, issues) = check("kind = \"slurm\"");
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(e.kind, ExecutorKind::Slurm);
        assert_eq!((e.max_resubmits, e.start_timeout_s, e.poll_interval_s), (2, 3600.0, 1.0));
        let (e, issues) = check(
            "kind = \"slurm\"\npartition = \"gpu\"\ngres = \"gpu:1\"\ncpus_per_task = 8\nmem = \"64G\"\n\
             time_limit = \"1-02:00:00\"\naccount = \"lab\"\nconstraint = \"h100\"\nmax_parallel = 4\n\
             extra_sbatch = [\"--qos=high\", \"--exclusive\"]\nshared_root = \"/shared\"\nmax_resubmits = 0\n\
             start_timeout_s = 30\nports_per_task = 10\npoll_interval_s = 0.5",
        );
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(e.partition.as_deref(), Some("gpu"));
        assert_eq!((e.cpus_per_task, e.max_parallel, e.ports_per_task), (Some(8), Some(4), Some(10)));
        assert_eq!(e.extra_sbatch, ["--qos=high", "--exclusive"]);
        assert_eq!((e.max_resubmits, e.start_timeout_s), (0, 30.0));
        assert!(check("").0 == Executor::default());
    }

    #[test]
    fn bad_values_are_named_by_key() {
        let keys = |t: &str| check(t).1.into_iter().map(|i| i.key).collect::<Vec<_>>();
        assert_eq!(keys("kind = \"k8s\""), ["executor.kind"]);
        assert_eq!(keys("mem = \"lots\""), ["executor.mem"]);
        assert_eq!(keys("time_limit = \"1:2:3:4\""), ["executor.time_limit"]);
        assert_eq!(keys("partition = \"a\\n#SBATCH --x\""), ["executor.partition"]);
        assert_eq!(keys("extra_sbatch = [\"--array=0-3\", \"qos\", \"--output=x\"]").len(), 3);
        assert_eq!(keys("cpus_per_task = 0"), ["executor.cpus_per_task"]);
        assert_eq!(keys("max_resubmits = -1"), ["executor.max_resubmits"]);
        assert_eq!(keys("start_timeout_s = 0"), ["executor.start_timeout_s"]);
        assert_eq!(keys("poll_interval_s = 0.001"), ["executor.poll_interval_s"]);
        for ok in ["30", "10:00", "1:00:00", "2-0", "2-12:30", "UNLIMITED"] {
            assert!(time_limit_ok(ok), "{ok}");
        }
        for ok in ["100", "16G", "512m"] {
            assert!(mem_ok(ok), "{ok}");
        }
    }

    const PLAN: &str = "[study]\nname = \"s\"\nseed = 1\n\n[request]\nmodel = \"m\"\noutput_tokens = 4\n\n\
        [prompts]\nsource = \"random\"\nlengths = [8]\ndocuments = 2\nmax_token_id = 255\n\n[warmup]\nprompts = 0\n\n\
        [timing]\nsettle_s = 0.0\nrequest_timeout_s = 30\ndrain_timeout_s = 30\n\n[blocks]\ncount = 3\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
        [[arms]]\nname = \"a\"\nrole = \"control\"\nargv = [\"e\", \"{port}\"]\nport = 18000\n\n\
        [[arms]]\nname = \"b\"\nrole = \"candidate\"\nargv = [\"e\", \"{port}\"]\nport = 18001\n\n\
        [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 2\n";

    #[test]
    fn a_dispatched_plan_gets_a_port_range_per_block_and_refuses_what_cannot_leave_the_machine() {
        let plan = crate::plan::parse(&format!("{PLAN}\n[executor]\nkind = \"slurm\"\n")).unwrap();
        assert_eq!(plan.ports_per_task(), 2);
        let ports: Vec<Option<u16>> = (0..3).map(|b| plan.dispatched_port(&plan.arms[1], b)).collect();
        assert_eq!(ports, [Some(18001), Some(18003), Some(18005)]);
        assert!(plan.executor_text().unwrap().contains("port + k x 2"));
        let keys = |extra: &str| match crate::plan::parse(&format!("{PLAN}{extra}")) {
            Err(crate::plan::PlanError::Invalid(issues)) => issues.into_iter().map(|i| i.key).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(keys("\n[client]\ncpus = [0]\n\n[executor]\nkind = \"slurm\"\n"), ["client.cpus"]);
        assert_eq!(keys("\n[executor]\nkind = \"slurm\"\nports_per_task = 1\n"), ["executor.ports_per_task"]);
        let high = PLAN.replace("port = 18000", "port = 65532").replace("port = 18001", "port = 65533");
        let issues = match crate::plan::parse(&format!("{high}\n[executor]\nkind = \"slurm\"\n")) {
            Err(crate::plan::PlanError::Invalid(issues)) => issues,
            other => panic!("{other:?}"),
        };
        assert!(issues[0].message.contains("past 65535"), "{issues:?}");
        // A local plan may say anything: --executor slurm checks it before it runs.
        let local = crate::plan::parse(&format!("{PLAN}\n[client]\ncpus = [0]\n")).unwrap();
        assert_eq!(local.dispatch_problems().len(), 1);
    }
}
