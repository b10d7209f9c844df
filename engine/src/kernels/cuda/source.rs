//! The CUDA C source of every kernel the CUDA backend runs, as one string:
//! NVRTC compiles exactly this at startup (`compile.rs`), and the CI test
//! (`engine/tests/integration/cuda_kernels_compile.rs`) compiles exactly this to PTX and
//! then with ptxas to SASS for sm_80 and sm_90. One definition, no copies.
//!
//! The source includes no header (NVRTC's built-in ones differ between
//! releases): 16-bit conversions are PTX `cvt` instructions or bit operations,
//! and the bf16 and E4M3 encoders are ports of the `half` and `float8` crates'
//! (which `kv::format` uses on the CPU), so a key or value stored on the GPU has
//! the same bits as one stored on the CPU from the same f32.
//!
//! Compiled with `--fmad=false`: no multiply and add is fused unless written as
//! `fmaf`, so RMSNorm, RoPE and SwiGLU do the CPU's f32 operations in the CPU's
//! order, and the dot products' fused steps are explicit.
//!
//! Batch invariance: every output element is computed by one thread block
//! whose reductions run in an order fixed by the row's own shape (its context
//! length, the model's widths), never by how many rows share the launch.

/// Kernel names, as `extern "C"` in [`SOURCE`]: each must be found in the
/// compiled module.
pub const KERNELS: [&str; 12] = [
    "rms_norm",
    "rope",
    "silu_mul",
    "add_in_place",
    "cast_f16",
    "embed_rows",
    "gather_rows",
    "kv_write",
    "paged_attention_f16",
    "paged_attention_bf16",
    "paged_attention_k16v8",
    "fill_zero",
];

/// The attention kernel's block (threads), positions per softmax chunk, and
/// the widest head it serves: `plan.rs` reads these, the source defines them
/// from the same numbers (checked by a test).
pub const ATT_THREADS: u32 = 128;
pub const ATT_CHUNK: u32 = 64;
pub const ATT_MAX_HEAD_DIM: usize = 256;

/// The CUDA C of every kernel.
pub const SOURCE: &str = r#"
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define PAGE 16
#define ATT_THREADS 128
#define ATT_WARPS 4
#define ATT_CHUNK 64
#define ATT_MAX_HEAD_DIM 256
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/* ---- 16-bit and 8-bit element conversions ---------------------------- */

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* Round to nearest even, as the half crate's f16::from_f32. */
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float(((u32)b) << 16); }

/* The half crate's bf16::from_f32: NaN keeps its top bits (quiet), else round
   to nearest even. */
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    const u32 x = __float_as_uint(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (u16)((x >> 16) | 0x0040u);
    const u32 round_bit = 0x8000u;
    if ((x & round_bit) != 0u && (x & (3u * round_bit - 1u)) != 0u) return (u16)((x >> 16) + 1u);
    return (u16)(x >> 16);
}

/* E4M3 code to f32: the 7 magnitude bits at f32's exponent/mantissa boundary
   read as 2^-120 times the value (normals and subnormals alike), then the sign.
   Equal to kv::format::e4m3_table for every code but the NaNs (never written). */
__device__ __forceinline__ float e4m3_to_f32(u8 b) {
    const float mag = __uint_as_float(((u32)(b & 0x7Fu)) << 20) * __uint_as_float((127u + 120u) << 23); /* 2^120 */
    return __uint_as_float(__float_as_uint(mag) | (((u32)(b & 0x80u)) << 24));
}

/* f32 to E4M3, saturating to +-448, round to nearest even: the float8 crate's
   convert_to_fp8 (itself cuda_fp8.hpp's), on the f32 widened to f64. */
__device__ u8 f32_to_e4m3(float xf) {
    const u64 xbits = (u64)__double_as_longlong((double)xf);
    const u64 half_ulp = 1ull << 48; /* 53 - 4 - 1 */
    const u8 sign = (u8)((xbits >> 63) << 7);
    const u8 exp = (u8)((u16)((((u16)(xbits >> 52)) & 0x7FFu) - 1023u + 7u));
    const u8 mant = (u8)((xbits >> 49) & 0x7u);
    const u64 absx = xbits & 0x7FFFFFFFFFFFFFFFull;
    u8 res;
    if (absx <= 0x3F50000000000000ull) {
        res = 0;
    } else if (absx > 0x7FF0000000000000ull) {
        res = 0x7F;
    } else if (absx > 0x407D000000000000ull) {
        res = 0x7E;
    } else if (absx >= 0x3F90000000000000ull) {
        res = (u8)((exp << 3) | mant);
        const u64 round = xbits & ((half_ulp << 1) - 1);
        if (round > half_ulp || (round == half_ulp && (mant & 1u) != 0)) res = (u8)(res + 1);
    } else {
        const u8 shift = (u8)(1u - exp);
        const u8 m = (u8)(mant | 0x8u);
        res = (u8)(m >> shift);
        const u64 round = (xbits | (1ull << 52)) & ((half_ulp << (shift + 1)) - 1);
        const u64 halfway = half_ulp << shift;
        if (round > halfway || (round == halfway && (res & 1u) != 0)) res = (u8)(res + 1);
    }
    return (u8)(res | sign);
}

/* ---- row-wise and element-wise ops ------------------------------------ */

/* RMSNorm of each row (one block per row, blockDim a power of two):
   x / sqrt(mean(x^2) + eps) * w, the sum of squares in f64, as the CPU's. */
extern "C" __global__ void rms_norm(const float* x, const float* w, float* y, int dim, float eps) {
    __shared__ double red[256];
    const float* xr = x + (size_t)blockIdx.x * dim;
    float* yr = y + (size_t)blockIdx.x * dim;
    double s = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const double v = (double)xr[d];
        s += v * v;
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x >> 1; o > 0; o >>= 1) {
        if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    const float inv = (float)(1.0 / sqrt(red[0] / (double)dim + (double)eps));
    for (int d = threadIdx.x; d < dim; d += blockDim.x) yr[d] = xr[d] * inv * w[d];
}

/* Rotary embedding, rotate-half layout (the CPU's RopeTable::apply): row r of
   x (heads * 2 * half wide) at position pos[r]; cos/sin tables [pos][half]. */
extern "C" __global__ void rope(float* x, const float* cos_t, const float* sin_t, const int* pos, int heads, int half) {
    float* row = x + (size_t)blockIdx.x * heads * 2 * half;
    const float* c = cos_t + (size_t)pos[blockIdx.x] * half;
    const float* s = sin_t + (size_t)pos[blockIdx.x] * half;
    for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
        const int h = i / half, k = i - h * half;
        float* a = row + (size_t)h * 2 * half;
        const float x1 = a[k], x2 = a[k + half];
        a[k] = x1 * c[k] - x2 * s[k];
        a[k + half] = x2 * c[k] + x1 * s[k];
    }
}

/* SwiGLU into g: silu(g) * u. */
extern "C" __global__ void silu_mul(float* g, const float* u, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

/* The residual add: acc += d. */
extern "C" __global__ void add_in_place(float* acc, const float* d, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc[i] = acc[i] + d[i];
}

/* f32 to f16 (round to nearest even): a GEMM's input in the f16 weight mode. */
extern "C" __global__ void cast_f16(const float* x, u16* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = f32_to_f16(x[i]);
}

extern "C" __global__ void fill_zero(float* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = 0.0f;
}

/* Embedding lookup: row r of out is row ids[r] of table. */
extern "C" __global__ void embed_rows(const float* table, const u32* ids, float* out, int width) {
    const float* src = table + (size_t)ids[blockIdx.x] * width;
    float* dst = out + (size_t)blockIdx.x * width;
    for (int d = threadIdx.x; d < width; d += blockDim.x) dst[d] = src[d];
}

/* Row r of out is row rows[r] of x. */
extern "C" __global__ void gather_rows(const float* x, const int* rows, float* out, int width) {
    const float* src = x + (size_t)rows[blockIdx.x] * width;
    float* dst = out + (size_t)blockIdx.x * width;
    for (int d = threadIdx.x; d < width; d += blockDim.x) dst[d] = src[d];
}

/* ---- the paged KV cache ------------------------------------------------ */

/* Stores row r's keys and values (kv_dim wide) at token slot slots[r]
   (page * 16 + slot) of one layer, laid out [page][slot][kv_head][head_dim]
   as kv::KvCache. fmt 0: f16 keys and values; 1: bf16; 2: k16v8 (f16 keys,
   E4M3 values of v * inv_scale). */
extern "C" __global__ void kv_write(const float* k, const float* v, const long long* slots, u16* kc, void* vc,
                                    int kv_dim, int fmt, float inv_scale) {
    const size_t src = (size_t)blockIdx.x * kv_dim;
    const size_t dst = (size_t)slots[blockIdx.x] * kv_dim;
    for (int d = threadIdx.x; d < kv_dim; d += blockDim.x) {
        const float kx = k[src + d], vx = v[src + d];
        kc[dst + d] = fmt == 1 ? f32_to_bf16(kx) : f32_to_f16(kx);
        if (fmt == 2) {
            ((u8*)vc)[dst + d] = f32_to_e4m3(vx * inv_scale);
        } else {
            ((u16*)vc)[dst + d] = fmt == 1 ? f32_to_bf16(vx) : f32_to_f16(vx);
        }
    }
}

template <int FMT>
__device__ __forceinline__ float load_key(const u16* kc, size_t i) {
    return FMT == 1 ? bf16_to_f32(kc[i]) : f16_to_f32(kc[i]);
}

template <int FMT>
__device__ __forceinline__ float load_value(const void* vc, size_t i, float vscale) {
    if (FMT == 2) return e4m3_to_f32(((const u8*)vc)[i]) * vscale;
    const u16 b = ((const u16*)vc)[i];
    return FMT == 1 ? bf16_to_f32(b) : f16_to_f32(b);
}

/* Causal attention of query row blockIdx.x, head blockIdx.y, over positions
   0..=row_pos[r] of its sequence, read through the sequence's block table
   (tables + row_table[r]). One block of ATT_THREADS per (row, head); the
   positions go in chunks of ATT_CHUNK from 0 upward with an online softmax:
   scores (each a warp's dot product over head_dim, lanes strided, then a fixed
   shuffle tree), the chunk's max and the sum of its exponentials (warp 0,
   fixed order), and the weighted sum of values (each thread its own output
   elements, positions in ascending order, by fmaf). Nothing depends on the
   other rows of the launch. */
template <int FMT>
__device__ void attend(const float* q, float* out, const u16* kc, const void* vc, const int* tables,
                       const int* row_table, const int* row_pos, int heads, int kv_heads, int hd, float scale,
                       float vscale) {
    __shared__ float qs[ATT_MAX_HEAD_DIM];
    __shared__ float ps[ATT_CHUNK];
    __shared__ size_t bases[ATT_CHUNK];
    __shared__ float stat[3]; /* running max, running sum, this chunk's rescale */
    const int r = blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int group = heads / kv_heads, kvh = h / group;
    const int kv_dim = kv_heads * hd, q_dim = heads * hd;
    const int n = row_pos[r] + 1;
    const int* table = tables + row_table[r];
    const float* qr = q + (size_t)r * q_dim + (size_t)h * hd;
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    if (tid == 0) {
        stat[0] = neg_inf();
        stat[1] = 0.0f;
        stat[2] = 0.0f;
    }
    float acc[ATT_MAX_HEAD_DIM / ATT_THREADS];
#pragma unroll
    for (int i = 0; i < ATT_MAX_HEAD_DIM / ATT_THREADS; ++i) acc[i] = 0.0f;
    __syncthreads();
    for (int c0 = 0; c0 < n; c0 += ATT_CHUNK) {
        const int cn = min(ATT_CHUNK, n - c0);
        for (int jj = warp; jj < cn; jj += ATT_WARPS) {
            const int j = c0 + jj;
            const size_t base = ((size_t)table[j / PAGE] * PAGE + (size_t)(j % PAGE)) * kv_dim + (size_t)kvh * hd;
            float s = 0.0f;
            for (int d = lane; d < hd; d += 32) s = fmaf(qs[d], load_key<FMT>(kc, base + d), s);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
            if (lane == 0) {
                ps[jj] = s * scale;
                bases[jj] = base;
            }
        }
        __syncthreads();
        if (warp == 0) {
            float mx = neg_inf();
            for (int jj = lane; jj < cn; jj += 32) mx = fmaxf(mx, ps[jj]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
            const float m_old = stat[0];
            const float m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int jj = lane; jj < cn; jj += 32) {
                const float p = expf(ps[jj] - m_new);
                ps[jj] = p;
                sum += p;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
            if (lane == 0) {
                const float alpha = m_old == neg_inf() ? 0.0f : expf(m_old - m_new);
                stat[2] = alpha;
                stat[1] = stat[1] * alpha + sum;
                stat[0] = m_new;
            }
        }
        __syncthreads();
        const float alpha = stat[2];
#pragma unroll
        for (int i = 0; i < ATT_MAX_HEAD_DIM / ATT_THREADS; ++i) {
            const int d = tid + i * ATT_THREADS;
            if (d < hd) {
                float a = acc[i] * alpha;
                for (int jj = 0; jj < cn; ++jj) a = fmaf(ps[jj], load_value<FMT>(vc, bases[jj] + d, vscale), a);
                acc[i] = a;
            }
        }
        __syncthreads();
    }
    const float inv = 1.0f / stat[1];
    float* orow = out + (size_t)r * q_dim + (size_t)h * hd;
#pragma unroll
    for (int i = 0; i < ATT_MAX_HEAD_DIM / ATT_THREADS; ++i) {
        const int d = tid + i * ATT_THREADS;
        if (d < hd) orow[d] = acc[i] * inv;
    }
}

#define ATTENTION_KERNEL(NAME, FMT)                                                                         \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS)                                              \
        NAME(const float* q, float* out, const u16* kc, const void* vc, const int* tables, const int* row_table, \
             const int* row_pos, int heads, int kv_heads, int hd, float scale, float vscale) {              \
        attend<FMT>(q, out, kc, vc, tables, row_table, row_pos, heads, kv_heads, hd, scale, vscale);        \
    }

ATTENTION_KERNEL(paged_attention_f16, 0)
ATTENTION_KERNEL(paged_attention_bf16, 1)
ATTENTION_KERNEL(paged_attention_k16v8, 2)
"#;
