//! `engine roofline`: this machine's physical limits, measured directly, as the
//! ceilings the engine's own figures are set against (`scripts/bench-roofline`
//! divides the engine's decode and prefill speeds by them).
//!
//! Owns two measurements and the host's description: the streaming read
//! bandwidth of an array far larger than the last-level cache by default (a
//! smaller one is read several times a repeat; every byte summed with the
//! widest byte-sum instruction, on one thread and on all, each thread reading
//! its own contiguous slice) and the peak rate of int8
//! multiply-accumulates with the widest dot-product instruction (a
//! register-only loop with independent accumulators, on one thread and on
//! all). Must not load a model, use the engine's kernels or its thread pool:
//! it measures the machine, not the engine. Asserts no speed (a benchmark).
//! Each measured loop's result is checked (the bandwidth sum against the sum
//! written, the dot products by the unit tests against a scalar computation),
//! so the compiler cannot have elided the work being timed.

use super::{CommandError, Result, load_average, write_atomic};
use crate::error::EngineError;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Independent accumulators of the dot-product loops: enough to cover the
/// instruction's latency times its throughput (5 cycles x 2 per cycle at most
/// on current x86; the AVX2 chain is maddubs + madd + add, about 11 cycles at
/// one per cycle), and few enough to stay in registers (32 zmm, 16 ymm).
const DOT_ACCUMULATORS: usize = 12;

/// Seconds each timed dot-product repeat aims to take.
const DOT_SECONDS: f64 = 0.3;

pub struct RooflineOptions {
    /// Bytes of the array the bandwidth figure reads.
    pub bytes: usize,
    /// Threads of the all-thread figures.
    pub threads: usize,
    /// Timed repeats of each figure.
    pub repeats: usize,
    /// The command line, recorded as given.
    pub command_line: Vec<String>,
    /// Also write the JSON document here (atomically).
    pub out: Option<PathBuf>,
}

/// Measures and returns the JSON document (written to `out` too when given).
pub fn roofline(o: &RooflineOptions) -> Result<serde_json::Value> {
    let bad = |m: String| CommandError::Input(EngineError::InvalidRequest(m));
    if o.threads == 0 || o.repeats == 0 {
        return Err(bad("--threads and --repeats must be positive".into()));
    }
    if o.bytes < 64 * o.threads {
        return Err(bad(format!("--bytes {} is below 64 bytes a thread", o.bytes)));
    }
    let load_before = load_average();
    let host = host();
    let bandwidth = read_bandwidth(o.bytes, o.threads, o.repeats)?;
    let dot = int8_dot_peak(o.threads, o.repeats);
    let doc = serde_json::json!({
        "command": o.command_line.join(" "),
        "argv": o.command_line,
        "unix_time_s": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).ok(),
        "host": host,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "threads": o.threads,
        "repeats": o.repeats,
        "statistic": "best (the highest) and median of the repeats",
        "read_bandwidth": bandwidth,
        "int8_dot_peak": dot,
    });
    if let Some(path) = &o.out {
        let text = serde_json::to_string_pretty(&doc).expect("a JSON value always serialises");
        write_atomic(path, text.as_bytes())?;
    }
    Ok(doc)
}

/// CPU model, logical CPUs, SIMD flags (avx*, amx*, fma, f16c) from
/// /proc/cpuinfo and the last-level cache from sysfs (Linux; null elsewhere).
fn host() -> serde_json::Value {
    let (mut model, mut flags, mut cpus) = (None, Vec::new(), 0usize);
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        for line in info.lines() {
            let (key, value) = line.split_once(':').unwrap_or((line, ""));
            match key.trim() {
                "processor" => cpus += 1,
                "model name" if model.is_none() => model = Some(value.trim().to_string()),
                "flags" if flags.is_empty() => {
                    flags = value
                        .split_whitespace()
                        .filter(|f| f.starts_with("avx") || f.starts_with("amx") || *f == "fma" || *f == "f16c")
                        .map(str::to_string)
                        .collect();
                }
                _ => {}
            }
        }
    }
    flags.sort();
    serde_json::json!({
        "cpu_model": model,
        "logical_cpus": (cpus > 0).then_some(cpus),
        "available_parallelism": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "simd_flags": flags,
        "last_level_cache_bytes": last_level_cache_bytes(),
    })
}

/// The size of CPU 0's highest-level cache, from sysfs.
fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, u64)> = None;
    for entry in dir.flatten() {
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok().map(|s| s.trim().to_string());
        let (Some(level), Some(size)) = (read("level"), read("size")) else { continue };
        let Ok(level) = level.parse::<u32>() else { continue };
        let (num, mult) = match size.strip_suffix('K') {
            Some(n) => (n, 1024),
            None => match size.strip_suffix('M') {
                Some(n) => (n, 1024 * 1024),
                None => (size.as_str(), 1),
            },
        };
        let Ok(n) = num.parse::<u64>() else { continue };
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, n * mult));
        }
    }
    best.map(|(_, b)| b)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n.is_multiple_of(2) { (s[n / 2 - 1] + s[n / 2]) / 2.0 } else { s[n / 2] }
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

// ---------------------------------------------------------------------------
// Read bandwidth

/// How the bandwidth loop sums bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SumKind {
    /// `vpsadbw` on 64-byte vectors (AVX-512 BW), four accumulators.
    Avx512,
    /// `vpsadbw` on 32-byte vectors (AVX2), four accumulators.
    Avx2,
    /// Portable Rust.
    Scalar,
}

impl SumKind {
    fn detect() -> SumKind {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                return SumKind::Avx512;
            }
            if is_x86_feature_detected!("avx2") {
                return SumKind::Avx2;
            }
        }
        SumKind::Scalar
    }

    fn describe(self) -> &'static str {
        match self {
            SumKind::Avx512 => "avx512bw: vpsadbw zmm (64 bytes a load), 4 accumulators",
            SumKind::Avx2 => "avx2: vpsadbw ymm (32 bytes a load), 4 accumulators",
            SumKind::Scalar => "scalar: portable Rust byte sum",
        }
    }
}

/// The sum of every byte of `data` (wrapping), read with `kind`.
fn sum_bytes(kind: SumKind, data: &[u8]) -> u64 {
    match kind {
        #[cfg(target_arch = "x86_64")]
        SumKind::Avx512 if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") => {
            // SAFETY: AVX-512 F and BW were detected just above.
            unsafe { x86::sum_bytes_avx512(data) }
        }
        #[cfg(target_arch = "x86_64")]
        SumKind::Avx2 if is_x86_feature_detected!("avx2") => {
            // SAFETY: AVX2 was detected just above.
            unsafe { x86::sum_bytes_avx2(data) }
        }
        _ => sum_bytes_scalar(data),
    }
}

fn sum_bytes_scalar(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |s, &b| s.wrapping_add(u64::from(b)))
}

/// The byte at position `i` of the bandwidth array (not constant, so a sum of
/// the wrong bytes shows).
fn pattern(i: usize) -> u8 {
    (i ^ (i >> 9) ^ (i >> 17)) as u8
}

/// Contiguous slices of `len` bytes for `threads` threads: multiples of 64
/// bytes except the last.
fn slice_len(len: usize, threads: usize) -> usize {
    len.div_ceil(threads).div_ceil(64) * 64
}

/// Runs `work` on every chunk in its own thread, all released together by a
/// barrier; returns the wall time from the first thread's start to the last
/// one's end (each thread reads the clock itself: the calling thread may not
/// be scheduled while they run) and the results in chunk order.
fn timed_threads<C: Sync, T: Send>(chunks: &[C], work: impl Fn(&C) -> T + Sync) -> (Duration, Vec<T>) {
    let barrier = Barrier::new(chunks.len());
    let runs: Vec<(Instant, Instant, T)> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|c| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    let r = work(c);
                    (t0, Instant::now(), r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let start = runs.iter().map(|r| r.0).min();
    let end = runs.iter().map(|r| r.1).max();
    let elapsed = match (start, end) {
        (Some(s), Some(e)) => e - s,
        _ => Duration::ZERO,
    };
    (elapsed, runs.into_iter().map(|r| r.2).collect())
}

/// Passes over an array of `bytes` in one timed repeat: enough to read at
/// least 1 GiB, so that a small (cache-sized) array's repeat is not over in
/// microseconds.
fn passes_per_repeat(bytes: usize) -> usize {
    (1usize << 30).div_ceil(bytes.max(1))
}

/// The array written (first touch, by the threads that read it in the
/// all-thread figure), then read `repeats` times on 1 thread and on `threads`.
fn read_bandwidth(bytes: usize, threads: usize, repeats: usize) -> Result<serde_json::Value> {
    let kind = SumKind::detect();
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(bytes)
        .map_err(|e| CommandError::Check(format!("cannot allocate the {bytes}-byte bandwidth array: {e}")))?;
    let slice = slice_len(bytes, threads);
    let written: u64 = {
        let spare = &mut buf.spare_capacity_mut()[..bytes];
        std::thread::scope(|s| {
            let handles: Vec<_> = spare
                .chunks_mut(slice)
                .enumerate()
                .map(|(t, chunk)| {
                    s.spawn(move || {
                        let mut sum = 0u64;
                        for (j, b) in chunk.iter_mut().enumerate() {
                            let v = pattern(t * slice + j);
                            b.write(v);
                            sum = sum.wrapping_add(u64::from(v));
                        }
                        sum
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .fold(0u64, u64::wrapping_add)
        })
    };
    // SAFETY: the threads above wrote every one of the first `bytes` bytes
    // (the chunks of `slice` cover them) and the capacity is at least `bytes`.
    unsafe { buf.set_len(bytes) };
    let data = buf.as_slice();
    let passes = passes_per_repeat(bytes);
    let want = written.wrapping_mul(passes as u64);
    let mut figures = serde_json::Map::new();
    for (key, t) in [("single_thread", 1), ("all_threads", threads)] {
        let chunks: Vec<&[u8]> = data.chunks(slice_len(bytes, t)).collect();
        let mut each = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let (elapsed, sums) = timed_threads(&chunks, |c| {
                (0..passes).fold(0u64, |s, _| s.wrapping_add(sum_bytes(kind, black_box(*c))))
            });
            let sum = black_box(sums.into_iter().fold(0u64, u64::wrapping_add));
            if sum != want {
                return Err(CommandError::Check(format!(
                    "the read loop summed {sum}, {passes} passes over the array hold {want}: it did not read \
                     every byte"
                )));
            }
            each.push((bytes * passes) as f64 / elapsed.as_secs_f64() / 1e9);
        }
        figures.insert(
            key.into(),
            serde_json::json!({
                "threads": t,
                "gb_per_s_each": each,
                "best_gb_per_s": best(&each),
                "median_gb_per_s": median(&each),
            }),
        );
    }
    let llc = last_level_cache_bytes();
    Ok(serde_json::json!({
        "bytes": bytes,
        "bytes_over_last_level_cache": llc.map(|c| bytes as f64 / c as f64),
        "passes_per_repeat": passes,
        "kernel": kind.describe(),
        "unit": "GB/s = 1e9 bytes/s",
        "method": "the array is written first (first touch, each thread its slice), then every byte is summed, \
                   passes_per_repeat times in a repeat (so that a repeat reads at least 1 GiB); each thread reads \
                   its own contiguous slice; timed from the first thread's start to the last one's end, the \
                   threads released together by a barrier",
        "checksum": written,
        "single_thread": figures.remove("single_thread"),
        "all_threads": figures.remove("all_threads"),
    }))
}

// ---------------------------------------------------------------------------
// int8 dot-product peak

/// The dot-product instruction the peak is measured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DotKind {
    /// `vpdpbusd zmm`: 64 u8 x i8 multiply-accumulates into 16 i32 lanes.
    Avx512Vnni,
    /// `vpdpbusd ymm` (AVX-VNNI, VEX-encoded): 32.
    AvxVnni,
    /// `vpmaddubsw ymm` (32 u8 x i8 products, pairwise into i16), then
    /// `vpmaddwd` by ones and `vpaddd` into i32.
    Avx2Maddubs,
    /// Portable Rust, one multiply-add a product.
    Scalar,
}

impl DotKind {
    fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                DotKind::Avx512Vnni => is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni"),
                DotKind::AvxVnni => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avxvnni"),
                DotKind::Avx2Maddubs => is_x86_feature_detected!("avx2"),
                DotKind::Scalar => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == DotKind::Scalar
        }
    }

    /// The widest this CPU has.
    fn detect() -> DotKind {
        [DotKind::Avx512Vnni, DotKind::AvxVnni, DotKind::Avx2Maddubs]
            .into_iter()
            .find(|k| k.supported())
            .unwrap_or(DotKind::Scalar)
    }

    fn name(self) -> &'static str {
        match self {
            DotKind::Avx512Vnni => "avx512vnni",
            DotKind::AvxVnni => "avxvnni",
            DotKind::Avx2Maddubs => "avx2_maddubs",
            DotKind::Scalar => "scalar",
        }
    }

    fn instruction(self) -> &'static str {
        match self {
            DotKind::Avx512Vnni => "vpdpbusd zmm (_mm512_dpbusd_epi32): 64 u8 x i8 MACs into 16 i32 lanes",
            DotKind::AvxVnni => "vpdpbusd ymm, AVX-VNNI (_mm256_dpbusd_avx_epi32): 32 u8 x i8 MACs into 8 i32 lanes",
            DotKind::Avx2Maddubs => {
                "vpmaddubsw ymm (32 u8 x i8 products, pairs summed into i16, saturating) + vpmaddwd by ones + \
                 vpaddd: 32 MACs per three instructions; the accumulator is the u8 operand of the next step, \
                 so the products cannot be hoisted out of the loop"
            }
            DotKind::Scalar => "portable Rust i32 multiply-add, one MAC each",
        }
    }

    /// Bytes of each operand (and so MACs per instruction, one per byte).
    fn width(self) -> usize {
        match self {
            DotKind::Avx512Vnni => 64,
            DotKind::AvxVnni | DotKind::Avx2Maddubs => 32,
            DotKind::Scalar => 1,
        }
    }

    /// Multiply-accumulates per loop iteration.
    fn macs_per_iteration(self) -> u64 {
        (DOT_ACCUMULATORS * self.width()) as u64
    }
}

/// The u8 operand's bytes (all values 0..=255 appear across lanes).
fn dot_a(width: usize) -> Vec<u8> {
    (0..width).map(|k| (k * 37 + 11) as u8).collect()
}

/// The i8 operand's bytes (negative and positive).
fn dot_b(width: usize) -> Vec<i8> {
    (0..width).map(|k| (k * 53 + 5) as u8 as i8).collect()
}

/// `iters` iterations of the register-only dot-product loop: accumulator `j`
/// starts at `j` in every i32 lane (for `Avx2Maddubs`: at `a`'s lanes plus
/// `j`); returns the lanes summed over the accumulators (wrapping). `a` and
/// `b` hold [`DotKind::width`] bytes, cycled to fill a vector.
fn dot_loop(kind: DotKind, iters: u64, a: &[u8], b: &[i8]) -> Vec<i32> {
    assert!(a.len() == kind.width() && b.len() == kind.width());
    assert!(kind.supported(), "{} is not supported by this CPU", kind.name());
    match kind {
        #[cfg(target_arch = "x86_64")]
        DotKind::Avx512Vnni => {
            // SAFETY: `supported` checked AVX-512 F and VNNI; a and b hold 64 bytes.
            unsafe { x86::dot_avx512vnni(iters, a, b) }
        }
        #[cfg(target_arch = "x86_64")]
        DotKind::AvxVnni => {
            // SAFETY: `supported` checked AVX2 and AVX-VNNI; a and b hold 32 bytes.
            unsafe { x86::dot_avxvnni(iters, a, b) }
        }
        #[cfg(target_arch = "x86_64")]
        DotKind::Avx2Maddubs => {
            // SAFETY: `supported` checked AVX2; a and b hold 32 bytes.
            unsafe { x86::dot_avx2_maddubs(iters, a, b) }
        }
        _ => dot_scalar(iters, a[0], b[0]),
    }
}

/// `DOT_ACCUMULATORS` chains of `acc += a * b`; the operands pass through
/// `black_box` before every product, so that the compiler can neither share
/// one product among the chains nor replace the loop by a multiplication.
fn dot_scalar(iters: u64, a: u8, b: i8) -> Vec<i32> {
    let mut acc: [i32; DOT_ACCUMULATORS] = std::array::from_fn(|j| j as i32);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            let (a, b) = black_box((i32::from(a), i32::from(b)));
            *x = x.wrapping_add(a * b);
        }
    }
    vec![acc.iter().fold(0i32, |s, &x| s.wrapping_add(x))]
}

/// Iterations so that one thread's loop takes about [`DOT_SECONDS`] (measured
/// on a short warm-up run, which also brings the core to its vector clock).
fn dot_iterations(kind: DotKind) -> u64 {
    let (a, b) = (dot_a(kind.width()), dot_b(kind.width()));
    let mut iters = 1u64 << 16;
    loop {
        let t0 = Instant::now();
        black_box(dot_loop(kind, iters, black_box(&a), black_box(&b)));
        let secs = t0.elapsed().as_secs_f64();
        if secs >= 0.05 || iters >= 1 << 40 {
            return ((iters as f64 * DOT_SECONDS / secs.max(1e-9)) as u64).max(1 << 16);
        }
        iters *= 4;
    }
}

fn int8_dot_peak(threads: usize, repeats: usize) -> serde_json::Value {
    let kind = DotKind::detect();
    let iters = dot_iterations(kind);
    let (a, b) = (dot_a(kind.width()), dot_b(kind.width()));
    let mut figures = serde_json::Map::new();
    for (key, t) in [("single_thread", 1), ("all_threads", threads)] {
        let workers = vec![(); t];
        let mut each = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let (elapsed, lanes) = timed_threads(&workers, |_| dot_loop(kind, iters, black_box(&a), black_box(&b)));
            black_box(lanes);
            each.push((t as u64 * iters * kind.macs_per_iteration()) as f64 / elapsed.as_secs_f64());
        }
        let ops: Vec<f64> = each.iter().map(|m| 2.0 * m).collect();
        figures.insert(
            key.into(),
            serde_json::json!({
                "threads": t,
                "mac_per_s_each": each,
                "best_mac_per_s": best(&each),
                "median_mac_per_s": median(&each),
                "best_int8_ops_per_s": best(&ops),
                "median_int8_ops_per_s": median(&ops),
            }),
        );
    }
    serde_json::json!({
        "kind": kind.name(),
        "instruction": kind.instruction(),
        "macs_per_instruction": kind.width(),
        "accumulators": DOT_ACCUMULATORS,
        "iterations_per_thread": iters,
        "macs_per_thread": iters * kind.macs_per_iteration(),
        "unit": "MAC/s (multiply-accumulates of one u8 by one i8 a second); int8 ops/s = 2 x MAC/s",
        "method": "register-only loop, every thread the same number of iterations; timed from the first \
                   thread's start to the last one's end, the threads released together by a barrier",
        "single_thread": figures.remove("single_thread"),
        "all_threads": figures.remove("all_threads"),
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::DOT_ACCUMULATORS;
    use std::arch::x86_64::*;

    /// The sum of every byte of `data`, 256 bytes a step.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn sum_bytes_avx512(data: &[u8]) -> u64 {
        let zero = _mm512_setzero_si512();
        let mut acc = [zero; 4];
        let steps = data.chunks_exact(256);
        let tail = steps.remainder();
        for step in steps {
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: `step` holds 256 bytes; this load reads 64 of them.
                let v = unsafe { _mm512_loadu_si512(step.as_ptr().add(64 * i).cast()) };
                *a = _mm512_add_epi64(*a, _mm512_sad_epu8(v, zero));
            }
        }
        let total = _mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3]));
        (_mm512_reduce_add_epi64(total) as u64).wrapping_add(super::sum_bytes_scalar(tail))
    }

    /// The sum of every byte of `data`, 128 bytes a step.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_bytes_avx2(data: &[u8]) -> u64 {
        let zero = _mm256_setzero_si256();
        let mut acc = [zero; 4];
        let steps = data.chunks_exact(128);
        let tail = steps.remainder();
        for step in steps {
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: `step` holds 128 bytes; this load reads 32 of them.
                let v = unsafe { _mm256_loadu_si256(step.as_ptr().add(32 * i).cast()) };
                *a = _mm256_add_epi64(*a, _mm256_sad_epu8(v, zero));
            }
        }
        let total = _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3]));
        let mut lanes = [0u64; 4];
        // SAFETY: `lanes` holds 32 bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), total) };
        lanes.iter().fold(super::sum_bytes_scalar(tail), |s, &l| s.wrapping_add(l))
    }

    /// # Safety
    /// The CPU must have AVX-512 F and VNNI; `a` and `b` hold 64 bytes.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn dot_avx512vnni(iters: u64, a: &[u8], b: &[i8]) -> Vec<i32> {
        assert!(a.len() == 64 && b.len() == 64);
        // SAFETY: a and b hold 64 bytes each.
        let (va, vb) = unsafe { (_mm512_loadu_si512(a.as_ptr().cast()), _mm512_loadu_si512(b.as_ptr().cast())) };
        let mut acc: [__m512i; DOT_ACCUMULATORS] = std::array::from_fn(|j| _mm512_set1_epi32(j as i32));
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, va, vb);
            }
        }
        let total = acc.iter().fold(_mm512_setzero_si512(), |s, &x| _mm512_add_epi32(s, x));
        let mut lanes = vec![0i32; 16];
        // SAFETY: `lanes` holds 64 bytes.
        unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), total) };
        lanes
    }

    /// # Safety
    /// The CPU must have AVX2 and AVX-VNNI; `a` and `b` hold 32 bytes.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn dot_avxvnni(iters: u64, a: &[u8], b: &[i8]) -> Vec<i32> {
        assert!(a.len() == 32 && b.len() == 32);
        // SAFETY: a and b hold 32 bytes each.
        let (va, vb) = unsafe { (_mm256_loadu_si256(a.as_ptr().cast()), _mm256_loadu_si256(b.as_ptr().cast())) };
        let mut acc: [__m256i; DOT_ACCUMULATORS] = std::array::from_fn(|j| _mm256_set1_epi32(j as i32));
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_dpbusd_avx_epi32(*x, va, vb);
            }
        }
        store256(acc.iter().fold(_mm256_setzero_si256(), |s, &x| _mm256_add_epi32(s, x)))
    }

    /// Each step: `acc += madd(maddubs(acc as u8, b), 1)`, the accumulator
    /// itself the u8 operand, so that no product is loop-invariant.
    ///
    /// # Safety
    /// The CPU must have AVX2; `a` and `b` hold 32 bytes.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot_avx2_maddubs(iters: u64, a: &[u8], b: &[i8]) -> Vec<i32> {
        assert!(a.len() == 32 && b.len() == 32);
        // SAFETY: a and b hold 32 bytes each.
        let (va, vb) = unsafe { (_mm256_loadu_si256(a.as_ptr().cast()), _mm256_loadu_si256(b.as_ptr().cast())) };
        let ones = _mm256_set1_epi16(1);
        let mut acc: [__m256i; DOT_ACCUMULATORS] =
            std::array::from_fn(|j| _mm256_add_epi32(va, _mm256_set1_epi32(j as i32)));
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_add_epi32(*x, _mm256_madd_epi16(_mm256_maddubs_epi16(*x, vb), ones));
            }
        }
        store256(acc.iter().fold(_mm256_setzero_si256(), |s, &x| _mm256_add_epi32(s, x)))
    }

    #[target_feature(enable = "avx2")]
    fn store256(v: __m256i) -> Vec<i32> {
        let mut lanes = vec![0i32; 8];
        // SAFETY: `lanes` holds 32 bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v) };
        lanes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sums_read_every_byte() {
        let data: Vec<u8> = (0..10_000).map(pattern).collect();
        for kind in [SumKind::Avx512, SumKind::Avx2, SumKind::Scalar] {
            // Every start offset and length class: whole steps, tails, empty.
            for (start, len) in [(0, 0), (0, 1), (3, 255), (1, 256), (7, 257), (64, 4096), (5, 9_000), (0, 10_000)] {
                let s = &data[start..start + len];
                let want: u64 = s.iter().map(|&b| u64::from(b)).sum();
                assert_eq!(sum_bytes(kind, s), want, "{kind:?} start {start} len {len}");
            }
            // A single changed byte anywhere changes the sum.
            let mut d = data.clone();
            d[9_999] = d[9_999].wrapping_add(1);
            assert_ne!(sum_bytes(kind, &d), sum_bytes(kind, &data), "{kind:?} missed the last byte");
        }
    }

    #[test]
    fn slices_cover_the_array() {
        for (len, t) in [(64, 1), (1000, 2), (1 << 20, 3), (4096, 64)] {
            let s = slice_len(len, t);
            assert!(s.is_multiple_of(64) && s * t >= len && s * (t - 1) < len + 64 * t, "{len} {t}");
        }
        let (_, sums) = timed_threads(&[1u64, 2, 3], |&x| x * 10);
        assert_eq!(sums, [10, 20, 30]);
        // The time covers the slowest thread's work, even with more threads
        // than CPUs (the caller's clock would not, unscheduled).
        let waits: Vec<u64> = (0..4).map(|i| 10 + 10 * i).collect();
        let (elapsed, _) = timed_threads(&waits, |&ms| std::thread::sleep(Duration::from_millis(ms)));
        assert!(elapsed >= Duration::from_millis(40), "{elapsed:?}");
        assert_eq!(passes_per_repeat(1 << 30), 1);
        assert_eq!(passes_per_repeat(3 << 30), 1);
        assert_eq!(passes_per_repeat(100 << 20), 11);
    }

    /// What `dot_loop` must return, computed one product at a time.
    fn dot_reference(kind: DotKind, iters: u64, a: &[u8], b: &[i8]) -> Vec<i32> {
        let acc_count = DOT_ACCUMULATORS as i32;
        match kind {
            DotKind::Scalar => {
                let p = i32::from(a[0]) * i32::from(b[0]);
                let per = p.wrapping_mul(iters as i32);
                vec![(0..acc_count).fold(0i32, |s, j| s.wrapping_add(j).wrapping_add(per))]
            }
            DotKind::Avx512Vnni | DotKind::AvxVnni => (0..kind.width() / 4)
                .map(|l| {
                    let dot: i32 = (0..4).map(|k| i32::from(a[4 * l + k]) * i32::from(b[4 * l + k])).sum();
                    let per = dot.wrapping_mul(iters as i32);
                    (0..acc_count).fold(0i32, |s, j| s.wrapping_add(j).wrapping_add(per))
                })
                .collect(),
            DotKind::Avx2Maddubs => {
                let mut total = vec![0i32; 8];
                for j in 0..acc_count {
                    let mut lanes: Vec<i32> = (0..8)
                        .map(|l| i32::from_le_bytes(a[4 * l..4 * l + 4].try_into().unwrap()).wrapping_add(j))
                        .collect();
                    for _ in 0..iters {
                        for (l, x) in lanes.iter_mut().enumerate() {
                            let bytes = x.to_le_bytes();
                            // maddubs: pairs of u8 x i8 products, summed with i16 saturation.
                            let pair = |p: usize| {
                                let s: i32 =
                                    (0..2).map(|k| i32::from(bytes[2 * p + k]) * i32::from(b[4 * l + 2 * p + k])).sum();
                                s.clamp(i32::from(i16::MIN), i32::from(i16::MAX))
                            };
                            // madd by ones: the two i16 of the lane summed into i32.
                            *x = x.wrapping_add(pair(0) + pair(1));
                        }
                    }
                    for (t, x) in total.iter_mut().zip(&lanes) {
                        *t = t.wrapping_add(*x);
                    }
                }
                total
            }
        }
    }

    #[test]
    fn dot_loops_compute_the_products() {
        for kind in [DotKind::Avx512Vnni, DotKind::AvxVnni, DotKind::Avx2Maddubs, DotKind::Scalar] {
            if !kind.supported() {
                eprintln!("{} not supported here: not tested", kind.name());
                continue;
            }
            let (a, b) = (dot_a(kind.width()), dot_b(kind.width()));
            for iters in [0, 1, 2, 3, 7] {
                assert_eq!(dot_loop(kind, iters, &a, &b), dot_reference(kind, iters, &a, &b), "{kind:?} {iters}");
            }
            // A changed operand byte changes the result.
            let mut b2 = b.clone();
            b2[kind.width() - 1] = b2[kind.width() - 1].wrapping_add(1);
            assert_ne!(dot_loop(kind, 3, &a, &b2), dot_loop(kind, 3, &a, &b), "{kind:?}");
        }
        assert!(DotKind::detect().supported());
    }

    #[test]
    fn statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(best(&[1.0, 5.0, 2.0]), 5.0);
    }

    #[test]
    fn small_run_writes_its_json() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.json");
        let o = RooflineOptions {
            bytes: 1 << 20,
            threads: 2,
            repeats: 2,
            command_line: vec!["engine".into(), "roofline".into()],
            out: Some(out.clone()),
        };
        let doc = roofline(&o).unwrap();
        let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        // (Floats may differ in the last digit after a round trip.)
        for key in ["command", "argv", "host", "threads", "repeats"] {
            assert_eq!(doc[key], written[key], "{key}");
        }
        assert_eq!(doc["read_bandwidth"]["checksum"], written["read_bandwidth"]["checksum"]);
        let want: u64 = (0..1 << 20).map(|i| u64::from(pattern(i))).sum();
        assert_eq!(doc["read_bandwidth"]["checksum"], want);
        assert_eq!(doc["command"], "engine roofline");
        for fig in ["read_bandwidth", "int8_dot_peak"] {
            for key in ["single_thread", "all_threads"] {
                assert_eq!(doc[fig][key]["threads"], if key == "all_threads" { 2 } else { 1 }, "{fig} {key}");
            }
        }
        assert_eq!(doc["read_bandwidth"]["all_threads"]["gb_per_s_each"].as_array().unwrap().len(), 2);
        assert!(doc["int8_dot_peak"]["single_thread"]["best_mac_per_s"].as_f64().unwrap() > 0.0);
        let bad = RooflineOptions { threads: 0, ..o };
        assert!(matches!(roofline(&bad), Err(CommandError::Input(_))));
    }
}
