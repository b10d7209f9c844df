//! AMX (Advanced Matrix Extensions) on x86-64 Linux: whether this process may
//! use AMX-INT8 tiles, and the handful of tile instructions the q8 kernel
//! needs (`q8_amx.rs`).
//!
//! Usable means three things: the CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7),
//! the OS has enabled the tile state in XCR0 (bits 17 and 18), and Linux has
//! granted this process the tile data feature, which it enables per process on
//! request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; granted for
//! the whole process, inherited by its threads). [`int8_usable`] checks all
//! three, making that request once (the call is idempotent).
//!
//! Rust's AMX intrinsics are unstable, so the instructions are inline
//! assembly. The tile configuration is a plain 64-byte value handed to
//! `ldtilecfg` by address; the assembly block reads it, so the compiler keeps
//! every store that fills it (the bug that crashed GCC 12 builds of llama.cpp,
//! which dropped those stores, cannot happen here). A [`Tiles`] guard loads a
//! configuration on the current thread and releases the tiles when dropped,
//! so a thread never keeps tile state (and its 8 KiB of context) between
//! kernel calls.
//!
//! Must not: touch a tile register outside a live [`Tiles`] guard on the same
//! thread, or be reached on a CPU where [`int8_usable`] is false.

use std::arch::asm;
use std::marker::PhantomData;

/// `arch_prctl` requests (asm/prctl.h) and the XSAVE feature number of tile data.
#[cfg(target_os = "linux")]
const ARCH_GET_XCOMP_PERM: libc::c_ulong = 0x1022;
#[cfg(target_os = "linux")]
const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
#[cfg(target_os = "linux")]
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// CPUID.(EAX=7, ECX=0):EDX bits.
const EDX_AMX_BF16: u32 = 1 << 22;
const EDX_AMX_TILE: u32 = 1 << 24;
const EDX_AMX_INT8: u32 = 1 << 25;

fn leaf7_edx() -> u32 {
    // CPUID exists on every x86-64 CPU; leaf 7 is checked against the highest
    // supported leaf first.
    if std::arch::x86_64::__cpuid(0).eax < 7 {
        return 0;
    }
    std::arch::x86_64::__cpuid_count(7, 0).edx
}

/// Whether the OS saves and restores the tile configuration and tile data
/// (XCR0 bits 17 and 18, read with `xgetbv` once OSXSAVE says it may be).
fn os_enables_tile_state() -> bool {
    let osxsave = std::arch::x86_64::__cpuid(1).ecx & (1 << 27) != 0;
    if !osxsave {
        return false;
    }
    let (lo, _hi): (u32, u32);
    // SAFETY: OSXSAVE is set, so `xgetbv` with ECX = 0 is allowed.
    unsafe { asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") _hi, options(nomem, nostack, preserves_flags)) };
    lo & (0b11 << 17) == 0b11 << 17
}

/// Asks Linux for this process's permission to use tile data, and says
/// whether it is granted (true also when it was granted before).
#[cfg(not(target_os = "linux"))]
fn tile_data_permitted() -> bool {
    false
}

/// Asks Linux for this process's permission to use tile data, and says
/// whether it is granted (true also when it was granted before).
#[cfg(target_os = "linux")]
fn tile_data_permitted() -> bool {
    // SAFETY: arch_prctl with these requests reads or writes only the
    // process's permission state and the `u64` passed by address.
    unsafe {
        if libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 {
            return false;
        }
        let mut mask: u64 = 0;
        libc::syscall(libc::SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mut mask as *mut u64) == 0
            && mask & (1 << XFEATURE_XTILEDATA) != 0
    }
}

/// Whether this process can run AMX-INT8 tiles (see the module doc). Requests
/// the tile data permission when the CPU and OS support it.
pub fn int8_usable() -> bool {
    let edx = leaf7_edx();
    edx & EDX_AMX_TILE != 0 && edx & EDX_AMX_INT8 != 0 && os_enables_tile_state() && tile_data_permitted()
}

/// Whether the CPU reports AMX-BF16 (no kernel uses it).
pub fn bf16_in_cpu() -> bool {
    leaf7_edx() & EDX_AMX_BF16 != 0
}

/// A palette-1 tile configuration: for each of the eight tiles, its rows and
/// its bytes per row (a tile left at zero is unused).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl Default for TileConfig {
    fn default() -> Self {
        TileConfig { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] }
    }
}

impl TileConfig {
    /// Tile `t` (0..8) as `rows` rows (1..=16) of `bytes` bytes (4..=64, a
    /// multiple of 4).
    pub fn with_tile(mut self, t: usize, rows: u8, bytes: u16) -> Self {
        assert!(t < 8 && (1..=16).contains(&rows) && (4..=64).contains(&bytes) && bytes.is_multiple_of(4));
        self.rows[t] = rows;
        self.colsb[t] = bytes;
        self
    }
}

/// The tile configuration loaded on this thread; the tiles are released when
/// it is dropped. Not `Send`: tile state belongs to the thread.
pub struct Tiles<'c> {
    _config: PhantomData<&'c TileConfig>,
    _thread: PhantomData<*const ()>,
}

impl<'c> Tiles<'c> {
    /// Loads `config` (`ldtilecfg`).
    ///
    /// # Safety
    /// [`int8_usable`] must have returned true in this process.
    pub unsafe fn load(config: &'c TileConfig) -> Tiles<'c> {
        // SAFETY: AMX is usable (caller); `config` is a valid palette-1
        // configuration (`with_tile` checks every tile's shape) of 64 bytes.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) config as *const TileConfig, options(nostack, readonly)) };
        Tiles { _config: PhantomData, _thread: PhantomData }
    }

    /// Tile `T` := 0.
    #[inline(always)]
    pub fn zero<const T: u8>(&self) {
        // SAFETY: a configuration is loaded on this thread (the guard lives).
        unsafe { asm!("tilezero tmm{t}", t = const T, options(nomem, nostack, preserves_flags)) };
    }

    /// Tile `T` := the configured rows of `p`, `stride` bytes apart.
    ///
    /// # Safety
    /// Every configured row of tile `T` must be readable at `p + i * stride`.
    #[inline(always)]
    pub unsafe fn load_tile<const T: u8>(&self, p: *const u8, stride: usize) {
        // SAFETY: the caller guarantees the reads; the configuration is loaded.
        unsafe {
            asm!("tileloadd tmm{t}, [{p} + {s} * 1]", t = const T, p = in(reg) p, s = in(reg) stride,
                 options(nostack, readonly, preserves_flags))
        };
    }

    /// The configured rows of tile `T` to `p`, `stride` bytes apart.
    ///
    /// # Safety
    /// Every configured row of tile `T` must be writable at `p + i * stride`.
    #[inline(always)]
    pub unsafe fn store_tile<const T: u8>(&self, p: *mut u8, stride: usize) {
        // SAFETY: the caller guarantees the writes; the configuration is loaded.
        unsafe {
            asm!("tilestored [{p} + {s} * 1], tmm{t}", t = const T, p = in(reg) p, s = in(reg) stride,
                 options(nostack, preserves_flags))
        };
    }

    /// `C += A · B` over signed bytes (`tdpbssd`): C (i32, M x N) from A
    /// (M x K bytes) and B (K/4 rows of N groups of four bytes).
    #[inline(always)]
    pub fn dpbssd<const C: u8, const A: u8, const B: u8>(&self) {
        // SAFETY: a configuration is loaded on this thread; shapes that do not
        // match fault (#UD), they cannot touch memory.
        unsafe {
            asm!("tdpbssd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
                 options(nomem, nostack, preserves_flags))
        };
    }
}

impl Drop for Tiles<'_> {
    fn drop(&mut self) {
        // SAFETY: a configuration was loaded on this thread by `load`.
        unsafe { asm!("tilerelease", options(nomem, nostack, preserves_flags)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_layout_is_the_64_byte_palette_1_format() {
        assert_eq!(std::mem::size_of::<TileConfig>(), 64);
        let c = TileConfig::default().with_tile(0, 16, 64).with_tile(4, 8, 32);
        // SAFETY: TileConfig is 64 plain bytes.
        let bytes: [u8; 64] = unsafe { std::mem::transmute(c) };
        assert_eq!(bytes[0], 1, "palette");
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 64, "tile 0 bytes per row");
        assert_eq!(u16::from_le_bytes([bytes[24], bytes[25]]), 32, "tile 4 bytes per row");
        assert_eq!((bytes[48], bytes[52]), (16, 8), "rows of tiles 0 and 4");
    }

    #[test]
    fn a_tile_product_equals_the_integer_formula_where_amx_is_usable() {
        if !crate::kernels::cpu::dispatch::CpuFeatures::get().amx_int8 {
            eprintln!("AMX-INT8 is not usable here: tile product not run");
            return;
        }
        // A: 16 x 64 signed bytes, B: 16 rows of 16 x 4 signed bytes.
        let a: Vec<i8> = (0..16 * 64).map(|i| ((i * 37 + 11) % 256) as u8 as i8).collect();
        let b: Vec<i8> = (0..16 * 64).map(|i| ((i * 101 + 3) % 256) as u8 as i8).collect();
        let mut c = vec![0i32; 16 * 16];
        let cfg = TileConfig::default().with_tile(0, 16, 64).with_tile(1, 16, 64).with_tile(2, 16, 64);
        // SAFETY: AMX-INT8 is usable; every tile row read or written lies in
        // its 1 KiB buffer.
        unsafe {
            let t = Tiles::load(&cfg);
            t.zero::<0>();
            t.load_tile::<1>(a.as_ptr() as *const u8, 64);
            t.load_tile::<2>(b.as_ptr() as *const u8, 64);
            t.dpbssd::<0, 1, 2>();
            t.store_tile::<0>(c.as_mut_ptr() as *mut u8, 64);
        }
        for m in 0..16 {
            for n in 0..16 {
                let want: i32 =
                    (0..64).map(|k| i32::from(a[m * 64 + k]) * i32::from(b[(k / 4) * 64 + n * 4 + k % 4])).sum();
                assert_eq!(c[m * 16 + n], want, "C[{m}][{n}]");
            }
        }
    }
}
