//! The batch script of a dispatched study (`slurm/blocks.sbatch`): the plan's
//! `[executor]` options as `#SBATCH` lines, each task's log under `slurm/logs/`,
//! and one command, the worker of the task's block. The array (`--array`) is not
//! in it: each submission names its blocks, so the same file serves the first
//! submission, every resubmission, and a person rerunning it by hand. Also the
//! array's job name, and the array spelling of a block list. Owns the text. Must
//! not run it.

use std::path::Path;

use crate::plan::{Executor, Plan};

/// What the script needs besides the plan.
pub struct ScriptPaths<'a> {
    pub study_dir: &'a Path,
    pub shared_root: &'a Path,
    pub working_dir: &'a Path,
    pub harness: &'a Path,
    pub job_name: &'a str,
}

/// A word for a POSIX shell: single-quoted, `'` spelt `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The array's job name: `harness-<study>-<8 hex of the evidence directory's path>`
/// (only `[A-Za-z0-9._-]`), the same for every submission of one study and for no
/// other study's.
pub fn job_name(study: &str, study_dir: &Path) -> String {
    let clean: String = study
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    let short: String = clean.chars().take(40).collect();
    let hash = crate::evidence::sha256_hex(study_dir.as_os_str().as_encoded_bytes());
    format!("harness-{short}-{}", &hash[..8])
}

/// `--array`'s value for `blocks` (ascending ranges joined by commas), with `%N`
/// when at most N may run at once.
pub fn array_spec(blocks: &[u32], max_parallel: Option<u32>) -> String {
    let mut sorted = blocks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if end == start { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    let mut s = parts.join(",");
    if let Some(n) = max_parallel {
        s.push_str(&format!("%{n}"));
    }
    s
}

/// The `#SBATCH` options of `[executor]`, in a fixed order.
fn options(e: &Executor) -> Vec<String> {
    let mut o = Vec::new();
    let mut opt = |flag: &str, v: &Option<String>| {
        if let Some(v) = v {
            o.push(format!("--{flag}={v}"));
        }
    };
    opt("partition", &e.partition);
    opt("account", &e.account);
    opt("gres", &e.gres);
    opt("mem", &e.mem);
    opt("time", &e.time_limit);
    opt("constraint", &e.constraint);
    if let Some(n) = e.cpus_per_task {
        o.push(format!("--cpus-per-task={n}"));
    }
    o.extend(e.extra_sbatch.iter().cloned());
    o
}

/// The script's text.
pub fn render(plan: &Plan, plan_sha256: &str, p: &ScriptPaths<'_>) -> String {
    let dir = p.study_dir.display().to_string();
    let mut t = String::new();
    t.push_str("#!/bin/bash\n");
    t.push_str(&format!(
        "# The blocks of study {:?} (plan sha256 {}) as a Slurm array: task K runs block K,\n\
         # every arm of it on the task's node, and writes only that block's units under\n\
         # raw/bK/ (each sealed by its unit.json) and its session record under slurm/sessions/.\n\
         #\n\
         # Written by `harness run --executor slurm`, which submits it with\n\
         #   sbatch --parsable --array=<blocks>[%<max_parallel>] {}/slurm/blocks.sbatch\n\
         # and follows the tasks with squeue. Submitting it by hand works the same way; a\n\
         # task refuses a block that already holds units. `harness run PLAN --resume DIR`\n\
         # resubmits exactly the blocks that never finished.\n",
        plan.study.name, plan_sha256, dir
    ));
    t.push_str(&format!("#SBATCH --job-name={}\n", p.job_name));
    t.push_str(&format!("#SBATCH --output={dir}/{}\n", crate::evidence::task_log_pattern()));
    t.push_str(&format!("#SBATCH --chdir={}\n", p.working_dir.display()));
    // The coordinator resubmits failed tasks itself (discarding their partial units
    // first); Slurm must not requeue one onto a block's half-written files.
    t.push_str("#SBATCH --no-requeue\n");
    for o in options(&plan.executor) {
        t.push_str(&format!("#SBATCH {o}\n"));
    }
    t.push_str("set -eu\n");
    t.push_str(&format!(
        "exec {} run --quiet --block \"$SLURM_ARRAY_TASK_ID\" --study {} --shared-root {}\n",
        sh_quote(&p.harness.display().to_string()),
        sh_quote(&dir),
        sh_quote(&p.shared_root.display().to_string()),
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_ranges_with_their_limit() {
        assert_eq!(array_spec(&[0, 1, 2, 3], Some(2)), "0-3%2");
        assert_eq!(array_spec(&[3, 1], None), "1,3");
        assert_eq!(array_spec(&[0, 1, 2, 5, 7, 8], None), "0-2,5,7-8");
    }

    #[test]
    fn job_names_are_clean_and_tied_to_the_directory() {
        let a = job_name("my study/1", Path::new("/x/a"));
        assert!(a.starts_with("harness-my_study_1-") && a.len() == "harness-my_study_1-".len() + 8, "{a}");
        assert_ne!(a, job_name("my study/1", Path::new("/x/b")));
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
    }
}
