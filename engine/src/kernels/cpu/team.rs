//! A small fixed team of kernel threads for the model's short parallel regions.
//!
//! A decode step runs about five parallel regions per layer (q/k/v, attention,
//! o, gate/up, down: 150 for a 30-layer model), each only tens of microseconds
//! long. rayon parks an idle worker on a futex after a short spin, so most
//! regions pay a wake-up (several microseconds, more on a VM) and the kernel
//! scheduler's work besides. A `Team` keeps its workers spinning between the
//! regions of one installed scope (a forward pass), for at most `SPIN_FOR`
//! after each, as llama.cpp's thread pool does during a graph: back-to-back
//! regions start with one atomic store. When the last scope ends, workers park
//! at once: a server's time between steps (HTTP, sampling, the client on the
//! same cores) is not spent spinning.
//!
//! Use: `team.install(|| forward(...))` makes `team` the one that
//! [`for_each_index`] and [`map_indices`] run on, for the duration of the
//! closure and on the calling thread only (a scoped context, as rayon's
//! `ThreadPool::install`). Outside an install they fall back to rayon on the
//! current pool, so every caller works with either. The caller thread takes
//! part in the work; the team adds `threads - 1` workers.
//!
//! A region is published with two atomic stores (the job lives on the
//! caller's stack; workers count themselves in and out of it), and a worker
//! out of tasks prefetches what the caller said the next region reads first
//! ([`prefetch_next`]): in decode the caller's serial steps between regions
//! (norms, RoPE, quantizing) would otherwise leave the memory bus idle.
//!
//! Results never depend on the team: tasks are whole, independent units
//! (column blocks, attention heads) whatever thread runs them.
//!
//! Must not: run nested regions on the team (a task that starts a region runs
//! it on rayon), or leave a region before every claimed task has finished.

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// How long an idle worker spins for the next region before it parks.
const SPIN_FOR: Duration = Duration::from_micros(200);

/// One parallel region: `tasks` calls of `f`, claimed one index at a time.
/// It lives on the stack of the thread that runs the region (`Team::run`),
/// which returns only once no worker can still reach it (`Shared::inside`).
struct Job {
    /// The region's closure. It borrows the caller's stack: it is only called
    /// for claimed indices below `tasks`, and the caller returns only after
    /// `done == tasks`, so no call outlives the borrow.
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
}

// SAFETY: `f` points at a `Sync` closure that is only called while the region
// that owns it is waiting for it (see `Job::f`).
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

impl Job {
    /// Claims and runs indices until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.tasks {
                return;
            }
            // SAFETY: i < tasks, so the region is still waiting for this call.
            let f = unsafe { &*self.f };
            if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

struct Shared {
    /// Bumped once per region; workers wait for it to change.
    epoch: AtomicU64,
    /// The region now running (a `Job` on its caller's stack), null between
    /// regions. Published and withdrawn with two atomic stores: no lock and
    /// no allocation per region.
    job: AtomicPtr<Job>,
    /// Workers that may hold a pointer read from `job`: a worker counts itself
    /// in before it reads `job` and out after its last use of the job. The
    /// caller withdraws the job (stores null) and then waits for `inside == 0`;
    /// all four accesses are `SeqCst`, so either the caller sees the worker
    /// counted in (and waits for it) or the worker reads null (or a later job).
    inside: AtomicUsize,
    /// Where the next region will start reading (`prefetch_next`): two byte
    /// ranges as (address, length) pairs, and a count bumped with each new
    /// hint. Only ever prefetched, never dereferenced (a prefetch of any
    /// address is harmless), so a stale or torn hint costs at most a wasted
    /// prefetch.
    hint: [AtomicUsize; 4],
    hint_seq: AtomicU64,
    /// Workers parked (or about to park) on `wake`.
    sleepers: AtomicUsize,
    /// Installed scopes now running (workers spin only while one is).
    active: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

/// The team: `threads - 1` workers plus whichever thread runs a region.
pub struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

thread_local! {
    /// The team installed on this thread (`Team::install`), if any.
    static CURRENT: Cell<*const Team> = const { Cell::new(std::ptr::null()) };
}

impl Team {
    /// A team of `threads` (at least 1: then every region runs on the caller).
    pub fn new(threads: usize) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            inside: AtomicUsize::new(0),
            hint: Default::default(),
            hint_seq: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let mut team = Team { shared, workers: Vec::new() };
        for i in 1..threads.max(1) {
            let shared = Arc::clone(&team.shared);
            let handle =
                std::thread::Builder::new().name(format!("engine-team-{i}")).spawn(move || worker(&shared, 0))?;
            team.workers.push(handle);
        }
        Ok(team)
    }

    /// Threads a region runs on (the workers and the caller).
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f` with this team as the one regions started on this thread use.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(*const Team, &'a AtomicUsize);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.1.fetch_sub(1, Ordering::SeqCst);
                CURRENT.with(|c| c.set(self.0));
            }
        }
        self.shared.active.fetch_add(1, Ordering::SeqCst);
        let _restore = Restore(CURRENT.with(|c| c.replace(self as *const Team)), &self.shared.active);
        f()
    }

    /// Calls `f(i)` for every `i < tasks` across the team; returns when all
    /// have returned (and re-raises a task's panic).
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks <= 1 || self.workers.is_empty() {
            (0..tasks).for_each(f);
            return;
        }
        // SAFETY: only the lifetime is erased; see `Job::f`.
        let f: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        let job =
            Job { f, tasks, next: AtomicUsize::new(0), done: AtomicUsize::new(0), panicked: AtomicBool::new(false) };
        let s = &*self.shared;
        s.job.store(&job as *const Job as *mut Job, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.park.lock().unwrap_or_else(PoisonError::into_inner);
            s.wake.notify_all();
        }
        job.work();
        spin_until(|| job.done.load(Ordering::Acquire) >= tasks);
        // Withdraw the job, then wait until no worker can still reach it: only
        // then may it leave this stack frame (see `Shared::inside`).
        s.job.store(std::ptr::null_mut(), Ordering::SeqCst);
        spin_until(|| s.inside.load(Ordering::SeqCst) == 0);
        if job.panicked.load(Ordering::Relaxed) {
            panic!("a kernel task panicked on the engine's thread team");
        }
    }
}

/// Spins until `ready()`, yielding the core after a while (a worker that was
/// descheduled mid-task needs it back to finish).
#[inline]
fn spin_until(ready: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        spins += 1;
        if spins < 4096 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.park.lock().unwrap_or_else(PoisonError::into_inner);
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// `seen`: the epoch when the team was made (a region started before this
/// thread first runs is still picked up).
fn worker(s: &Shared, mut seen: u64) {
    let mut warmed = 0u64;
    loop {
        let started = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            let e = s.epoch.load(Ordering::SeqCst);
            if e != seen {
                seen = e;
                break;
            }
            spins = spins.wrapping_add(1);
            let spin = !spins.is_multiple_of(256) || started.elapsed() < SPIN_FOR;
            if spin && s.active.load(Ordering::Relaxed) > 0 {
                std::hint::spin_loop();
                continue;
            }
            let mut g = s.park.lock().unwrap_or_else(PoisonError::into_inner);
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.epoch.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                g = s.wake.wait(g).unwrap_or_else(PoisonError::into_inner);
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        s.inside.fetch_add(1, Ordering::SeqCst);
        let job = s.job.load(Ordering::SeqCst);
        // SAFETY: counted in `inside` before the read, so the region that owns
        // the job does not return (and free it) until this worker counts out.
        if let Some(job) = unsafe { job.as_ref() } {
            job.work();
        }
        s.inside.fetch_sub(1, Ordering::SeqCst);
        // Out of tasks: while the caller finishes its own and runs the serial
        // steps before the next region, pull in what that region reads first.
        let h = s.hint_seq.load(Ordering::Acquire);
        if h != warmed && s.active.load(Ordering::Relaxed) > 0 {
            warmed = h;
            warm_hint(s, seen);
        }
    }
}

/// Prefetches the hinted ranges line by line into this core's L2, until done
/// or until the next region starts (the epoch moves past `seen`).
fn warm_hint(s: &Shared, seen: u64) {
    for r in 0..2 {
        let (addr, len) = (s.hint[2 * r].load(Ordering::Relaxed), s.hint[2 * r + 1].load(Ordering::Relaxed));
        let mut off = 0;
        while off < len {
            if s.epoch.load(Ordering::Relaxed) != seen {
                return;
            }
            for line in (off..len.min(off + 1024)).step_by(64) {
                prefetch_line(addr.wrapping_add(line));
            }
            off += 1024;
        }
    }
}

#[inline(always)]
fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing the program sees; any
    // address is allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Tells the installed team's idle workers which bytes the next region reads
/// first (at most two ranges), to prefetch while the caller finishes the
/// current region and runs the serial steps before the next. No-op outside an
/// install. A hint only moves data into caches: results never depend on it.
pub fn prefetch_next(ranges: &[&[u8]]) {
    current(|team| {
        if let Some(t) = team {
            let s = &*t.shared;
            for r in 0..2 {
                let (addr, len) = ranges.get(r).map_or((0, 0), |b| (b.as_ptr() as usize, b.len()));
                s.hint[2 * r].store(addr, Ordering::Relaxed);
                s.hint[2 * r + 1].store(len, Ordering::Relaxed);
            }
            s.hint_seq.fetch_add(1, Ordering::Release);
        }
    })
}

/// The team installed on this thread, if any.
fn current<R>(f: impl FnOnce(Option<&Team>) -> R) -> R {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: `install` keeps the team borrowed while the pointer is set.
    f(unsafe { p.as_ref() })
}

/// Calls `f(i)` for every `i < n`: on the installed team, else on rayon.
pub fn for_each_index(n: usize, f: impl Fn(usize) + Sync) {
    current(|team| match team {
        Some(t) => t.run(n, &f),
        None => (0..n).into_par_iter().for_each(&f),
    })
}

/// `[f(0), .., f(n - 1)]`, computed as [`for_each_index`] runs them.
pub fn map_indices<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    current(|team| match team {
        Some(t) => {
            let slots: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
            t.run(n, &|i| *slots[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(f(i)));
            slots
                .into_iter()
                .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner).expect("every task ran"))
                .collect()
        }
        None => (0..n).into_par_iter().map(&f).collect(),
    })
}

/// A vector of `len` values that the tasks of one region fill in place, each
/// task its own disjoint ranges (column blocks of rows, attention heads), so
/// no task result is first gathered and then copied by the calling thread.
/// [`Scatter::finish`] hands the vector back once every element was written.
pub struct Scatter<T> {
    buf: Vec<T>,
    len: usize,
}

/// The pointer the tasks write through (`Scatter::writer`).
#[derive(Clone, Copy)]
pub struct ScatterWriter<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: writers only copy `T: Send` values into disjoint ranges (the
// contract of `ScatterWriter::write`).
unsafe impl<T: Send> Send for ScatterWriter<T> {}
unsafe impl<T: Send> Sync for ScatterWriter<T> {}

impl<T: Copy> Scatter<T> {
    /// Room for `len` values, not yet written.
    pub fn new(len: usize) -> Self {
        Scatter { buf: Vec::with_capacity(len), len }
    }

    pub fn writer(&mut self) -> ScatterWriter<T> {
        ScatterWriter { ptr: self.buf.as_mut_ptr(), len: self.len }
    }

    /// The vector, every element written.
    ///
    /// # Safety
    /// Every index `0..len` must have been written through the writer.
    pub unsafe fn finish(mut self) -> Vec<T> {
        // SAFETY: capacity >= len and every element is initialised (caller).
        unsafe { self.buf.set_len(self.len) };
        self.buf
    }
}

impl<T: Copy> ScatterWriter<T> {
    /// Copies `src` to indices `at..at + src.len()`.
    ///
    /// # Safety
    /// No other write of the region may touch these indices, and the
    /// `Scatter` must outlive the region.
    #[inline]
    pub unsafe fn write(&self, at: usize, src: &[T]) {
        assert!(at + src.len() <= self.len, "scatter: {}..{} past {}", at, at + src.len(), self.len);
        // SAFETY: in bounds (asserted), disjoint from every other write (caller).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(at), src.len()) };
    }

    /// The `rows` rows of `width` values at `at`, `at + ld`, ... that one task
    /// writes in place (a column block of a row-major `[rows, ld]` product).
    ///
    /// # Safety
    /// No other write of the region may touch these values, and the
    /// `Scatter` must outlive the block.
    pub unsafe fn block(&self, at: usize, rows: usize, ld: usize, width: usize) -> ScatterBlock<'_, T> {
        assert!(width <= ld || rows <= 1, "scatter: rows of {width} overlap at stride {ld}");
        assert!(
            at <= self.len && (rows == 0 || at + (rows - 1) * ld + width <= self.len),
            "scatter: block past {}",
            self.len
        );
        // SAFETY: in bounds (asserted); exclusive to this task (caller).
        ScatterBlock { ptr: unsafe { self.ptr.add(at) }, ld, rows, width, _values: PhantomData }
    }
}

/// Rows of `width` values `ld` apart, written in place by one task: a column
/// block of a product that other tasks fill beside it.
pub struct ScatterBlock<'a, T> {
    ptr: *mut T,
    ld: usize,
    rows: usize,
    width: usize,
    _values: PhantomData<&'a mut [T]>,
}

impl<'a, T> ScatterBlock<'a, T> {
    /// A contiguous `[rows, width]` block (`values.len()` must be a multiple of `width`).
    pub fn contiguous(values: &'a mut [T], width: usize) -> Self {
        assert!(width > 0 && values.len().is_multiple_of(width), "block: {} values in rows of {width}", values.len());
        let rows = values.len() / width;
        ScatterBlock { ptr: values.as_mut_ptr(), ld: width, rows, width, _values: PhantomData }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// Row `r`'s `width` values.
    #[inline]
    pub fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows, "block: row {r} of {}", self.rows);
        // SAFETY: rows are disjoint, in bounds and exclusive to this block (see `block`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r * self.ld), self.width) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_index_runs_once_on_the_team_and_without_it() {
        let team = Team::new(3).unwrap();
        assert_eq!(team.threads(), 3);
        for n in [0, 1, 2, 7, 100] {
            let counts: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            team.install(|| for_each_index(n, |i| _ = counts[i].fetch_add(1, Ordering::Relaxed)));
            for_each_index(n, |i| _ = counts[i].fetch_add(1, Ordering::Relaxed));
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 2), "n {n}");
            let on_team = team.install(|| map_indices(n, |i| i * i));
            assert_eq!(on_team, (0..n).map(|i| i * i).collect::<Vec<_>>());
            assert_eq!(map_indices(n, |i| i * i), on_team);
        }
    }

    #[test]
    fn regions_after_the_workers_parked_still_complete() {
        let team = Team::new(2).unwrap();
        for round in 0..3 {
            // Longer than SPIN_FOR: the worker parks and must be woken.
            std::thread::sleep(SPIN_FOR * 5);
            let sum = AtomicUsize::new(0);
            team.install(|| for_each_index(64, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
            assert_eq!(sum.load(Ordering::Relaxed), 64 * 63 / 2, "round {round}");
        }
    }

    #[test]
    fn workers_park_when_no_scope_is_installed() {
        let team = Team::new(2).unwrap();
        team.install(|| for_each_index(4, |_| {}));
        // Outside any install the worker must not spin: it parks well within SPIN_FOR.
        let t0 = Instant::now();
        while team.shared.sleepers.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "the worker never parked");
            std::thread::yield_now();
        }
        // And a region after that wakes it.
        let sum = AtomicUsize::new(0);
        team.install(|| for_each_index(8, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
        assert_eq!(sum.load(Ordering::Relaxed), 28);
    }

    #[test]
    fn work_is_shared_between_threads() {
        let team = Team::new(2).unwrap();
        let names = Mutex::new(std::collections::BTreeSet::new());
        // Tasks long enough that the caller cannot take them all before the
        // spinning worker claims one.
        team.install(|| {
            for_each_index(16, |_| {
                std::thread::sleep(Duration::from_millis(2));
                names.lock().unwrap().insert(std::thread::current().name().map(str::to_string));
            })
        });
        let names = names.into_inner().unwrap();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_worker_warming_a_hint_still_joins_the_next_region() {
        let team = Team::new(2).unwrap();
        // A hint far larger than a region takes to prefetch, at addresses no
        // buffer owns (prefetching never faults): the worker must leave it
        // as soon as the next region starts, or it never takes a task.
        let huge = [(1usize << 40, 1usize << 40)];
        team.install(|| {
            for round in 0..3 {
                let s = &*team.shared;
                for (r, &(addr, len)) in huge.iter().enumerate() {
                    s.hint[2 * r].store(addr, Ordering::Relaxed);
                    s.hint[2 * r + 1].store(len, Ordering::Relaxed);
                }
                s.hint_seq.fetch_add(1, Ordering::Release);
                // The worker starts warming after this region's tasks...
                for_each_index(4, |_| {});
                let names = Mutex::new(std::collections::BTreeSet::new());
                // ...and must still claim tasks of this one.
                for_each_index(16, |_| {
                    std::thread::sleep(Duration::from_millis(2));
                    names.lock().unwrap().insert(std::thread::current().name().map(str::to_string));
                });
                assert_eq!(names.into_inner().unwrap().len(), 2, "round {round}");
            }
        });
        // Outside an install a hint is a no-op, and a stale one is harmless.
        prefetch_next(&[&[0u8; 64]]);
        let stale = vec![1u8; 4096];
        team.install(|| prefetch_next(&[&stale]));
        drop(stale);
        let sum = AtomicUsize::new(0);
        team.install(|| for_each_index(8, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
        assert_eq!(sum.load(Ordering::Relaxed), 28);
    }

    #[test]
    fn a_panicking_task_is_raised_in_the_caller_and_the_team_survives() {
        let team = Team::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.install(|| for_each_index(8, |i| assert!(i != 5, "task five fails")))
        }));
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        team.install(|| for_each_index(8, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
        assert_eq!(sum.load(Ordering::Relaxed), 28);
    }

    #[test]
    fn install_is_scoped_and_restores_the_outer_team() {
        let (a, b) = (Team::new(1).unwrap(), Team::new(1).unwrap());
        let id = || current(|t| t.map(|t| t as *const Team));
        assert_eq!(id(), None);
        a.install(|| {
            assert_eq!(id(), Some(&a as *const Team));
            b.install(|| assert_eq!(id(), Some(&b as *const Team)));
            assert_eq!(id(), Some(&a as *const Team));
        });
        assert_eq!(id(), None);
    }

    #[test]
    fn column_blocks_fill_a_product_in_place_from_every_task() {
        let (rows, n, width) = (5, 12, 4);
        let mut y = Scatter::new(rows * n);
        let writer = y.writer();
        for_each_index(n / width, |t| {
            // SAFETY: task t alone writes columns t*width..(t+1)*width.
            let mut block = unsafe { writer.block(t * width, rows, n, width) };
            assert_eq!((block.rows(), block.width()), (rows, width));
            for r in 0..rows {
                for (c, v) in block.row(r).iter_mut().enumerate() {
                    *v = (r * n + t * width + c) as u32;
                }
            }
        });
        // SAFETY: the three blocks cover every column of every row.
        let y = unsafe { y.finish() };
        assert_eq!(y, (0..(rows * n) as u32).collect::<Vec<_>>());
        let mut flat = vec![0u8; 6];
        let mut block = ScatterBlock::contiguous(&mut flat, 3);
        block.row(1).copy_from_slice(&[1, 2, 3]);
        assert_eq!(flat, [0, 0, 0, 1, 2, 3]);
    }

    #[test]
    #[should_panic(expected = "block past")]
    fn a_block_past_the_end_is_refused() {
        let mut y = Scatter::<f32>::new(20);
        let writer = y.writer();
        // SAFETY: never written; the bounds check refuses it first.
        let _ = unsafe { writer.block(2, 5, 4, 4) };
    }

    #[test]
    #[should_panic(expected = "block past")]
    fn an_empty_block_past_the_end_is_refused() {
        let mut y = Scatter::<f32>::new(20);
        let writer = y.writer();
        // SAFETY: never written; the bounds check refuses it first.
        let _ = unsafe { writer.block(21, 0, 4, 4) };
    }

    #[test]
    #[should_panic(expected = "row 2 of 2")]
    fn a_row_past_the_block_is_refused() {
        let mut v = vec![0.0f32; 8];
        ScatterBlock::contiguous(&mut v, 4).row(2);
    }
}
