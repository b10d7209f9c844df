//! A spawned server process: started from its argv (no shell) in its own process
//! group with stdout and stderr appended to `server.log`, watched until it exits, and
//! stopped with SIGTERM to the group, then SIGKILL after a grace period; on Linux it
//! also dies with the harness (`PR_SET_PDEATHSIG`). Owns the
//! child and the record of how it ended. Must not decide when to stop (the runner
//! does) and must not signal any process outside the group it started.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::sync::watch;

use super::ArmError;
use crate::evidence::{ExitInfo, StopRecord};
use crate::load::StudyClock;

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        _ => "signal",
    }
}

pub struct ServerProcess {
    pub pid: u32,
    exit: watch::Receiver<Option<ExitInfo>>,
    exit_text: watch::Receiver<Option<String>>,
    clock: StudyClock,
}

impl ServerProcess {
    /// Spawns `argv` with `env` added, on `cpus` when given (the child sets its own
    /// affinity before exec, so the server and everything it starts inherit it),
    /// output appended to `log`.
    pub fn spawn(
        argv: &[String],
        env: &BTreeMap<String, String>,
        cpus: Option<&[u32]>,
        log: &Path,
        clock: StudyClock,
    ) -> Result<ServerProcess, ArmError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(ArmError::Spawn { program: String::new(), detail: "empty argv".into() });
        };
        let open = || OpenOptions::new().create(true).append(true).open(log);
        let io = |error| ArmError::Io { path: log.to_path_buf(), error };
        let (out, err) = (open().map_err(io)?, open().map_err(io)?);
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0)
            .kill_on_drop(true);
        // Linux: the server gets SIGKILL when the harness thread that spawned it ends,
        // so a harness killed outright (SIGKILL, OOM) leaves no server holding its
        // port. Spawns run on the runtime's `block_on` thread, which lives as long as
        // the study. A harness that died before the prctl is caught by the getppid check.
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id();
            let set = match cpus {
                Some(c) => Some(
                    crate::host::cpu_set(c).map_err(|detail| ArmError::Spawn { program: program.clone(), detail })?,
                ),
                None => None,
            };
            // SAFETY: between fork and exec the closure calls only async-signal-safe
            // functions (prctl, getppid, raise, sched_setaffinity) and allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if u32::try_from(libc::getppid()).ok() != Some(parent) {
                        libc::raise(libc::SIGKILL);
                    }
                    if let Some(set) = &set
                        && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        #[cfg(not(target_os = "linux"))]
        if cpus.is_some() {
            return Err(ArmError::Spawn { program: program.clone(), detail: "CPU sets need Linux".into() });
        }
        let mut child = cmd.spawn().map_err(|e| ArmError::Spawn { program: program.clone(), detail: e.to_string() })?;
        let pid = child.id().ok_or_else(|| ArmError::Spawn { program: program.clone(), detail: "no pid".into() })?;
        let (tx, exit) = watch::channel(None);
        let (text_tx, exit_text) = watch::channel(None);
        tokio::spawn(async move {
            let info = match child.wait().await {
                Ok(status) => {
                    let (code, signal) = (status.code(), status.signal());
                    let description = match (code, signal) {
                        (Some(c), _) => format!("server exited with code {c}"),
                        (None, Some(s)) => format!("server killed by signal {s} ({})", signal_name(s)),
                        _ => "server exited".to_string(),
                    };
                    ExitInfo { t_ns: clock.now_ns(), code, signal, description }
                }
                Err(e) => ExitInfo {
                    t_ns: clock.now_ns(),
                    code: None,
                    signal: None,
                    description: format!("server wait failed: {e}"),
                },
            };
            let _ = text_tx.send(Some(info.description.clone()));
            let _ = tx.send(Some(info));
        });
        Ok(ServerProcess { pid, exit, exit_text, clock })
    }

    /// `Some(description)` once exited; what request tasks watch.
    pub fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exit_text.clone()
    }

    pub fn exited(&self) -> Option<ExitInfo> {
        self.exit.borrow().clone()
    }

    fn signal_group(&self, sig: i32) -> bool {
        let Ok(pgid) = libc::pid_t::try_from(self.pid) else {
            return false;
        };
        // SAFETY: kill(2) with a negative pid signals only the group this spawn created.
        unsafe { libc::kill(-pgid, sig) == 0 }
    }

    /// SIGKILL to the group, now (what dropping an unstopped invocation does).
    pub fn kill_group(&self) {
        if self.exited().is_none() || self.signal_group(0) {
            self.signal_group(libc::SIGKILL);
        }
    }

    async fn wait_exit(&self, within: Duration) -> Option<ExitInfo> {
        let mut rx = self.exit.clone();
        let got = tokio::time::timeout(within, rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(v)) => v.clone(),
            _ => self.exited(),
        }
    }

    /// SIGTERM to the group, SIGKILL after `grace` if it is still running.
    pub async fn stop(&self, grace: Duration) -> StopRecord {
        let requested_ns = self.clock.now_ns();
        let mut rec = StopRecord {
            how: String::new(),
            requested_ns,
            sigterm_sent: false,
            sigkill_sent: false,
            grace_s: grace.as_secs_f64(),
            exit: None,
            group_leftovers_killed: false,
            log: None,
        };
        if let Some(info) = self.exited() {
            rec.how = "already_exited".into();
            rec.exit = Some(info);
        } else {
            rec.sigterm_sent = self.signal_group(libc::SIGTERM);
            rec.exit = self.wait_exit(grace).await;
            rec.how = "exited_on_sigterm".into();
            if rec.exit.is_none() {
                rec.sigkill_sent = self.signal_group(libc::SIGKILL);
                rec.exit = self.wait_exit(Duration::from_secs(10)).await;
                rec.how = if rec.exit.is_some() { "killed_after_grace" } else { "did_not_exit" }.into();
            }
        }
        // Workers the server left behind in its group (signal 0 probes).
        if self.signal_group(0) {
            rec.group_leftovers_killed = self.signal_group(libc::SIGKILL);
        }
        rec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(script: &str, log: &Path) -> ServerProcess {
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        ServerProcess::spawn(&argv, &BTreeMap::new(), None, log, StudyClock::start()).unwrap()
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_pinned_server_and_its_children_run_on_its_cpus_only() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("server.log");
        let mine = crate::host::parse_cpu_list(&crate::host::allowed_cpus(None).unwrap()).unwrap();
        let one = *mine.last().unwrap();
        let argv: Vec<String> =
            ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep 60"].map(String::from).to_vec();
        let p = ServerProcess::spawn(&argv, &BTreeMap::new(), Some(&[one]), &log, StudyClock::start()).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(crate::host::allowed_cpus(Some(p.pid)).as_deref(), Some(one.to_string().as_str()));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(&format!("Cpus_allowed_list:\t{one}\n")), "{text}");
        p.stop(Duration::from_secs(5)).await;
        // A CPU the machine does not have: the spawn fails and says so.
        let err = ServerProcess::spawn(&argv, &BTreeMap::new(), Some(&[1000]), &log, StudyClock::start()).err();
        assert!(err.is_some());
    }

    #[tokio::test]
    async fn stops_with_sigterm_and_logs_output() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("server.log");
        let p = spawn("echo hello; echo oops >&2; exec sleep 60", &log);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(p.exited().is_none());
        let stop = p.stop(Duration::from_secs(10)).await;
        assert_eq!(stop.how, "exited_on_sigterm");
        assert_eq!(stop.exit.as_ref().and_then(|e| e.signal), Some(libc::SIGTERM));
        assert!(stop.sigterm_sent && !stop.sigkill_sent);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("hello") && text.contains("oops"), "{text}");
    }

    #[tokio::test]
    async fn kills_a_server_that_ignores_sigterm() {
        let tmp = tempfile::tempdir().unwrap();
        let p = spawn("trap '' TERM; sleep 60", &tmp.path().join("log"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let stop = p.stop(Duration::from_millis(300)).await;
        assert_eq!(stop.how, "killed_after_grace");
        assert!(stop.sigkill_sent);
        assert!(p.exit_watch().borrow().is_some());
    }

    #[tokio::test]
    async fn reports_an_exit_before_the_stop() {
        let tmp = tempfile::tempdir().unwrap();
        let p = spawn("exit 3", &tmp.path().join("log"));
        let mut rx = p.exit_watch();
        let _ = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(Option::is_some)).await;
        let stop = p.stop(Duration::from_secs(1)).await;
        assert_eq!((stop.how.as_str(), stop.exit.and_then(|e| e.code)), ("already_exited", Some(3)));
    }
}
