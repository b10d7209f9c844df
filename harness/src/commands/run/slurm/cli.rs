//! Slurm's own commands, as the coordinator and the workers use them: `scontrol
//! ping` (is a cluster there), `sbatch --test-only` and `sbatch --parsable`
//! (submission), `squeue` (the array's pending and running tasks), `scontrol show
//! job` (how an ended task ended, and a running task's CPUs), `sacct` where
//! accounting exists, and `scancel --name` (the whole study's tasks). Every call
//! has a time limit: Slurm's clients retry a missing configuration for a minute.
//! Owns the command lines and the parsing of their output. Must not decide
//! anything from what they say.

use std::process::Stdio;
use std::time::Duration;

use super::SlurmError;

/// The longest any one Slurm command may take.
const CALL_LIMIT: Duration = Duration::from_secs(20);

/// The commands the coordinator needs on PATH.
pub const COMMANDS: [&str; 4] = ["sbatch", "squeue", "scontrol", "scancel"];

/// Whether `name` is an executable file on PATH.
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(name);
            std::fs::metadata(&f).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// What one command printed.
#[derive(Debug, Clone)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// stderr, else stdout, trimmed: what Slurm said.
    pub fn said(&self) -> String {
        let e = self.stderr.trim();
        if e.is_empty() { self.stdout.trim().to_string() } else { e.to_string() }
    }
}

/// Runs `program args` (with `stdin` fed in), killed after [`CALL_LIMIT`].
pub async fn call(program: &str, args: &[String], stdin: Option<&str>) -> Result<Output, SlurmError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| SlurmError::Call { command: format!("{program} {}", args.join(" ")), why: e.to_string() })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        let _ = pipe.write_all(text.as_bytes()).await;
    }
    match tokio::time::timeout(CALL_LIMIT, child.wait_with_output()).await {
        Ok(Ok(out)) => Ok(Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }),
        Ok(Err(e)) => Err(SlurmError::Call { command: format!("{program} {}", args.join(" ")), why: e.to_string() }),
        Err(_) => Err(SlurmError::Call {
            command: format!("{program} {}", args.join(" ")),
            why: format!("no answer within {} s", CALL_LIMIT.as_secs()),
        }),
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `scontrol ping`: `Ok` when a controller answers UP.
pub async fn ping() -> Result<(), String> {
    let out = call("scontrol", &strings(&["ping"]), None).await.map_err(|e| e.to_string())?;
    if out.ok && out.stdout.contains("is UP") { Ok(()) } else { Err(out.said()) }
}

/// `sbatch --test-only --array=ARRAY` of the script `text` (on stdin): Slurm's
/// verdict on the partition, account, GRES and limits without submitting.
pub async fn test_only(text: &str, array: &str) -> Result<(), String> {
    let args = vec!["--test-only".to_string(), format!("--array={array}")];
    let out = call("sbatch", &args, Some(text)).await.map_err(|e| e.to_string())?;
    // sbatch --test-only prints its estimate on stderr and exits 0 when it would run.
    if out.ok { Ok(()) } else { Err(out.said()) }
}

/// The `sbatch` command line that submits `script` for `array`.
pub fn submit_argv(script: &str, array: &str) -> Vec<String> {
    vec!["sbatch".into(), "--parsable".into(), format!("--array={array}"), script.into()]
}

/// Runs `argv` (from [`submit_argv`]): the array's job id, or Slurm's refusal.
pub async fn submit(argv: &[String]) -> Result<String, SlurmError> {
    let out = call(&argv[0], &argv[1..], None).await?;
    // `--parsable`: "<job id>" or "<job id>;<cluster>".
    let id = out.stdout.trim().split(';').next().unwrap_or("").to_string();
    if out.ok && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(SlurmError::Refused { message: out.said() })
    }
}

/// One task of the array in the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub array_job: String,
    pub task: u32,
    /// `PENDING`, `RUNNING`, `COMPLETING`, `CONFIGURING`, `SUSPENDED`, ...
    pub state: String,
    pub node: Option<String>,
    pub reason: String,
}

/// Parses `squeue -h -r -o '%F|%K|%T|%N|%r'` output.
pub fn parse_queue(text: &str) -> Vec<Queued> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split('|').collect();
            let [array_job, task, state, node, reason] = f.as_slice() else { return None };
            Some(Queued {
                array_job: array_job.to_string(),
                task: task.parse().ok()?,
                state: state.to_string(),
                node: Some(node.to_string()).filter(|n| !n.is_empty()),
                reason: reason.to_string(),
            })
        })
        .collect()
}

/// The study's tasks still in the queue (pending, running or completing), by the
/// array's job name.
pub async fn queue(job_name: &str) -> Result<Vec<Queued>, SlurmError> {
    let args = strings(&["-h", "-r", "-n", job_name, "-o", "%F|%K|%T|%N|%r"]);
    let out = call("squeue", &args, None).await?;
    if !out.ok {
        return Err(SlurmError::Call { command: format!("squeue -n {job_name}"), why: out.said() });
    }
    Ok(parse_queue(&out.stdout))
}

/// How an ended task ended, as Slurm remembers it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ended {
    pub state: String,
    pub reason: Option<String>,
    pub exit_code: Option<String>,
    pub node: Option<String>,
}

/// The fields of `scontrol -o show job` (one line of `Key=Value` pairs).
pub fn parse_show_job(text: &str) -> Option<Ended> {
    let line = text.lines().find(|l| l.contains("JobState="))?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
            .filter(|v| !v.is_empty() && v != "(null)" && v != "None")
    };
    Some(Ended {
        state: field("JobState")?,
        reason: field("Reason"),
        exit_code: field("ExitCode"),
        node: field("BatchHost").or_else(|| field("NodeList")),
    })
}

/// How task `array_job`_`task` ended: `scontrol show job` while the controller
/// remembers it (its `MinJobAge`), else `sacct` where accounting exists.
pub async fn ended(array_job: &str, task: u32) -> Option<Ended> {
    let id = format!("{array_job}_{task}");
    if let Ok(out) = call("scontrol", &strings(&["-o", "show", "job", &id]), None).await
        && out.ok
        && let Some(e) = parse_show_job(&out.stdout)
    {
        return Some(e);
    }
    let args = strings(&["-n", "-P", "-X", "-j", &id, "-o", "State,ExitCode,NodeList,Reason"]);
    let out = call("sacct", &args, None).await.ok().filter(|o| o.ok)?;
    let line = out.stdout.lines().next()?;
    let f: Vec<&str> = line.split('|').collect();
    let get = |i: usize| f.get(i).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Some(Ended {
        state: get(0)?.split_whitespace().next()?.to_string(),
        exit_code: get(1),
        node: get(2),
        reason: get(3).filter(|r| r != "None"),
    })
}

/// `scancel --name JOB_NAME`: every task of the study, pending or running.
pub async fn cancel(job_name: &str) -> Result<(), SlurmError> {
    let out = call("scancel", &strings(&["--name", job_name]), None).await?;
    if out.ok {
        Ok(())
    } else {
        Err(SlurmError::Call { command: format!("scancel --name {job_name}"), why: out.said() })
    }
}

/// The CPU ids Slurm allocated to job `id` on `node` (`scontrol show job -d`'s
/// `CPU_IDs`), in the kernel's list spelling.
pub async fn allocated_cpus(id: &str, node: &str) -> Option<String> {
    let out = call("scontrol", &strings(&["show", "job", "-d", id]), None).await.ok().filter(|o| o.ok)?;
    parse_cpu_ids(&out.stdout, node)
}

/// `CPU_IDs=` of the `Nodes=` line that names `node` (or the only one).
pub fn parse_cpu_ids(text: &str, node: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("CPU_IDs=")).collect();
    let line = lines
        .iter()
        .find(|l| l.split_whitespace().any(|w| w.strip_prefix("Nodes=") == Some(node)))
        .or_else(|| (lines.len() == 1).then(|| &lines[0]))?;
    line.split_whitespace().find_map(|w| w.strip_prefix("CPU_IDs=")).map(str::to_string)
}

/// Waits (at most `limit`) until no task named `job_name` is in the queue.
pub async fn wait_gone(job_name: &str, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match queue(job_name).await {
            Ok(q) if q.is_empty() => return true,
            _ if tokio::time::Instant::now() >= deadline => return false,
            _ => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_lines_parse() {
        let q = parse_queue("3|2|PENDING||JobArrayTaskLimit\n3|0|RUNNING|vm|None\nbad line\n");
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].task, q[0].state.as_str(), q[0].node.as_deref()), (2, "PENDING", None));
        assert_eq!((q[1].array_job.as_str(), q[1].node.as_deref()), ("3", Some("vm")));
    }

    #[test]
    fn show_job_and_cpu_ids_parse() {
        let line = "JobId=8 ArrayJobId=7 ArrayTaskId=1 JobName=x JobState=FAILED Reason=JobLaunchFailure \
                    Dependency=(null) ExitCode=0:53 NodeList=vm BatchHost=vm";
        let e = parse_show_job(line).unwrap();
        assert_eq!(e.state, "FAILED");
        assert_eq!(e.reason.as_deref(), Some("JobLaunchFailure"));
        assert_eq!((e.exit_code.as_deref(), e.node.as_deref()), (Some("0:53"), Some("vm")));
        let ok = parse_show_job("JobState=COMPLETED Reason=None ExitCode=0:0 BatchHost=n1").unwrap();
        assert_eq!((ok.reason, ok.node.as_deref()), (None, Some("n1")));
        let d = "JobId=5 ArrayJobId=3\n   JobState=RUNNING\n     Nodes=vm CPU_IDs=1 Mem=0 GRES=\n";
        assert_eq!(parse_cpu_ids(d, "vm").as_deref(), Some("1"));
        let two = "     Nodes=a CPU_IDs=0-3 Mem=0\n     Nodes=b CPU_IDs=4,6 Mem=0\n";
        assert_eq!(parse_cpu_ids(two, "b").as_deref(), Some("4,6"));
        assert_eq!(parse_cpu_ids(two, "c"), None);
    }
}
