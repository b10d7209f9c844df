//! The process limits a load generator or a mock needs raised: open descriptors
//! (one per connection: 20,000 concurrent streams need 20,000 on each side).
//! Must not lower any limit.

/// Raises the soft limit on open descriptors to the hard limit, and the hard
/// limit too where the process may (root: up to the kernel's `fs.nr_open`).
/// Returns the soft limit in force afterwards (`None` where it cannot be read).
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit/setrlimit read and write the struct they are given.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return None;
            }
            let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(lim.rlim_max);
            let want = nr_open.min(1 << 20).max(lim.rlim_max);
            let raised = libc::rlimit { rlim_cur: want as libc::rlim_t, rlim_max: want as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                let soft = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
                libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
            }
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            Some(lim.rlim_cur)
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_limit_never_goes_down() {
        let before = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let after = super::raise_fd_limit();
        if before.contains("Max open files") {
            assert!(after.is_some_and(|n| n >= 1024), "{after:?}");
        }
    }
}
