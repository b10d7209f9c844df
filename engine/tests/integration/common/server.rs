//! A real `engine serve` process for integration tests: picks a free loopback
//! port, waits for /health, and stops the server (SIGTERM, then SIGKILL) on drop.
//! Its output goes to the test's (stderr) or, with `start_logged`, to a file.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub port: u16,
    pub base: String,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

impl Server {
    /// Starts `engine serve --model MODEL --port P ARGS...` and waits until healthy.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        Self::launch(model, args, |c| {
            c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        })
    }

    /// As `start`, with extra environment variables and the server's stdout
    /// and stderr both written to `log`.
    pub fn start_logged(model: &Path, args: &[&str], env: &[(&str, &str)], log: &Path) -> Server {
        let out = std::fs::File::create(log).expect("create the server log");
        let err = out.try_clone().expect("clone the log file");
        Self::launch(model, args, |c| {
            c.envs(env.iter().copied()).stdout(out).stderr(err);
        })
    }

    /// The server never sees the caller's `VLLM_API_KEY` (it would guard
    /// every test's API); `setup` adds what one test needs.
    fn launch(model: &Path, args: &[&str], setup: impl FnOnce(&mut Command)) -> Server {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_engine"));
        cmd.arg("serve").arg("--model").arg(model).args(["--port", &port.to_string()]).args(args);
        cmd.env_remove("VLLM_API_KEY");
        setup(&mut cmd);
        let child = cmd.spawn().expect("spawn engine serve");
        let mut s = Server { child, port, base: format!("http://127.0.0.1:{port}") };
        s.wait_healthy(Duration::from_secs(120));
        s
    }

    fn wait_healthy(&mut self, limit: Duration) {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("engine serve exited during startup: {status}");
            }
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                let _ = stream.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let mut buf = String::new();
                let _ = stream.read_to_string(&mut buf);
                if buf.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            assert!(t0.elapsed() < limit, "engine serve not healthy after {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let t0 = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = self.child.kill();
                return self.child.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}
