//! The socket floor under every client's TTFT error on one machine: a one-byte round
//! trip over loopback TCP between two processes, each pinned and prioritized by the
//! caller (`taskset`, `chrt`) as `scripts/bench-clients` places a client and the mock.
//! A client's TTFT error against the mock's ground truth spans the same two one-way
//! hops and the same two wake-ups (the request to the mock, the first token back),
//! plus HTTP and SSE work on both sides; this program does no HTTP at all, so no
//! client can measure below it here. The round trips start at Poisson times of the
//! given rate (a fixed-seed generator), as an open-loop client's requests do, so the
//! processes idle between them as they do at that rate.
//!
//! Standard library only: `scripts/bench-clients` compiles it with `rustc -O`.
//!
//!   loopback_rtt server PORT                   # serves until killed
//!   loopback_rtt client PORT RATE_HZ COUNT     # one JSON line on stdout
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Round trips before the measured ones (connection and caches warmed).
const WARMUP: usize = 20;

fn usage() -> ! {
    eprintln!("usage: loopback_rtt server PORT | loopback_rtt client PORT RATE_HZ COUNT");
    std::process::exit(2)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| usage())
}

fn serve(port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    // One connection at a time, until killed (a readiness probe is one that closes).
    loop {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            if s.write_all(&b).is_err() {
                break;
            }
        }
    }
}

/// Nearest rank, as the harness's percentiles.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn client(port: u16, rate_hz: f64, count: usize) -> std::io::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_nodelay(true)?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rtt_us = Vec::with_capacity(count);
    let mut b = [7u8; 1];
    for i in 0..count + WARMUP {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        std::thread::sleep(Duration::from_secs_f64(-u.ln() / rate_hz));
        let t0 = Instant::now();
        s.write_all(&b)?;
        s.read_exact(&mut b)?;
        let t = t0.elapsed().as_nanos() as f64 / 1000.0;
        if i >= WARMUP {
            rtt_us.push(t);
        }
    }
    rtt_us.sort_by(f64::total_cmp);
    println!(
        "{{\"rate_hz\": {rate_hz}, \"n\": {count}, \"rtt_us\": {{\"p50\": {:.1}, \"p99\": {:.1}, \"min\": {:.1}, \"max\": {:.1}}}}}",
        pct(&rtt_us, 50.0),
        pct(&rtt_us, 99.0),
        rtt_us[0],
        rtt_us[count - 1]
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r = match args.get(1).map(String::as_str) {
        Some("server") => serve(arg(&args, 2)),
        Some("client") => {
            let count: usize = arg(&args, 4);
            if count == 0 {
                usage()
            }
            client(arg(&args, 2), arg(&args, 3), count)
        }
        _ => usage(),
    };
    if let Err(e) = r {
        eprintln!("loopback_rtt: {e}");
        std::process::exit(1);
    }
}
