//! The machine the harness runs on: the facts a study records about it (`facts`)
//! and the CPU sets processes are pinned to (`cpus`). Linux only: elsewhere every
//! fact is `None` and pinning is refused. Must not decide which CPUs anything runs
//! on (the plan does) or write evidence.

mod cpus;
mod facts;
mod limits;

#[cfg(target_os = "linux")]
pub use cpus::cpu_set;
pub use cpus::{MAX_CPU, allowed_cpus, cpu_list, parse_cpu_list, pin_this_process, process_cpus};
pub use facts::{HostFacts, facts, hostname, loadavg_1m};
pub use limits::raise_fd_limit;
