//! Tests of the activation-quantized path: llama.cpp's block quantization on
//! hand-built blocks, every CPU path this machine supports (scalar, AVX2,
//! AVX-512, AMX) bit for bit against scalar, rows independent of batch size and
//! threads, the AVX-512 weight layout, and the f64 value of the formula. Each
//! path loop prints the paths it ran and the ones this CPU cannot run.

use super::*;
use crate::kernels::cpu::quant::matmul_quant_on;

/// xorshift64* bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// Random blocks of `kind` (every byte value, so Q8_0 quants include -128).
fn weights(kind: QuantKind, rows: usize, cols: usize, seed: u64) -> QuantMatrix {
    let mut rng = Rng(seed);
    let mut data = Vec::new();
    for _ in 0..rows * cols / QK {
        data.extend(f16::from_f32(rng.uniform(0.001, 0.05)).to_le_bytes());
        let n = match kind {
            QuantKind::Q4K => {
                // dmin, then the 6-bit sub-block scale and minimum.
                data.extend(f16::from_f32(rng.uniform(0.0, 0.01)).to_le_bytes());
                data.extend([rng.byte() % 64, rng.byte() % 64]);
                16
            }
            QuantKind::Q4_0 => 16,
            QuantKind::Q5_0 => 20,
            // sc[2] (every i8, -128 included), qh4, qh5, nibbles.
            QuantKind::Q6K => 26,
            QuantKind::Q4_1 => {
                data.extend(f16::from_f32(rng.uniform(-0.4, 0.0)).to_le_bytes());
                16
            }
            QuantKind::Q8_0 => 32,
        };
        data.extend((0..n).map(|_| rng.byte()));
    }
    QuantMatrix::new(kind, rows, cols, data).unwrap()
}

/// Activations with a different range per block (and one all-zero block).
fn activations(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut x: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let scale = [0.01, 1.0, 30.0, 0.3][(i / QK) % 4];
            rng.uniform(-scale, scale)
        })
        .collect();
    x[QK..2 * QK].fill(0.0);
    x
}

const KINDS: [QuantKind; 6] = QuantKind::ALL;

#[test]
fn quantization_of_hand_built_blocks_follows_llama_cpp_reference() {
    // Block 0: max |x| = 127, so d = 1 and 1/d = 1: ties round away from zero
    // (roundf), not to even.
    let mut x = vec![0.0f32; 4 * QK];
    x[..8].copy_from_slice(&[2.5, -2.5, 0.5, -0.5, 1.49, 127.0, -127.0, 3.5]);
    // Block 1: all zero: d = 0, 1/d taken as 0.
    // Block 2: max |x| = 254, d = 2.
    x[2 * QK..2 * QK + 4].copy_from_slice(&[5.0, -3.0, 254.0, 1.0]);
    // Block 3: max |x| = 1, d = 1/127 (not an f16: stored rounded).
    x[3 * QK..3 * QK + 3].copy_from_slice(&[1.0, 0.25, -0.25]);
    let q = Q8Rows::quantize(&x, 1, 4 * QK);
    let mut want = vec![0i8; 4 * QK];
    want[..8].copy_from_slice(&[3, -3, 1, -1, 1, 127, -127, 4]);
    want[2 * QK..2 * QK + 4].copy_from_slice(&[3, -2, 127, 1]);
    want[3 * QK..3 * QK + 3].copy_from_slice(&[127, 32, -32]);
    assert_eq!(q.qs, want);
    // f16(1/127) = 1032 / 2^17.
    assert_eq!(q.d, vec![1.0, 0.0, 2.0, 1032.0 / 131072.0]);
    // s = f16(Σq · d): 3-3+1-1+1+127-127+4 = 5; 0; (3-2+127+1) · 2 = 258;
    // 127 · (1/127 in f32) rounds to 1 in f16.
    assert_eq!(q.s, vec![5.0, 0.0, 258.0, 1.0]);
    assert_eq!(q.sums, vec![5, 0, 129, 127]);
    // Rows are quantized independently.
    let two = Q8Rows::quantize(&[x.clone(), vec![100.0; 4 * QK]].concat(), 2, 4 * QK);
    assert_eq!(two.qs[..4 * QK], q.qs[..]);
    assert_eq!(two.d[..4], q.d[..]);
    assert_eq!(two.qs[4 * QK..], vec![127i8; 4 * QK][..]);
}

/// The paths the tests below run here, printed so that a log shows which ones
/// a machine without AVX2 or AVX-512 did not exercise.
fn paths_under_test(test: &str) -> Vec<CpuPath> {
    let paths = CpuPath::supported();
    let skipped: Vec<CpuPath> = CpuPath::ALL.into_iter().filter(|p| !paths.contains(p)).collect();
    eprintln!("{test}: running CPU paths {paths:?}; not supported by this CPU (not run): {skipped:?}");
    paths
}

#[test]
fn every_path_gives_the_scalar_bits() {
    let paths = paths_under_test("every_path_gives_the_scalar_bits");
    for kind in KINDS {
        // AVX2: in-place tiles (1..4 rows) and panel tiles (3 x 2 groups and
        // the remainders), with whole and partial groups of eight weight rows.
        // AVX-512: one-row tiles of 1..4 groups, 8 x 1 tiles and remainders,
        // partial groups of sixteen; the model's shapes. AMX: whole 16-row
        // tiles (one block and many, even and odd block counts) and the rows
        // left over after them, which take the AVX-512 kernel.
        for (m, n, k) in [
            (1, 37, 64),
            (2, 16, 64),
            (3, 70, 96),
            (4, 9, 32),
            (5, 24, 64),
            (6, 20, 64),
            (7, 33, 64),
            (9, 41, 576),
            (17, 5, 32),
            (64, 48, 96),
            (1, 80, 576),
            (1, 192, 1536),
            (2, 50, 576),
            (13, 64, 1536),
            (16, 16, 32),
            (16, 37, 64),
            (32, 160, 96),
            (33, 70, 576),
            (48, 33, 1536),
        ] {
            let w = weights(kind, n, k, 11 + m as u64);
            let x = activations(m, k, 5 + n as u64);
            let s = matmul_q8_on(CpuPath::Scalar, &x, &w, m);
            let bits = |y: &[f32]| y.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for &path in &paths {
                let v = matmul_q8_on(path, &x, &w, m);
                assert_eq!(bits(&s), bits(&v), "{kind:?} {path} m {m} n {n} k {k}");
            }
        }
    }
}

#[test]
fn the_interleaved_layout_holds_exactly_the_gguf_bytes() {
    // Portable: checked on every machine, AVX-512 or not.
    for kind in KINDS {
        for rows in [1, 15, 16, 17, 40] {
            let w = weights(kind, rows, 96, 40 + rows as u64);
            let p = w.packed16();
            assert_eq!((p.rows, p.cols, p.nb, p.groups), (rows, 96, 3, rows.div_ceil(16)));
            assert_eq!(p.data.len(), p.groups * 3 * 16 * kind.block_bytes());
            assert_eq!(p.unpack(), w.data(), "{kind:?} rows {rows}");
        }
    }
    // Element (row 17, block 1, element 21) of a Q4_1 matrix: the high nibble
    // of packed byte 5 = chunk 1, lane 1 of group 1.
    let w = weights(QuantKind::Q4_1, 40, 96, 7);
    let p = w.packed16();
    let byte = weight_block(&w, 17, 1)[4 + 5];
    assert_eq!(p.data[(3 + 1) * 320 + 64 + 64 + 4 + 1], byte);
    assert_eq!(p.data[(3 + 1) * 320 + 2..(3 + 1) * 320 + 4], weight_block(&w, 17, 1)[..2]);
    // The same element of a Q4_0 matrix: its quants start after d (byte 2),
    // and a group block's after d[16] (byte 32).
    let w = weights(QuantKind::Q4_0, 40, 96, 7);
    let p = w.packed16();
    let byte = weight_block(&w, 17, 1)[2 + 5];
    assert_eq!(p.data[(3 + 1) * 288 + 32 + 64 + 4 + 1], byte);
    assert_eq!(p.data[(3 + 1) * 288 + 2..(3 + 1) * 288 + 4], weight_block(&w, 17, 1)[..2]);
}

#[test]
fn rows_identical_whatever_the_batch_size_and_thread_count() {
    let (n, k) = (75, 192);
    let paths = paths_under_test("rows_identical_whatever_the_batch_size_and_thread_count");
    for kind in KINDS {
        let w = weights(kind, n, k, 3);
        let x = activations(64, k, 4);
        for &path in &paths {
            let alone: Vec<Vec<f32>> = (0..64).map(|r| matmul_q8_on(path, &x[r * k..(r + 1) * k], &w, 1)).collect();
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                for m in [1, 3, 9, 16, 17, 33, 64] {
                    let y = pool.install(|| matmul_q8_on(path, &x[..m * k], &w, m));
                    for (r, want) in alone.iter().take(m).enumerate() {
                        assert_eq!(
                            &y[r * n..(r + 1) * n],
                            &want[..],
                            "{kind:?} {path} threads {threads} m {m} row {r}"
                        );
                    }
                }
            }
        }
    }
}

/// The module doc's formula in f64 from the same quants and scales, with the
/// sum of the absolute values of its terms.
fn reference(a: &Q8Rows, r: usize, w: &QuantMatrix, j: usize) -> (f64, f64) {
    let nb = a.cols / QK;
    let (mut sum, mut abs) = (0.0f64, 0.0f64);
    for b in 0..nb {
        let blk = weight_block(w, j, b);
        // Q4_K: d·sc and -(dmin·m), exact in f32 and f64 alike.
        let (dw, mw) = w.kind.scales(blk);
        let (dw, mw) = (f64::from(dw), f64::from(mw));
        let (da, sa) = (f64::from(a.d[r * nb + b]), f64::from(a.s[r * nb + b]));
        let mut qs = [0.0f64; QK];
        match w.kind {
            QuantKind::Q4_0 => {
                // llama.cpp's dequantize_row_q4_0: x = d · (q - 8).
                for (e, &byte) in blk[2..18].iter().enumerate() {
                    (qs[e], qs[e + 16]) = (f64::from(byte & 0x0f) - 8.0, f64::from(byte >> 4) - 8.0);
                }
            }
            QuantKind::Q6K => {
                // The repacked Q6_K block: bit e of qh4 (bytes 4..8) and of qh5
                // (8..12) are bits 4 and 5 of element e; x = d · sc[e / 16] · (q - 32).
                let qh4 = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
                let qh5 = u32::from_le_bytes([blk[8], blk[9], blk[10], blk[11]]);
                for (e, q) in qs.iter_mut().enumerate() {
                    let nib = u32::from(blk[12 + e % 16] >> (4 * (e / 16))) & 0x0f;
                    let six = nib | ((qh4 >> e) & 1) << 4 | ((qh5 >> e) & 1) << 5;
                    *q = f64::from(blk[2 + e / 16] as i8) * (f64::from(six) - 32.0);
                }
            }
            QuantKind::Q5_0 => {
                // llama.cpp's dequantize_row_q5_0: the fifth bit of element e is
                // bit e of qh (u32, little-endian); x = d · (q - 16).
                let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                for (e, &byte) in blk[6..22].iter().enumerate() {
                    let (h0, h1) = (((qh >> e) & 1) << 4, ((qh >> (e + 16)) & 1) << 4);
                    qs[e] = f64::from(u32::from(byte & 0x0f) | h0) - 16.0;
                    qs[e + 16] = f64::from(u32::from(byte >> 4) | h1) - 16.0;
                }
            }
            QuantKind::Q4_1 | QuantKind::Q4K => {
                let at = w.kind.quants_at();
                for (e, &byte) in blk[at..at + 16].iter().enumerate() {
                    (qs[e], qs[e + 16]) = (f64::from(byte & 0x0f), f64::from(byte >> 4));
                }
                let t = mw * sa;
                (sum, abs) = (sum + t, abs + t.abs());
            }
            QuantKind::Q8_0 => {
                for (e, &byte) in blk[2..34].iter().enumerate() {
                    qs[e] = f64::from(byte as i8);
                }
            }
        }
        for (e, &wq) in qs.iter().enumerate() {
            let t = dw * da * wq * f64::from(a.qs[r * a.cols + b * QK + e]);
            (sum, abs) = (sum + t, abs + t.abs());
        }
    }
    (sum, abs)
}

#[test]
fn within_tolerance_of_the_f64_formula_and_near_the_exact_path() {
    // Stated tolerance: |y - f64 formula| <= 1e-5 · Σ|terms| (f32 rounding of
    // at most a few dozen block terms and of the products d_w·d_a).
    for kind in KINDS {
        let (m, n, k) = (5, 33, 576);
        let w = weights(kind, n, k, 21);
        let x = activations(m, k, 22);
        let a = Q8Rows::quantize(&x, m, k);
        for path in paths_under_test("within_tolerance_of_the_f64_formula_and_near_the_exact_path") {
            let y = matmul_q8_rows_on(path, &a, &w);
            let exact = matmul_quant_on(path, &x, &w, m);
            for r in 0..m {
                for j in 0..n {
                    let (want, abs) = reference(&a, r, &w, j);
                    let got = f64::from(y[r * n + j]);
                    assert!(
                        (got - want).abs() <= 1e-5 * abs,
                        "{kind:?} {path} ({r},{j}): {got} vs {want} (Σ|t| {abs})"
                    );
                    // 8-bit activations: within 2% of Σ|terms| of the exact product.
                    let e = f64::from(exact[r * n + j]);
                    assert!((got - e).abs() <= 0.02 * abs + 1e-6, "{kind:?} {path} ({r},{j}): {got} vs exact {e}");
                }
            }
        }
    }
}

#[test]
fn every_path_quantizes_to_the_same_bytes() {
    // Ties at every magnitude (x = k + 0.5 with d = 1), values just below and
    // above ties, zero blocks, negative zero and random blocks.
    let mut x: Vec<f32> = (0..QK).map(|i| if i == 0 { 127.0 } else { i as f32 - 16.5 }).collect();
    x.extend(
        (0..QK).map(|i| if i == 0 { -127.0 } else { f32::from_bits((i as f32 + 0.5).to_bits() - (i % 2) as u32) }),
    );
    x.extend([0.0f32; QK]);
    x.extend((0..QK).map(|i| if i % 2 == 0 { -0.0 } else { 1e-30 }));
    x.extend(activations(8, 4 * QK, 9));
    let rows = x.len() / QK;
    let want = Q8Rows::quantize_on(CpuPath::Scalar, &x, rows, QK);
    assert_eq!(want.qs[..4], [127, -16, -15, -14], "ties round away from zero");
    for path in paths_under_test("every_path_quantizes_to_the_same_bytes") {
        assert_eq!(Q8Rows::quantize_on(path, &x, rows, QK), want, "{path}");
    }
    // Enough rows for the parallel row chunks, and each row alone (the serial
    // path) gives the same bytes.
    assert!(rows >= 2 * QUANTIZE_ROWS_PER_TASK);
    for (r, xr) in x.chunks_exact(QK).enumerate() {
        let one = Q8Rows::quantize_on(CpuPath::Scalar, xr, 1, QK);
        assert_eq!(
            (&one.qs[..], one.d[0], one.s[0], one.sums[0]),
            (&want.qs[r * QK..(r + 1) * QK], want.d[r], want.s[r], want.sums[r]),
            "row {r}"
        );
    }
}

#[test]
fn many_weights_over_one_input_equal_each_product_alone() {
    let k = 96;
    for kind in KINDS {
        let ws = [weights(kind, 40, k, 31), weights(kind, 8, k, 32), weights(kind, 77, k, 33)];
        let refs: Vec<&QuantMatrix> = ws.iter().collect();
        for path in paths_under_test("many_weights_over_one_input_equal_each_product_alone") {
            for m in [1, 3, 9] {
                let x = activations(m, k, 34 + m as u64);
                let ys = matmul_q8_many_on(path, &x, &refs, m);
                assert_eq!(ys.len(), 3);
                for (w, y) in ws.iter().zip(&ys) {
                    assert_eq!(y, &matmul_q8_on(path, &x, w, m), "{kind:?} {path} m {m} n {}", w.rows);
                }
            }
        }
    }
}

#[test]
fn swiglu_fused_into_the_gate_up_region_gives_the_unfused_bytes() {
    for kind in KINDS {
        for path in paths_under_test("swiglu_fused_into_the_gate_up_region_gives_the_unfused_bytes") {
            // Decode (one task per 32-column multiple) and prefill shapes, a
            // last task narrower than the others, and no rows at all.
            for (m, n, k) in
                [(1, 96, 64), (1, 1536, 576), (3, 160, 96), (5, 64, 32), (9, 224, 96), (40, 96, 64), (0, 64, 32)]
            {
                let (g, u) = (weights(kind, n, k, 41 + n as u64), weights(kind, n, k, 43 + m as u64));
                let x = if m == 0 { Vec::new() } else { activations(m, k, 47 + m as u64) };
                let a = Q8Rows::quantize_on(path, &x, m, k);
                let fused = swiglu_q8_rows_on(path, &a, &g, &u);
                let mut h = matmul_q8_rows_on(path, &a, &g);
                crate::kernels::cpu::ops::silu_mul_in_place(&mut h, &matmul_q8_rows_on(path, &a, &u), path);
                let unfused = Q8Rows::quantize_on(path, &h, m, n);
                assert_eq!(fused, unfused, "{kind:?} {path} m {m} n {n} k {k}");
            }
        }
    }
}
