/* One-row CPU linears for `std.quant` weights (and f32), read straight from the packed bytes.
 *
 * Built by linnet/native/build.py with `-O3 -march=native -fopenmp`: the vector path is the
 * widest the building CPU has (AVX-512, else AVX2+FMA, else the portable scalar loops below,
 * which `-DLINNET_SCALAR` forces for tests). Every kernel computes its std op's function within
 * f32 reordering:
 *
 *   linnet_int8_linear:  y[m, o] = scale[o] * sum_i x[m, i] * f32(q[o, i])            (+ bias[o])
 *   linnet_int4_linear:  y[m, o] = sum_g scale[o, g] * (sum_{i in g} x[m, i] * f32(n[o, i])
 *                                                      - f32(zero[o, g]) * sum_{i in g} x[m, i])
 *                        n: ONNX MatMulNBits nibbles, packed [Out, Groups, Group / 2], low first
 *   linnet_f32_linear:   y[m, o] = sum_i x[m, i] * w[o, i]                             (+ bias[o])
 *
 * and, with the activations rounded to int8 per block (`int8_activations`; another function,
 * llama.cpp's trade and ONNX Runtime's `MatMulNBits` at `accuracy_level=4`, section "int8
 * activations" below): for block k of row m, amax = max |x|, sa[m, k] = amax / 127,
 * qa = round-half-to-even(x * (127 / amax)) clamped to [-127, 127] (all 0 when amax is 0),
 *
 *   linnet_int8_linear_a8: y[m, o] = scale[o] * sum_k sa[m, k] * (sum_{i in k} qa[m, i] q[o, i])
 *                          blocks of B inputs (`linnet.native.activations.INT8_BLOCKS`)
 *   linnet_int4_linear_a8: y[m, o] = sum_g scale[o, g] * sa[m, g] * (sum_{i in g} qa[m, i] n[o, i]
 *                                                     - zero[o, g] * sum_{i in g} qa[m, i])
 *                          blocks = the groups; integer sums exact, f32 combination (+ bias[o])
 *
 * Batch-1 decoding reads every weight once, so these are written for bandwidth: each OpenMP
 * thread streams contiguous pieces of output rows (about 512 KiB of weight each, taken in
 * turn), a few rows at a time (independent accumulators), every weight byte read from memory
 * once for all M rows of x (the block's bytes stay in L1 or L2 while the M rows go by; f32
 * products of several rows use register tiles, `f32_rows_tiled`). The OpenMP runtime is the libgomp.so.1 that torch loaded, so the
 * threads are torch's own pool and `torch.set_num_threads` counts here too.
 *
 * Measured (bench/quant_kernels.py, one row, 2 threads, AMD EPYC Zen 4, a quiet moment, NumPy
 * read probe 34.6 GB/s): int8 25-32 GB/s of weight bytes (72-93% of the probe), int4 groups of
 * 128 21-27 GB/s (60-77%), f32 28-31 GB/s (level with oneDNN), on the TinyLlama shapes
 * 2048x2048, 5632x2048, 2048x5632 and 32000x2048. The int4 path is compute-bound: a shift, a
 * table look-up and an FMA per 16 weights run at about 28 G weights/s on one core (about
 * 14 GB/s of packed bytes), where llama.cpp's Q4_0 rounds the activations to int8 and uses
 * integer dot products (a different function: the `_a8` kernels' trade, on request).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if !defined(LINNET_SCALAR) && defined(__AVX512F__) && defined(__AVX512BW__)
#define LINNET_AVX512 1
#include <immintrin.h>
#elif !defined(LINNET_SCALAR) && defined(__AVX2__) && defined(__FMA__)
#define LINNET_AVX2 1
#include <immintrin.h>
#endif

#ifndef ROWS
#define ROWS 4 /* output rows per block (int8, f32, small int4 groups); 2, 6, 8 no faster */
#endif
#ifndef F32_TILED_FROM
#define F32_TILED_FROM 1 /* rows of x from which the f32 product takes the register tiles. On
 * an AMD EPYC (Zen 4) a one-row tile of 6 weight rows read faster than the 4-row loop in 4 of
 * 5 alternated passes (medians 27.3 / 28.1 / 29.0 / 26.6 / 31.6 GB/s against 26.1 / 26.3 /
 * 27.7 / 27.0 / 30.3; two threads, TinyLlama's shapes, 1.1 GB of weights). On an Intel Xeon
 * with AVX-512 (Sapphire Rapids' features) the row loop 2 weight rows at a time read faster
 * than either: 29.4-30.0 GB/s against 27.2-27.5 (the tile) and 28.2 (4 rows), 27.3 (3 rows),
 * 27.4 (1 row), 27.3 (8 rows), medians of 15 alternated passes; so `linnet.native.build`
 * passes -DF32_TILED_FROM=2 -DF32_ROWS=2 there. The same sums either way. */
#endif

const char *linnet_native_path(void) {
#if defined(LINNET_AVX512)
    return "avx512";
#elif defined(LINNET_AVX2)
    return "avx2";
#else
    return "scalar";
#endif
}

int linnet_native_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ---- 16-lane f32 vectors -------------------------------------------------------------- */

#if defined(LINNET_AVX512)
typedef __m512 vf;
static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vset1(float s) { return _mm512_set1_ps(s); }
static inline float vsum(vf a) { return _mm512_reduce_add_ps(a); }
/* 16 signed bytes -> 16 floats */
static inline vf vi8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
/* 16 bytes -> their low and high nibbles as floats */
static inline void vu4(const uint8_t *p, vf *low, vf *high) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    *low = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
    *high = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
}
#define VECTOR 1
#elif defined(LINNET_AVX2)
typedef struct { __m256 a, b; } vf;
static inline vf vzero(void) { vf r = {_mm256_setzero_ps(), _mm256_setzero_ps()}; return r; }
static inline vf vload(const float *p) { vf r = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; return r; }
static inline vf vfma(vf x, vf y, vf c) {
    vf r = {_mm256_fmadd_ps(x.a, y.a, c.a), _mm256_fmadd_ps(x.b, y.b, c.b)};
    return r;
}
static inline vf vadd(vf x, vf y) { vf r = {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; return r; }
static inline vf vset1(float s) { vf r = {_mm256_set1_ps(s), _mm256_set1_ps(s)}; return r; }
static inline float vsum(vf x) {
    __m256 s = _mm256_add_ps(x.a, x.b);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
static inline vf vi8(const int8_t *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    vf r = {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)))};
    return r;
}
static inline void vu4(const uint8_t *p, vf *low, vf *high) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m256i b0 = _mm256_cvtepu8_epi32(b), b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
    __m256i m = _mm256_set1_epi32(15);
    low->a = _mm256_cvtepi32_ps(_mm256_and_si256(b0, m));
    low->b = _mm256_cvtepi32_ps(_mm256_and_si256(b1, m));
    high->a = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
    high->b = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
}
#define VECTOR 1
#endif

#ifdef VECTOR
#ifndef PREFETCH_LOCALITY
#define PREFETCH_LOCALITY 3 /* where the next block's software prefetch lands: 3 = L1
 * (prefetcht0), 2 = L2 (prefetcht1). On an Intel Xeon, L2 read faster (medians of 11-15
 * alternated passes over a decode step's weights, two threads: f32 29.3 against 27.9 GB/s,
 * int8 22.9 against 20.4, int4 with int8 activations 22.1 against 20.5, exact int4 level;
 * 0, prefetchnta, 10.0): a block of long rows prefetched into L1 pushes x out of it (the
 * 2048x5632 product read slowest). `linnet.native.build` passes 2 on Intel CPUs; the Zen 4
 * figures were measured with 3. */
#endif
#define prefetch(p) __builtin_prefetch((const void *)(p), 0, PREFETCH_LOCALITY)
#endif

/* Rows per piece of work: a multiple of 24 (whole blocks of 4, 6 or 8 rows) holding about
 * 512 KiB of weight. Threads take pieces in turn (OpenMP's dynamic schedule) rather than
 * a fixed half each: on a shared machine one thread is often slowed or descheduled for a
 * while, and the others then take its pieces instead of waiting for it. */
#ifndef PIECE_BYTES
#define PIECE_BYTES (512 * 1024) /* against 128 KiB, medians of 11 alternated passes over a
 * decode step's weights (two threads, Intel Xeon): int8 22.8-23.2 GB/s against 21.4, int4
 * with int8 activations 21.3-21.7 against 20.9, f32 30.2 against 29.4; 1 MiB no faster, 2 MiB
 * slower for int4 (17.0: too few pieces for two threads to share evenly) */
#endif
static int64_t piece_rows(int64_t row_bytes) {
    int64_t rows = PIECE_BYTES / (row_bytes > 0 ? row_bytes : 1);
    rows = (rows + 23) / 24 * 24;
    return rows < 24 ? 24 : rows;
}

/* Runs body(o0, o1) over the pieces of `out` rows on `threads` threads. */
#define PIECES(out, row_bytes, threads, body)                                         \
    do {                                                                              \
        int64_t piece_ = piece_rows(row_bytes), count_ = ((out) + piece_ - 1) / piece_; \
        _Pragma("omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)") \
        for (int64_t p_ = 0; p_ < count_; p_++) {                                      \
            int64_t o0 = p_ * piece_, o1 = o0 + piece_ < (out) ? o0 + piece_ : (out);   \
            body;                                                                     \
        }                                                                             \
    } while (0)

/* Threads worth waking for `bytes` of weight (at most `asked`, or OpenMP's default when that
 * is 0): small products run on the calling thread. */
static int threads_for(int64_t bytes, int asked) {
#ifdef _OPENMP
    int n = asked > 0 ? asked : omp_get_max_threads();
    if (omp_in_parallel()) return 1;
    int64_t most = bytes / (64 * 1024);
    if (most < 1) most = 1;
    return n < most ? n : (int)most;
#else
    (void)bytes;
    (void)asked;
    return 1;
#endif
}

/* ---- int8 per-row --------------------------------------------------------------------- */

static void int8_rows(const float *x, int64_t m, int64_t in, const int8_t *q, const float *scale,
                      const float *bias, float *y, int64_t out, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; o += ROWS) {
        int64_t rows = o1 - o < ROWS ? o1 - o : ROWS;
        const int8_t *w[ROWS];
        for (int r = 0; r < ROWS; r++) w[r] = q + (o + (r < rows ? r : 0)) * in;
#ifdef VECTOR
        const int8_t *ahead = q + (o + ROWS < o1 ? o + ROWS : o) * in; /* the next block */
#endif
        for (int64_t b = 0; b < m; b++) {
            const float *xb = x + b * in;
            float dot[ROWS] = {0};
            int64_t i = 0;
#ifdef VECTOR
            vf acc[ROWS];
            for (int r = 0; r < ROWS; r++) acc[r] = vzero();
            for (; i + 16 <= in; i += 16) {
                vf xv = vload(xb + i);
                if (b == 0) prefetch(ahead + ROWS * i);
                for (int r = 0; r < ROWS; r++) acc[r] = vfma(xv, vi8(w[r] + i), acc[r]);
            }
            for (int r = 0; r < ROWS; r++) dot[r] = vsum(acc[r]);
#endif
            for (; i < in; i++)
                for (int r = 0; r < ROWS; r++) dot[r] += xb[i] * (float)w[r][i];
            for (int r = 0; r < rows; r++)
                y[b * out + o + r] = scale[o + r] * dot[r] + (bias ? bias[o + r] : 0.0f);
        }
    }
}

int linnet_int8_linear(const float *x, int64_t m, int64_t in, const int8_t *q, const float *scale,
                       const float *bias, float *y, int64_t out, int asked) {
    int threads = threads_for(out * in, asked);
    PIECES(out, in, threads, int8_rows(x, m, in, q, scale, bias, y, out, o0, o1));
    return 0;
}

/* ---- int4 groups (MatMulNBits layout) ------------------------------------------------- */

/* For each of the M rows of x: its even and odd elements apart (byte k of a weight row holds
 * elements 2k, low nibble, and 2k + 1, high nibble) and the sum of each group. */
static void split_rows(const float *x, int64_t m, int64_t in, int64_t group, float *even,
                       float *odd, float *sums) {
    int64_t half = in / 2, groups = in / group;
    for (int64_t b = 0; b < m; b++) {
        const float *xb = x + b * in;
        for (int64_t k = 0; k < half; k++) {
            even[b * half + k] = xb[2 * k];
            odd[b * half + k] = xb[2 * k + 1];
        }
        for (int64_t g = 0; g < groups; g++) {
            float s = 0.0f;
            for (int64_t i = 0; i < group; i++) s += xb[g * group + i];
            sums[b * groups + g] = s;
        }
    }
}

#if defined(LINNET_AVX512)
/* Groups of 128 or more inputs: 64 bytes (a group's chunk) are 16 dwords, and nibble k of
 * dword j is element 8j + k of the chunk, so x is permuted once per call to `[chunk][k][j]`,
 * and nibble k of all 16 dwords becomes 16 floats in one table look-up (`vpermps` reads only
 * the low 4 bits of each index) after a shift: two operations and one FMA per 16 weights,
 * the products x_i * n_i exact as in the std body's sums. A group then contributes
 * scale * (sum_i x_i n_i - zero * sum_i x_i). */
static void permute_chunks(const float *x, int64_t m, int64_t in, float *xp) {
    for (int64_t b = 0; b < m; b++)
        for (int64_t c = 0; c < in / 128; c++)
            for (int k = 0; k < 8; k++)
                for (int j = 0; j < 16; j++)
                    xp[b * in + c * 128 + k * 16 + j] = x[b * in + c * 128 + 8 * j + k];
}

#define NIBBLE(t, k) _mm512_permutexvar_ps((k) == 0 ? (t) : _mm512_srli_epi32(t, 4 * (k)), lut)

/* Weight rows per block, and rows of x per pass over a block: among 2/4/6/8 x 1/2/3/4,
 * measured on one Zen 4 core with the weights in L2, 6 x 2 was the fastest at 1, 4 and 16
 * rows of x (about 28, 37 and 38 G weight-rows/s). On an Intel Xeon, over a decode step's
 * weights with two threads (medians of 7-11 alternated passes), 4 x 2 read faster at 1, 4
 * and 8 rows of x: 18.5-19.2 against 17.9-18.4 GB/s, 8.6 against 7.7, 4.5 against 4.0 (2, 3,
 * 5 and 8 weight rows no faster); `linnet.native.build` passes -DWROWS=4 there. */
#ifndef WROWS
#define WROWS 6
#endif
#ifndef MTILE
#define MTILE 2
#endif

/* Rows [o, o + rows) of y for rows b0 .. b0 + MT - 1 of x: each chunk of each weight row is
 * turned into floats once for all MT rows of x. */
/* sum_g scale[g] * zero[g] * xs[g] over a row's groups, sixteen at a time (the zero points'
 * share of a wide int4 tile: xs is sum(x) per group, or scale_a * sum(q_a) with int8
 * activations). */
static inline float zero_terms(const float *sr, const uint8_t *zr, const float *xs,
                               int64_t groups) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g += 16) {
        __mmask16 k = groups - g >= 16 ? 0xFFFF : (__mmask16)((1u << (groups - g)) - 1);
        __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, zr + g)));
        __m512 sz = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sr + g), z);
        acc = _mm512_fmadd_ps(sz, _mm512_maskz_loadu_ps(k, xs + g), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static inline __attribute__((always_inline)) void int4_wide_tile(
    const float *xp, const float *sums, int64_t b0, const int MT, int64_t in,
    const uint8_t *packed, const float *scale, const uint8_t *zero, int64_t group,
    const float *bias, float *y, int64_t out, int64_t o, int64_t rows, const uint8_t *ahead) {
    int64_t half = in / 2, groups = in / group, chunks = group / 128;
    const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int64_t row[WROWS];
    for (int r = 0; r < WROWS; r++) row[r] = o + (r < rows ? r : 0);
    __m512 tot[WROWS][MTILE];
    for (int r = 0; r < WROWS; r++)
        for (int b = 0; b < MT; b++) tot[r][b] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512 acc[WROWS][MTILE];
        for (int r = 0; r < WROWS; r++)
            for (int b = 0; b < MT; b++) acc[r][b] = _mm512_setzero_ps();
        for (int64_t c = g * chunks; c < (g + 1) * chunks; c++) {
            __m512i t[WROWS];
            if (ahead)
                for (int r = 0; r < WROWS; r++) prefetch(ahead + (c * WROWS + r) * 64);
            for (int r = 0; r < WROWS; r++)
                t[r] = _mm512_loadu_si512((const void *)(packed + row[r] * half + c * 64));
            for (int k = 0; k < 8; k++) {
                __m512 f[WROWS];
                for (int r = 0; r < WROWS; r++) f[r] = NIBBLE(t[r], k);
                for (int b = 0; b < MT; b++) {
                    __m512 xv = _mm512_loadu_ps(xp + (b0 + b) * in + c * 128 + 16 * k);
                    for (int r = 0; r < WROWS; r++) acc[r][b] = _mm512_fmadd_ps(xv, f[r], acc[r][b]);
                }
            }
        }
        for (int r = 0; r < WROWS; r++) {
            __m512 s = _mm512_set1_ps(scale[row[r] * groups + g]);
            for (int b = 0; b < MT; b++) tot[r][b] = _mm512_fmadd_ps(acc[r][b], s, tot[r][b]);
        }
    }
    /* sum_g scale zero sum(x in g), sixteen groups at a time */
    for (int r = 0; r < rows; r++) {
        const float *sr = scale + row[r] * groups;
        const uint8_t *zr = zero + row[r] * groups;
        for (int b = 0; b < MT; b++) {
            const float *xs = sums + (b0 + b) * groups;
            y[(b0 + b) * out + o + r] = _mm512_reduce_add_ps(tot[r][b]) -
                                        zero_terms(sr, zr, xs, groups) +
                                        (bias ? bias[o + r] : 0.0f);
        }
    }
}

static void int4_rows_wide(const float *xp, const float *sums, int64_t m, int64_t in,
                           const uint8_t *packed, const float *scale, const uint8_t *zero,
                           int64_t group, const float *bias, float *y, int64_t out, int64_t o0,
                           int64_t o1) {
    int64_t half = in / 2;
    for (int64_t o = o0; o < o1; o += WROWS) {
        int64_t rows = o1 - o < WROWS ? o1 - o : WROWS;
        /* the next block, at the pace this one is read (on the first pass only) */
        const uint8_t *ahead = packed + (o + WROWS < o1 ? o + WROWS : o) * half;
        for (int64_t b = 0; b < m; b += MTILE) {
            const uint8_t *pf = b == 0 ? ahead : NULL;
#define TILE(n) int4_wide_tile(xp, sums, b, n, in, packed, scale, zero, group, bias, y, out, o, rows, pf)
            int64_t n = m - b >= MTILE ? MTILE : m - b;
            if (n == MTILE) TILE(MTILE);
#if MTILE > 1
            else if (n == 1) TILE(1);
#endif
#if MTILE > 2
            else if (n == 2) TILE(2);
#endif
#if MTILE > 3
            else if (n == 3) TILE(3);
#endif
#undef TILE
        }
    }
}
#endif

static void int4_rows(const float *even, const float *odd, const float *sums, int64_t m,
                      int64_t in, const uint8_t *packed, const float *scale, const uint8_t *zero,
                      int64_t group, const float *bias, float *y, int64_t out, int64_t o0,
                      int64_t o1) {
    int64_t half = in / 2, groups = in / group, gh = group / 2;
    for (int64_t o = o0; o < o1; o += ROWS) {
        int64_t rows = o1 - o < ROWS ? o1 - o : ROWS;
        int64_t rr[ROWS];
        for (int r = 0; r < ROWS; r++) rr[r] = o + (r < rows ? r : 0);
        for (int64_t b = 0; b < m; b++) {
            const float *xe = even + b * half, *xo = odd + b * half, *xs = sums + b * groups;
            float total[ROWS] = {0};
#ifdef VECTOR
            vf tot[ROWS];
            for (int r = 0; r < ROWS; r++) tot[r] = vzero();
#endif
            for (int64_t g = 0; g < groups; g++) {
                int64_t k = g * gh, end = k + gh;
                float part[ROWS] = {0};
#ifdef VECTOR
                vf lo[ROWS], hi[ROWS];
                for (int r = 0; r < ROWS; r++) lo[r] = hi[r] = vzero();
                for (; k + 16 <= end; k += 16) {
                    vf e = vload(xe + k), d = vload(xo + k);
                    if (b == 0) prefetch(packed + (o + ROWS < o1 ? o + ROWS : o) * half + ROWS * k);
                    for (int r = 0; r < ROWS; r++) {
                        vf nl, nh;
                        vu4(packed + rr[r] * half + k, &nl, &nh);
                        lo[r] = vfma(e, nl, lo[r]);
                        hi[r] = vfma(d, nh, hi[r]);
                    }
                }
                for (int r = 0; r < ROWS; r++)
                    tot[r] = vfma(vadd(lo[r], hi[r]), vset1(scale[rr[r] * groups + g]), tot[r]);
#endif
                for (; k < end; k++)
                    for (int r = 0; r < ROWS; r++) {
                        uint8_t v = packed[rr[r] * half + k];
                        part[r] += xe[k] * (float)(v & 15) + xo[k] * (float)(v >> 4);
                    }
                for (int r = 0; r < ROWS; r++) {
                    float s = scale[rr[r] * groups + g];
                    total[r] += s * (part[r] - (float)zero[rr[r] * groups + g] * xs[g]);
                }
            }
            for (int r = 0; r < rows; r++) {
                float v = total[r];
#ifdef VECTOR
                v += vsum(tot[r]);
#endif
                y[b * out + o + r] = v + (bias ? bias[o + r] : 0.0f);
            }
        }
    }
}

int linnet_int4_linear(const float *x, int64_t m, int64_t in, const uint8_t *packed,
                       const float *scale, const uint8_t *zero, int64_t group, const float *bias,
                       float *y, int64_t out, int asked) {
    if (group <= 0 || group % 2 != 0 || in % group != 0) return 1;
    int64_t half = in / 2, groups = in / group;
    float *buffer = (float *)malloc(sizeof(float) * (size_t)(m * (2 * half + groups)));
    if (buffer == NULL) return 2;
    float *even = buffer, *odd = buffer + m * half, *sums = buffer + 2 * m * half;
    split_rows(x, m, in, group, even, odd, sums);
    int wide = 0;
    (void)wide;
#if defined(LINNET_AVX512)
    wide = group % 128 == 0;
    if (wide) permute_chunks(x, m, in, even); /* `even` and `odd` together hold m * in floats */
#endif
    int threads = threads_for(out * half, asked);
#if defined(LINNET_AVX512)
    if (wide)
        PIECES(out, half, threads,
               int4_rows_wide(even, sums, m, in, packed, scale, zero, group, bias, y, out, o0, o1));
    else
#endif
        PIECES(out, half, threads,
               int4_rows(even, odd, sums, m, in, packed, scale, zero, group, bias, y, out, o0, o1));
    free(buffer);
    return 0;
}

/* ---- int8 activations (`int8_activations`) --------------------------------------------- */

/* llama.cpp's trade, as ONNX Runtime's `MatMulNBits` at `accuracy_level=4` makes it: each row
 * of x is rounded to int8 per block of B inputs, then the products are integer dot products.
 * Another function than the std bodies (see the header); for a block x_blk of row m:
 *
 *   amax = max |x_blk|,  scale_a = amax / 127,  inv = 127 / amax (0 when amax is 0),
 *   q_a = round-half-to-even(x * inv) clamped to [-127, 127]      (f32 multiply, as MLAS)
 *
 * Measured against ONNX Runtime 1.32 on 65536 near-ties: x * (127 / amax) matches it
 * everywhere, where x / scale_a differed in 18% of them. Integer sums are exact (int32); the
 * f32 combination of scales and sums may be reassociated between the compiled paths.
 *
 * AVX-512 VNNI (`vpdpbusd`: 4 u8 x s8 products summed into each int32 lane) reads 64 weight
 * bytes per instruction pair: int4 nibbles (0..15) are the unsigned side and x's even and odd
 * elements, split once per call, the signed side; int8 weights are made unsigned with
 * `q ^ 0x80` (q + 128) and the accumulator starts at -128 * (sum of the lane's q_a), so the
 * lanes hold sum q_a * q exactly. AVX2 builds use `vpmaddubsw` (groups and blocks of a
 * multiple of 64 and 32 inputs), the rest plain C, on the same integers. Measured on one
 * Zen 4 core (1024 x 2048, the weight in L3): AVX2 int4 80 us against the exact kernel's
 * 130, int8 75 against 97.
 *
 * Measured (bench/quant_kernels.py --threads 2, one row, load 1.4, the probe ~31 GB/s):
 * int4 groups of 128 at 28.3 GB/s on 2048 x 2048 and 29.5 GB/s on 32000 x 2048 (90-94% of
 * the probe) against 20.5 and 23.9 for the exact kernel, 1.2-1.4x: no longer compute-bound,
 * so bandwidth caps what is left (the 2x of the integer dot products is not there to take).
 * int8 rows: level with the exact kernel (both read 1 byte a weight at the bandwidth). */

#if defined(LINNET_AVX512) && defined(__AVX512VNNI__)
#define LINNET_VNNI 1
#endif

const char *linnet_native_a8_path(void) {
#if defined(LINNET_VNNI)
    return "avx512-vnni";
#elif defined(LINNET_AVX2)
    return "avx2";
#else
    return "plain";
#endif
}

static inline float round_even(float v) {
    /* round-half-to-even for |v| < 2^22 in the default rounding mode (no libm, no -ffast-math
     * here, so the compiler keeps both operations) */
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (v + magic) - magic;
}

/* One block of n inputs: q (n bytes), its scale and the sum of its q. */
static void quantise_block(const float *x, int64_t n, int8_t *q, float *scale, int32_t *sum) {
    float amax = 0.0f;
    int64_t i = 0;
#if defined(LINNET_AVX512)
    __m512 vmax = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    amax = _mm512_reduce_max_ps(vmax);
#endif
    for (; i < n; i++) {
        float a = __builtin_fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    int32_t s = 0;
    i = 0;
#if defined(LINNET_AVX512)
    __m512 vinv = _mm512_set1_ps(inv);
    __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), vs = _mm512_setzero_si512();
    for (; i + 16 <= n; i += 16) {
        /* cvtps_epi32 rounds half to even (MXCSR's default mode) */
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv));
        v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
        vs = _mm512_add_epi32(vs, v);
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(v));
    }
    s = _mm512_reduce_add_epi32(vs);
#endif
    for (; i < n; i++) {
        float r = round_even(x[i] * inv);
        r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
        q[i] = (int8_t)r;
        s += q[i];
    }
    *sum = s;
}

/* x's M rows rounded per block: q [m][in], scale and sum [m][in / block]. */
static void quantise_rows(const float *x, int64_t m, int64_t in, int64_t block, int8_t *q,
                          float *scale, int32_t *sum) {
    int64_t blocks = in / block;
    for (int64_t b = 0; b < m; b++)
        for (int64_t k = 0; k < blocks; k++)
            quantise_block(x + b * in + k * block, block, q + b * in + k * block,
                           scale + b * blocks + k, sum + b * blocks + k);
}

/* The test hook: `linnet_quantise_a8` writes what the kernels multiply. */
int linnet_quantise_a8(const float *x, int64_t m, int64_t in, int64_t block, int8_t *q,
                       float *scale) {
    if (block <= 0 || in % block != 0) return 1;
    int32_t *sum = (int32_t *)malloc(sizeof(int32_t) * (size_t)(m * (in / block) + 1));
    if (sum == NULL) return 2;
    quantise_rows(x, m, in, block, q, scale, sum);
    free(sum);
    return 0;
}

/* Plain C on the same integers: int4 groups, y = sum_g sw * sa * (dot - zero * sum q_a). */
static void a8_int4_plain(const int8_t *qa, const float *sa, const int32_t *suma, int64_t m,
                          int64_t in, const uint8_t *packed, const float *scale,
                          const uint8_t *zero, int64_t group, const float *bias, float *y,
                          int64_t out, int64_t o0, int64_t o1) {
    int64_t half = in / 2, groups = in / group, gh = group / 2;
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *w = packed + o * half;
        for (int64_t b = 0; b < m; b++) {
            const int8_t *q = qa + b * in;
            float total = 0.0f;
            for (int64_t g = 0; g < groups; g++) {
                int32_t dot = 0;
                const uint8_t *wg = w + g * gh;
                const int8_t *qg = q + g * group;
                for (int64_t k = 0; k < gh; k++)
                    dot += (int32_t)(wg[k] & 15) * qg[2 * k] + (int32_t)(wg[k] >> 4) * qg[2 * k + 1];
                dot -= (int32_t)zero[o * groups + g] * suma[b * groups + g];
                total += scale[o * groups + g] * sa[b * groups + g] * (float)dot;
            }
            y[b * out + o] = total + (bias ? bias[o] : 0.0f);
        }
    }
}

/* Plain C, int8 rows: y = scale[o] * sum_blocks sa * (sum q_a q). */
static __attribute__((unused)) void a8_int8_plain(const int8_t *qa, const float *sa, int64_t m, int64_t in, int64_t block,
                          const int8_t *q, const float *scale, const float *bias, float *y,
                          int64_t out, int64_t o0, int64_t o1) {
    int64_t blocks = in / block;
    for (int64_t o = o0; o < o1; o++) {
        const int8_t *w = q + o * in;
        for (int64_t b = 0; b < m; b++) {
            const int8_t *xq = qa + b * in;
            float total = 0.0f;
            for (int64_t k = 0; k < blocks; k++) {
                int32_t dot = 0;
                for (int64_t i = k * block; i < (k + 1) * block; i++) dot += (int32_t)xq[i] * w[i];
                total += sa[b * blocks + k] * (float)dot;
            }
            y[b * out + o] = scale[o] * total + (bias ? bias[o] : 0.0f);
        }
    }
}

#if defined(LINNET_VNNI)
#ifndef A8ROWS
#define A8ROWS 4 /* weight rows per block */
#endif
#ifndef A8TILE
#define A8TILE 2 /* rows of x per pass over a block */
#endif

/* int4, per 64-byte chunk c of a weight row (inputs 128c .. 128c + 127): lane j holds bytes
 * 4j .. 4j + 3, inputs 128c + 8j .. + 7, all in one group when the group is a multiple of 128
 * or divides 128 (and is at least 8). `qs[b][c]`: the chunk's even inputs then its odd ones
 * (128 bytes, zero past `in`); `lane[b][c]`: each lane's activation scale. */
static inline __attribute__((always_inline)) void a8_int4_tile(
    const int8_t *qs, const float *lane, const float *saq, int64_t b0, const int MT, int64_t in,
    const uint8_t *packed, const float *scale, const uint8_t *zero, int64_t group,
    const float *bias, float *y, int64_t out, int64_t o, int64_t rows, const uint8_t *ahead) {
    int64_t half = in / 2, groups = in / group, chunks = (half + 63) / 64;
    int64_t per = group < 128 ? 128 / group : 0; /* groups per chunk, or 0: one group spans */
    const __m512i low4 = _mm512_set1_epi8(15);
    __m512i spread = _mm512_setzero_si512(); /* lane j -> its group within the chunk */
    if (per) {
        int32_t idx[16];
        for (int j = 0; j < 16; j++) idx[j] = (int32_t)(8 * j / group);
        spread = _mm512_loadu_si512((const void *)idx);
    }
    int64_t row[A8ROWS];
    for (int r = 0; r < A8ROWS; r++) row[r] = o + (r < rows ? r : 0);
    __m512 tot[A8ROWS][A8TILE];
    for (int r = 0; r < A8ROWS; r++)
        for (int b = 0; b < MT; b++) tot[r][b] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++) {
        int64_t left = half - c * 64;
        __mmask64 mask = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i lo[A8ROWS], hi[A8ROWS];
        __m512 sw[A8ROWS];
        if (ahead)
            for (int r = 0; r < A8ROWS; r++) prefetch(ahead + (c * A8ROWS + r) * 64);
        for (int r = 0; r < A8ROWS; r++) {
            __m512i t = _mm512_maskz_loadu_epi8(mask, packed + row[r] * half + c * 64);
            lo[r] = _mm512_and_si512(t, low4);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(t, 4), low4);
            const float *sr = scale + row[r] * groups;
            if (per) {
                int64_t g0 = c * per, n = groups - g0 < per ? groups - g0 : per;
                __m512 s = _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), sr + g0);
                sw[r] = _mm512_permutexvar_ps(spread, s);
            } else {
                sw[r] = _mm512_set1_ps(sr[c * 128 / group]);
            }
        }
        for (int b = 0; b < MT; b++) {
            const int8_t *qc = qs + ((b0 + b) * chunks + c) * 128;
            __m512i even = _mm512_loadu_si512((const void *)qc);
            __m512i odd = _mm512_loadu_si512((const void *)(qc + 64));
            __m512 sa = _mm512_loadu_ps(lane + ((b0 + b) * chunks + c) * 16);
            for (int r = 0; r < A8ROWS; r++) {
                __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], even);
                acc = _mm512_dpbusd_epi32(acc, hi[r], odd);
                tot[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(sw[r], sa),
                                            tot[r][b]);
            }
        }
    }
    /* sum_g sw * zero * (sa * sum q_a), sixteen groups at a time */
    for (int r = 0; r < rows; r++) {
        const float *sr = scale + row[r] * groups;
        const uint8_t *zr = zero + row[r] * groups;
        for (int b = 0; b < MT; b++) {
            const float *xs = saq + (b0 + b) * groups;
            y[(b0 + b) * out + o + r] = _mm512_reduce_add_ps(tot[r][b]) -
                                        zero_terms(sr, zr, xs, groups) +
                                        (bias ? bias[o + r] : 0.0f);
        }
    }
}

/* 128 inputs -> their 64 even ones, then their 64 odd ones. */
static inline void split_chunk(const int8_t *src, int8_t *dst) {
#if defined(__AVX512VBMI__)
    __m512i a = _mm512_loadu_si512((const void *)src), b = _mm512_loadu_si512((const void *)(src + 64));
    int8_t even[64], odd[64];
    for (int k = 0; k < 64; k++) even[k] = (int8_t)(2 * k), odd[k] = (int8_t)(2 * k + 1);
    __m512i ie = _mm512_loadu_si512((const void *)even), io = _mm512_loadu_si512((const void *)odd);
    _mm512_storeu_si512((void *)dst, _mm512_permutex2var_epi8(a, ie, b));
    _mm512_storeu_si512((void *)(dst + 64), _mm512_permutex2var_epi8(a, io, b));
#else
    for (int k = 0; k < 64; k++) dst[k] = src[2 * k], dst[64 + k] = src[2 * k + 1];
#endif
}

static void a8_int4_vnni(const int8_t *qs, const float *lane, const float *saq, int64_t m,
                         int64_t in, const uint8_t *packed, const float *scale,
                         const uint8_t *zero, int64_t group, const float *bias, float *y,
                         int64_t out, int64_t o0, int64_t o1) {
    int64_t half = in / 2;
    for (int64_t o = o0; o < o1; o += A8ROWS) {
        int64_t rows = o1 - o < A8ROWS ? o1 - o : A8ROWS;
        const uint8_t *ahead = packed + (o + A8ROWS < o1 ? o + A8ROWS : o) * half;
        for (int64_t b = 0; b < m; b += A8TILE) {
            const uint8_t *pf = b == 0 ? ahead : NULL;
#define TILE(n) a8_int4_tile(qs, lane, saq, b, n, in, packed, scale, zero, group, bias, y, out, o, rows, pf)
            if (m - b >= A8TILE) TILE(A8TILE);
#if A8TILE > 1
            else if (m - b == 1) TILE(1);
#endif
#if A8TILE > 2
            else if (m - b == 2) TILE(2);
#endif
#if A8TILE > 3
            else if (m - b == 3) TILE(3);
#endif
#undef TILE
        }
    }
}

/* int8, per 64-input chunk c: lane j holds inputs 64c + 4j .. + 3, in one block (B >= 16).
 * `lane[b][c]`: each lane's activation scale; `neg[b][c]`: -128 * the lane's sum of q_a. */
static inline __attribute__((always_inline)) void a8_int8_tile(
    const int8_t *qa, const float *lane, const int32_t *neg, int64_t b0, const int MT,
    int64_t in, const int8_t *q, const float *scale, const float *bias, float *y, int64_t out,
    int64_t o, int64_t rows, const int8_t *ahead) {
    int64_t chunks = (in + 63) / 64;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int64_t row[A8ROWS];
    for (int r = 0; r < A8ROWS; r++) row[r] = o + (r < rows ? r : 0);
    __m512 tot[A8ROWS][A8TILE];
    for (int r = 0; r < A8ROWS; r++)
        for (int b = 0; b < MT; b++) tot[r][b] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++) {
        int64_t left = in - c * 64;
        __mmask64 mask = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i w[A8ROWS];
        if (ahead)
            for (int r = 0; r < A8ROWS; r++) prefetch(ahead + (c * A8ROWS + r) * 64);
        for (int r = 0; r < A8ROWS; r++)
            w[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, q + row[r] * in + c * 64), flip);
        for (int b = 0; b < MT; b++) {
            int64_t at = (b0 + b) * chunks + c;
            __m512i xq = _mm512_loadu_si512((const void *)(qa + at * 64));
            __m512i start = _mm512_loadu_si512((const void *)(neg + at * 16));
            __m512 sa = _mm512_loadu_ps(lane + at * 16);
            for (int r = 0; r < A8ROWS; r++) {
                __m512i acc = _mm512_dpbusd_epi32(start, w[r], xq);
                tot[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sa, tot[r][b]);
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < MT; b++)
            y[(b0 + b) * out + o + r] = scale[o + r] * _mm512_reduce_add_ps(tot[r][b]) +
                                        (bias ? bias[o + r] : 0.0f);
}

static void a8_int8_vnni(const int8_t *qa, const float *lane, const int32_t *neg, int64_t m,
                         int64_t in, const int8_t *q, const float *scale, const float *bias,
                         float *y, int64_t out, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; o += A8ROWS) {
        int64_t rows = o1 - o < A8ROWS ? o1 - o : A8ROWS;
        const int8_t *ahead = q + (o + A8ROWS < o1 ? o + A8ROWS : o) * in;
        for (int64_t b = 0; b < m; b += A8TILE) {
            const int8_t *pf = b == 0 ? ahead : NULL;
#define TILE(n) a8_int8_tile(qa, lane, neg, b, n, in, q, scale, bias, y, out, o, rows, pf)
            if (m - b >= A8TILE) TILE(A8TILE);
#if A8TILE > 1
            else if (m - b == 1) TILE(1);
#endif
#if A8TILE > 2
            else if (m - b == 2) TILE(2);
#endif
#if A8TILE > 3
            else if (m - b == 3) TILE(3);
#endif
#undef TILE
        }
    }
}
#endif

#if defined(LINNET_AVX2)
/* AVX2 (no VNNI): `vpmaddubsw` (u8 x s8 pairs into int16) then `vpmaddwd` by ones (int32).
 * Nibbles (<= 15) times q_a (|q_a| <= 127) cannot saturate int16; int8 weights go through
 * llama.cpp's sign trick, |q| (u8) times sign(q) * q_a, at most 2 * 128 * 127 < 2^15. Each
 * group's or block's dot product is summed exactly in int32, as the plain C does. */
static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* int4 groups of a multiple of 64 inputs; `qs[b]`: per 64 inputs, the 32 even ones, then
 * the 32 odd ones. */
static void a8_int4_avx2(const int8_t *qs, const float *sa, const int32_t *suma, int64_t m,
                         int64_t in, const uint8_t *packed, const float *scale,
                         const uint8_t *zero, int64_t group, const float *bias, float *y,
                         int64_t out, int64_t o0, int64_t o1) {
    int64_t half = in / 2, groups = in / group, gh = group / 2;
    const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *w = packed + o * half;
        if (o + 1 < o1) prefetch(w + half);
        for (int64_t b = 0; b < m; b++) {
            float total = 0.0f;
            for (int64_t g = 0; g < groups; g++) {
                __m256i acc = _mm256_setzero_si256();
                for (int64_t k = g * gh; k < (g + 1) * gh; k += 32) {
                    __m256i t = _mm256_loadu_si256((const __m256i *)(w + k));
                    __m256i lo = _mm256_and_si256(t, low4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), low4);
                    const int8_t *q = qs + b * in + 2 * k;
                    __m256i even = _mm256_loadu_si256((const __m256i *)q);
                    __m256i odd = _mm256_loadu_si256((const __m256i *)(q + 32));
                    __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, even),
                                                     _mm256_maddubs_epi16(hi, odd));
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
                }
                int32_t dot = hsum_epi32(acc) - (int32_t)zero[o * groups + g] * suma[b * groups + g];
                total += scale[o * groups + g] * sa[b * groups + g] * (float)dot;
            }
            y[b * out + o] = total + (bias ? bias[o] : 0.0f);
        }
    }
}

/* int8 rows, blocks of a multiple of 32 inputs. */
static void a8_int8_avx2(const int8_t *qa, const float *sa, int64_t m, int64_t in, int64_t block,
                         const int8_t *q, const float *scale, const float *bias, float *y,
                         int64_t out, int64_t o0, int64_t o1) {
    int64_t blocks = in / block;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t o = o0; o < o1; o++) {
        const int8_t *w = q + o * in;
        if (o + 1 < o1) prefetch(w + in);
        for (int64_t b = 0; b < m; b++) {
            const int8_t *xq = qa + b * in;
            float total = 0.0f;
            for (int64_t k = 0; k < blocks; k++) {
                __m256i acc = _mm256_setzero_si256();
                for (int64_t i = k * block; i < (k + 1) * block; i += 32) {
                    __m256i wv = _mm256_loadu_si256((const __m256i *)(w + i));
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + i));
                    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
                }
                total += sa[b * blocks + k] * (float)hsum_epi32(acc);
            }
            y[b * out + o] = scale[o] * total + (bias ? bias[o] : 0.0f);
        }
    }
}
#endif

/* x's rows rounded for the int4 kernels, in the layout of the path this CPU takes: written
 * once by `a8_int4_prepare` (one allocation, `buffer`, freed by the caller) and read by every
 * piece of every weight multiplied with the same x (a lone call or a `_many` call). */
typedef struct {
    char *buffer;
    int64_t m, in, group;
    int path; /* 2: VNNI, 1: AVX2, 0: plain C */
    int8_t *qa; /* [m][in] */
    float *sa, *saq; /* [m][groups]: the activation scales, and scale * sum q_a (VNNI) */
    int32_t *suma; /* [m][groups] */
    int8_t *qs; /* VNNI: per 128-input chunk, even then odd; AVX2: per 64 inputs, the same */
    float *lane; /* VNNI: [m][chunks][16], each lane's activation scale */
} a8_int4_x;

/* 1: a group that is not even or does not divide `in`; 2: no memory. */
static int a8_int4_prepare(const float *x, int64_t m, int64_t in, int64_t group, a8_int4_x *p) {
    if (group <= 0 || group % 2 != 0 || in % group != 0) return 1;
    int64_t groups = in / group, chunks = (in / 2 + 63) / 64;
    size_t bytes = (size_t)(m * in) + sizeof(float) * (size_t)(m * groups) * 2 +
                   sizeof(int32_t) * (size_t)(m * groups);
    p->m = m, p->in = in, p->group = group, p->path = 0;
    (void)chunks;
#if defined(LINNET_VNNI)
    if (group >= 8 && (group % 128 == 0 || 128 % group == 0)) p->path = 2;
    if (p->path == 2) bytes += (size_t)(m * chunks) * (128 + 16 * sizeof(float)) + 64;
#elif defined(LINNET_AVX2)
    if (group % 64 == 0) p->path = 1, bytes += (size_t)(m * in);
#endif
    p->buffer = (char *)malloc(bytes + 64);
    if (p->buffer == NULL) return 2;
    p->sa = (float *)p->buffer, p->saq = p->sa + m * groups;
    p->suma = (int32_t *)(p->saq + m * groups);
    p->qa = (int8_t *)(p->suma + m * groups);
    quantise_rows(x, m, in, group, p->qa, p->sa, p->suma);
#if defined(LINNET_VNNI)
    if (p->path == 2) {
        const int8_t *qa = p->qa;
        const float *sa = p->sa;
        float *lane = p->lane = (float *)(((uintptr_t)(qa + m * in) + 63) & ~(uintptr_t)63);
        int8_t *qs = p->qs = (int8_t *)(lane + m * chunks * 16);
        for (int64_t b = 0; b < m; b++) {
            for (int64_t g = 0; g < groups; g++)
                p->saq[b * groups + g] = sa[b * groups + g] * (float)p->suma[b * groups + g];
            for (int64_t c = 0; c < chunks; c++) {
                int8_t *dst = qs + (b * chunks + c) * 128;
                const int8_t *src = qa + b * in + c * 128;
                float *to = lane + (b * chunks + c) * 16;
                if (c * 128 + 128 <= in) {
                    split_chunk(src, dst);
                    if (group >= 128) {
                        _mm512_storeu_ps(to, _mm512_set1_ps(sa[b * groups + c * 128 / group]));
                        continue;
                    }
                } else {
                    for (int64_t k = 0; k < 64; k++) {
                        int64_t i = c * 128 + 2 * k;
                        dst[k] = i < in ? src[2 * k] : 0;
                        dst[64 + k] = i + 1 < in ? src[2 * k + 1] : 0;
                    }
                }
                for (int j = 0; j < 16; j++) {
                    int64_t i = c * 128 + 8 * j;
                    to[j] = i < in ? sa[b * groups + i / group] : 0.0f;
                }
            }
        }
    }
#elif defined(LINNET_AVX2)
    if (p->path == 1) {
        int8_t *qs = p->qs = p->qa + m * in;
        for (int64_t b = 0; b < m; b++)
            for (int64_t c = 0; c < in / 64; c++)
                for (int k = 0; k < 32; k++) {
                    qs[b * in + c * 64 + k] = p->qa[b * in + c * 64 + 2 * k];
                    qs[b * in + c * 64 + 32 + k] = p->qa[b * in + c * 64 + 2 * k + 1];
                }
    }
#endif
    return 0;
}

/* Output rows [o0, o1) of one int4 weight times the prepared x. */
static void a8_int4_piece(const a8_int4_x *p, const uint8_t *packed, const float *scale,
                          const uint8_t *zero, const float *bias, float *y, int64_t out,
                          int64_t o0, int64_t o1) {
#if defined(LINNET_VNNI)
    if (p->path == 2) {
        a8_int4_vnni(p->qs, p->lane, p->saq, p->m, p->in, packed, scale, zero, p->group, bias, y,
                     out, o0, o1);
        return;
    }
#elif defined(LINNET_AVX2)
    if (p->path == 1) {
        a8_int4_avx2(p->qs, p->sa, p->suma, p->m, p->in, packed, scale, zero, p->group, bias, y,
                     out, o0, o1);
        return;
    }
#endif
    a8_int4_plain(p->qa, p->sa, p->suma, p->m, p->in, packed, scale, zero, p->group, bias, y, out,
                  o0, o1);
}

/* `linear_int4_groups` with int8 activations (blocks = the groups). */
int linnet_int4_linear_a8(const float *x, int64_t m, int64_t in, const uint8_t *packed,
                          const float *scale, const uint8_t *zero, int64_t group,
                          const float *bias, float *y, int64_t out, int asked) {
    a8_int4_x p;
    int code = a8_int4_prepare(x, m, in, group, &p);
    if (code != 0) return code;
    int threads = threads_for(out * (in / 2), asked);
    PIECES(out, in / 2, threads, a8_int4_piece(&p, packed, scale, zero, bias, y, out, o0, o1));
    free(p.buffer);
    return 0;
}

/* x's rows rounded for the int8 kernels (as `a8_int4_x`). */
typedef struct {
    char *buffer;
    int64_t m, in, block;
    int8_t *qa; /* [m][in] */
    float *sa; /* [m][blocks] */
    int32_t *suma; /* [m][blocks] */
    float *lane; /* VNNI: [m][chunks][16], each lane's activation scale */
    int32_t *neg; /* VNNI: [m][chunks][16], -128 * the lane's sum of q_a */
    int8_t *padded; /* VNNI: [m][chunks][64], q_a zero past `in` */
} a8_int8_x;

/* 1: a block under 16 or not dividing `in`; 2: no memory. */
static int a8_int8_prepare(const float *x, int64_t m, int64_t in, int64_t block, a8_int8_x *p) {
    if (block < 16 || in % block != 0) return 1;
    int64_t blocks = in / block, chunks = (in + 63) / 64;
    size_t bytes = sizeof(float) * (size_t)(m * blocks) + sizeof(int32_t) * (size_t)(m * blocks) +
                   (size_t)(m * in);
    (void)chunks;
#if defined(LINNET_VNNI)
    bytes += (size_t)(m * chunks) * (64 + 16 * sizeof(float) + 16 * sizeof(int32_t)) + 64;
#endif
    p->m = m, p->in = in, p->block = block;
    p->buffer = (char *)malloc(bytes);
    if (p->buffer == NULL) return 2;
    float *sa = p->sa = (float *)p->buffer;
    p->suma = (int32_t *)(sa + m * blocks);
    int8_t *qa = p->qa = (int8_t *)(p->suma + m * blocks);
    quantise_rows(x, m, in, block, qa, sa, p->suma);
#if defined(LINNET_VNNI)
    float *lane = p->lane = (float *)(((uintptr_t)(qa + m * in) + 63) & ~(uintptr_t)63);
    int32_t *neg = p->neg = (int32_t *)(lane + m * chunks * 16);
    int8_t *padded = p->padded = (int8_t *)(neg + m * chunks * 16);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t b = 0; b < m; b++)
        for (int64_t c = 0; c < chunks; c++) {
            int8_t *dst = padded + (b * chunks + c) * 64;
            if (c * 64 + 64 <= in) { /* a whole chunk: each lane's sum by one more dot product */
                __m512i v = _mm512_loadu_si512((const void *)(qa + b * in + c * 64));
                _mm512_storeu_si512((void *)dst, v);
                __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, v);
                _mm512_storeu_si512((void *)(neg + (b * chunks + c) * 16),
                                    _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 7)));
                float *to = lane + (b * chunks + c) * 16;
                if (block >= 64) {
                    _mm512_storeu_ps(to, _mm512_set1_ps(sa[b * blocks + c * 64 / block]));
                } else {
                    for (int j = 0; j < 16; j++) to[j] = sa[b * blocks + (c * 64 + 4 * j) / block];
                }
                continue;
            }
            for (int j = 0; j < 16; j++) {
                int32_t s = 0;
                for (int k = 0; k < 4; k++) {
                    int64_t i = c * 64 + 4 * j + k;
                    dst[4 * j + k] = i < in ? qa[b * in + i] : 0;
                    s += dst[4 * j + k];
                }
                int64_t i = c * 64 + 4 * j;
                lane[(b * chunks + c) * 16 + j] = i < in ? sa[b * blocks + i / block] : 0.0f;
                neg[(b * chunks + c) * 16 + j] = -128 * s;
            }
        }
#endif
    return 0;
}

/* Output rows [o0, o1) of one int8 weight times the prepared x. */
static void a8_int8_piece(const a8_int8_x *p, const int8_t *q, const float *scale,
                          const float *bias, float *y, int64_t out, int64_t o0, int64_t o1) {
#if defined(LINNET_VNNI)
    a8_int8_vnni(p->padded, p->lane, p->neg, p->m, p->in, q, scale, bias, y, out, o0, o1);
#elif defined(LINNET_AVX2)
    if (p->block % 32 == 0)
        a8_int8_avx2(p->qa, p->sa, p->m, p->in, p->block, q, scale, bias, y, out, o0, o1);
    else
        a8_int8_plain(p->qa, p->sa, p->m, p->in, p->block, q, scale, bias, y, out, o0, o1);
#else
    a8_int8_plain(p->qa, p->sa, p->m, p->in, p->block, q, scale, bias, y, out, o0, o1);
#endif
}

/* `linear_int8` with int8 activations per block of `block` inputs (at least 16). */
int linnet_int8_linear_a8(const float *x, int64_t m, int64_t in, const int8_t *q,
                          const float *scale, int64_t block, const float *bias, float *y,
                          int64_t out, int asked) {
    a8_int8_x p;
    int code = a8_int8_prepare(x, m, in, block, &p);
    if (code != 0) return code;
    int threads = threads_for(out * in, asked);
    PIECES(out, in, threads, a8_int8_piece(&p, q, scale, bias, y, out, o0, o1));
    free(p.buffer);
    return 0;
}

/* ---- f32 ------------------------------------------------------------------------------ */

#ifndef F32_ROWS
#define F32_ROWS ROWS /* weight rows at a time in the row loop (`linnet.native.build` sets 2 on
 * Intel CPUs, where it runs one row of x: see `F32_TILED_FROM`) */
#endif
static void f32_rows(const float *x, int64_t m, int64_t in, const float *w, const float *bias,
                     float *y, int64_t out, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; o += F32_ROWS) {
        int64_t rows = o1 - o < F32_ROWS ? o1 - o : F32_ROWS;
        const float *wr[F32_ROWS];
        for (int r = 0; r < F32_ROWS; r++) wr[r] = w + (o + (r < rows ? r : 0)) * in;
#ifdef VECTOR
        const float *ahead = w + (o + F32_ROWS < o1 ? o + F32_ROWS : o) * in; /* the next block */
#endif
        for (int64_t b = 0; b < m; b++) {
            const float *xb = x + b * in;
            float dot[F32_ROWS] = {0};
            int64_t i = 0;
#ifdef VECTOR
            vf acc[F32_ROWS];
            for (int r = 0; r < F32_ROWS; r++) acc[r] = vzero();
            for (; i + 16 <= in; i += 16) {
                vf xv = vload(xb + i);
                if (b == 0)
                    for (int r = 0; r < F32_ROWS; r++) prefetch(ahead + F32_ROWS * i + 16 * r);
                for (int r = 0; r < F32_ROWS; r++) acc[r] = vfma(xv, vload(wr[r] + i), acc[r]);
            }
            for (int r = 0; r < F32_ROWS; r++) dot[r] = vsum(acc[r]);
#endif
            for (; i < in; i++)
                for (int r = 0; r < F32_ROWS; r++) dot[r] += xb[i] * wr[r][i];
            for (int r = 0; r < rows; r++)
                y[b * out + o + r] = dot[r] + (bias ? bias[o + r] : 0.0f);
        }
    }
}

#ifdef VECTOR
/* Several rows of x at once (a batched decode step): a register tile of `F32_XR` rows of x by
 * `F32_WR` weight rows, so each weight vector is loaded once for all the tile's rows of x (the
 * row-at-a-time loop above reads the block again from L2 for every row, and at 8 rows the
 * product becomes bound by those reads rather than by memory). Each output is summed in the
 * same order as `f32_rows` (16 lanes over `i`, then the lanes, then the tail), so a row's
 * result is bitwise the same alone or in a batch of any size. */
#ifdef F32_XR
/* set by the build (-DF32_XR=.. -DF32_WR=.., for experiments) */
#elif defined(LINNET_AVX512)
#define F32_XR 4 /* 24 accumulators + 6 weight vectors + 1 of x: 31 of the 32 registers */
#define F32_WR 6 /* measured against 8x3, 6x4, 5x5, 4x5, 3x7, 2x10: 10-25% faster at 4-16 rows */
#else
#define F32_XR 4 /* AVX2's 16 registers: 4 x 2 accumulators + 2 weight + 2 x halves */
#define F32_WR 1
#endif

static inline __attribute__((always_inline)) void f32_tile(
    const float *x, int64_t in, const float *w, const float *ahead, int64_t wrows,
    const float *bias, float *y, int64_t out, int64_t o, const int xr) {
    const float *wr[F32_WR];
    for (int r = 0; r < F32_WR; r++) wr[r] = w + (r < wrows ? r : 0) * in;
    vf acc[F32_XR][F32_WR];
    for (int b = 0; b < xr; b++)
        for (int r = 0; r < F32_WR; r++) acc[b][r] = vzero();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
        vf wv[F32_WR];
        for (int r = 0; r < F32_WR; r++) {
            if (ahead) prefetch(ahead + F32_WR * i + 16 * r);
            wv[r] = vload(wr[r] + i);
        }
        for (int b = 0; b < xr; b++) {
            vf xv = vload(x + b * in + i);
            for (int r = 0; r < F32_WR; r++) acc[b][r] = vfma(xv, wv[r], acc[b][r]);
        }
    }
    for (int b = 0; b < xr; b++) {
        const float *xb = x + b * in;
        for (int r = 0; r < wrows; r++) {
            float dot = vsum(acc[b][r]);
            for (int64_t t = i; t < in; t++) dot += xb[t] * wr[r][t];
            y[b * out + o + r] = dot + (bias ? bias[o + r] : 0.0f);
        }
    }
}

static void f32_rows_tiled(const float *x, int64_t m, int64_t in, const float *w,
                           const float *bias, float *y, int64_t out, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; o += F32_WR) {
        int64_t wrows = o1 - o < F32_WR ? o1 - o : F32_WR;
        const float *block = w + o * in;
        const float *ahead = o + F32_WR < o1 ? block + F32_WR * in : NULL; /* the next block */
        for (int64_t b0 = 0; b0 < m; b0 += F32_XR) {
            const float *xb = x + b0 * in, *next = b0 == 0 ? ahead : NULL;
            float *yb = y + b0 * out;
#define TILE(n) f32_tile(xb, in, block, next, wrows, bias, yb, out, o, n)
            /* each case a tile of constant height, so its accumulators stay in registers */
            switch (m - b0 < F32_XR ? m - b0 : F32_XR) {
            case 1: TILE(1); break;
            case 2: TILE(2); break;
            case 3: TILE(3); break;
#if F32_XR > 4
            case 4: TILE(4); break;
#endif
#if F32_XR > 5
            case 5: TILE(5); break;
#endif
#if F32_XR > 6
            case 6: TILE(6); break;
#endif
#if F32_XR > 7
            case 7: TILE(7); break;
#endif
            default: TILE(F32_XR); break;
            }
#undef TILE
        }
    }
}
#endif

/* One piece of output rows: the register tiles from `F32_TILED_FROM` rows of x, else the
 * row loop (the same sums in the same order either way; the scalar build's only path). */
static void f32_piece(const float *x, int64_t m, int64_t in, const float *w, const float *bias,
                      float *y, int64_t out, int64_t o0, int64_t o1) {
#ifdef VECTOR
    if (m >= F32_TILED_FROM) {
        f32_rows_tiled(x, m, in, w, bias, y, out, o0, o1);
        return;
    }
#endif
    f32_rows(x, m, in, w, bias, y, out, o0, o1);
}

int linnet_f32_linear(const float *x, int64_t m, int64_t in, const float *w, const float *bias,
                      float *y, int64_t out, int asked) {
    int threads = threads_for(out * in * 4, asked);
    PIECES(out, 4 * in, threads, f32_piece(x, m, in, w, bias, y, out, o0, o1));
    return 0;
}

/* ---- several linears on one x in one parallel region ---------------------------------- */

/* Linears that read the same x (a layer's q, k and v projections; its gate and up) run as
 * one call: x is prepared once, and their pieces of output rows (each linear's own pieces,
 * cut as its lone call cuts them) are taken in turn by the threads of one OpenMP parallel
 * region instead of one region each. Every output row goes through the same row function
 * with the same arguments as in the lone call, so each y is bitwise what that call gives.
 *
 * `members[k]` describes linear k. `out` is an int64 so that the array is six 8-byte
 * slots per member, which the ctypes binding fills as one int64 array. */
typedef struct {
    const void *weight; /* f32 [out, in], int8 [out, in] or int4 nibbles [out, in / 2] */
    const float *scale; /* int8 [out], int4 [out, in / group]; unused for f32 */
    const uint8_t *zero; /* int4 [out, in / group]; unused otherwise */
    const float *bias; /* [out] or NULL */
    float *y; /* [m, out] */
    int64_t out;
} linnet_member;

#define MANY 16 /* most members per call */

/* The first piece of each member (and the total at [count]) for pieces of `piece` rows. */
static int64_t member_pieces(const linnet_member *members, int64_t count, int64_t piece,
                             int64_t *first) {
    int64_t total = 0;
    for (int64_t k = 0; k < count; k++) {
        first[k] = total;
        total += (members[k].out + piece - 1) / piece;
    }
    first[count] = total;
    return total;
}

static int64_t member_rows(const linnet_member *members, int64_t count) {
    int64_t rows = 0;
    for (int64_t k = 0; k < count; k++) rows += members[k].out;
    return rows;
}

/* Runs body(mk, o0, o1) over the pieces of every member on `threads` threads. */
#define MEMBER_PIECES(members, count, row_bytes, threads, body)                            \
    do {                                                                                   \
        int64_t piece_ = piece_rows(row_bytes), first_[MANY + 1];                          \
        int64_t total_ = member_pieces(members, count, piece_, first_);                    \
        _Pragma("omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)") \
        for (int64_t p_ = 0; p_ < total_; p_++) {                                          \
            int64_t k_ = 0;                                                                \
            while (p_ >= first_[k_ + 1]) k_++;                                             \
            const linnet_member *mk = &(members)[k_];                                      \
            int64_t o0 = (p_ - first_[k_]) * piece_;                                       \
            int64_t o1 = o0 + piece_ < mk->out ? o0 + piece_ : mk->out;                    \
            body;                                                                          \
        }                                                                                  \
    } while (0)

int linnet_int8_linear_many(const float *x, int64_t m, int64_t in, const linnet_member *members,
                            int64_t count, int asked) {
    if (count < 1 || count > MANY) return 1;
    int threads = threads_for(member_rows(members, count) * in, asked);
    MEMBER_PIECES(members, count, in, threads,
                  int8_rows(x, m, in, (const int8_t *)mk->weight, mk->scale, mk->bias, mk->y,
                            mk->out, o0, o1));
    return 0;
}

int linnet_f32_linear_many(const float *x, int64_t m, int64_t in, const linnet_member *members,
                           int64_t count, int asked) {
    if (count < 1 || count > MANY) return 1;
    int threads = threads_for(member_rows(members, count) * in * 4, asked);
    MEMBER_PIECES(members, count, 4 * in, threads,
                  f32_piece(x, m, in, (const float *)mk->weight, mk->bias, mk->y, mk->out, o0,
                            o1));
    return 0;
}

int linnet_int4_linear_many(const float *x, int64_t m, int64_t in, int64_t group,
                            const linnet_member *members, int64_t count, int asked) {
    if (count < 1 || count > MANY) return 1;
    if (group <= 0 || group % 2 != 0 || in % group != 0) return 1;
    int64_t half = in / 2, groups = in / group;
    float *buffer = (float *)malloc(sizeof(float) * (size_t)(m * (2 * half + groups)));
    if (buffer == NULL) return 2;
    float *even = buffer, *odd = buffer + m * half, *sums = buffer + 2 * m * half;
    split_rows(x, m, in, group, even, odd, sums);
    int wide = 0;
    (void)wide;
#if defined(LINNET_AVX512)
    wide = group % 128 == 0;
    if (wide) permute_chunks(x, m, in, even);
#endif
    int threads = threads_for(member_rows(members, count) * half, asked);
#if defined(LINNET_AVX512)
    if (wide)
        MEMBER_PIECES(members, count, half, threads,
                      int4_rows_wide(even, sums, m, in, (const uint8_t *)mk->weight, mk->scale,
                                     mk->zero, group, mk->bias, mk->y, mk->out, o0, o1));
    else
#endif
        MEMBER_PIECES(members, count, half, threads,
                      int4_rows(even, odd, sums, m, in, (const uint8_t *)mk->weight, mk->scale,
                                mk->zero, group, mk->bias, mk->y, mk->out, o0, o1));
    free(buffer);
    return 0;
}

/* The `_a8` kernels of members sharing x: x is rounded once (the int4 members all with groups
 * of `group`, the int8 ones with blocks of `block`), then one parallel region. */
int linnet_int4_linear_a8_many(const float *x, int64_t m, int64_t in, int64_t group,
                               const linnet_member *members, int64_t count, int asked) {
    if (count < 1 || count > MANY) return 1;
    a8_int4_x p;
    int code = a8_int4_prepare(x, m, in, group, &p);
    if (code != 0) return code;
    int threads = threads_for(member_rows(members, count) * (in / 2), asked);
    MEMBER_PIECES(members, count, in / 2, threads,
                  a8_int4_piece(&p, (const uint8_t *)mk->weight, mk->scale, mk->zero, mk->bias,
                                mk->y, mk->out, o0, o1));
    free(p.buffer);
    return 0;
}

int linnet_int8_linear_a8_many(const float *x, int64_t m, int64_t in, int64_t block,
                               const linnet_member *members, int64_t count, int asked) {
    if (count < 1 || count > MANY) return 1;
    a8_int8_x p;
    int code = a8_int8_prepare(x, m, in, block, &p);
    if (code != 0) return code;
    int threads = threads_for(member_rows(members, count) * in, asked);
    MEMBER_PIECES(members, count, in, threads,
                  a8_int8_piece(&p, (const int8_t *)mk->weight, mk->scale, mk->bias, mk->y,
                                mk->out, o0, o1));
    free(p.buffer);
    return 0;
}

/* ---- rms_norm ------------------------------------------------------------------------- */

/* `std.nn.norm::rms_norm` in f32 (stdlib.md 6) for each of `rows` rows of `h` values:
 *   ms = sum_i x_i^2 / h,   n_i = x_i * (1 / sqrt(ms + eps)),   y_i = n_i * w_i
 * the sum of squares in f32 lanes (another order than aten's: within f32 rounding), the
 * weight multiplied after the normalised value is rounded, as the spec orders. A decode
 * step's one row costs about a microsecond here against 10-20 for the aten ops, on the
 * calling thread (no parallel region: a few rows are not worth waking threads for). */
int linnet_rms_norm(const float *x, int64_t rows, int64_t h, const float *w, float eps,
                    float *y) {
    if (h <= 0) return 1;
    for (int64_t b = 0; b < rows; b++) {
        const float *xb = x + b * h;
        float *yb = y + b * h;
        float sum = 0.0f;
        int64_t i = 0;
#ifdef VECTOR
        vf acc[4] = {vzero(), vzero(), vzero(), vzero()};
        for (; i + 64 <= h; i += 64)
            for (int r = 0; r < 4; r++) {
                vf v = vload(xb + i + 16 * r);
                acc[r] = vfma(v, v, acc[r]);
            }
        for (; i + 16 <= h; i += 16) {
            vf v = vload(xb + i);
            acc[0] = vfma(v, v, acc[0]);
        }
        sum = vsum(vadd(vadd(acc[0], acc[1]), vadd(acc[2], acc[3])));
#endif
        for (; i < h; i++) sum += xb[i] * xb[i];
        float scale = 1.0f / sqrtf(sum / (float)h + eps);
        for (i = 0; i < h; i++) {
            float n = xb[i] * scale; /* rounded to f32 before the weight, as cast<T>(n) */
            yb[i] = n * w[i];
        }
    }
    return 0;
}

/* ---- rope ----------------------------------------------------------------------------- */

/* `std.nn.rope::rope` on `x[rows, positions, d]` with tables `cos, sin [positions, d]`:
 *   y_i = x_i cos_i + r_i sin'_i,   r = concat(x2, x1),   sin' = concat(-sin1, sin2)
 * each product and the sum rounded to f32 in that order (no contraction under -std=c11),
 * which is `natives.rope`'s aten form bit for bit (stdlib.md 7: `x * cos + rotate_half(x) *
 * sin`, the sign moved from one factor to the other). One pass on the calling thread. */
int linnet_rope(const float *x, int64_t rows, int64_t positions, int64_t d, const float *cos,
                const float *sin, float *y) {
    if (d <= 0 || d % 2 != 0) return 1;
    int64_t half = d / 2;
    for (int64_t b = 0; b < rows; b++)
        for (int64_t s = 0; s < positions; s++) {
            const float *xr = x + (b * positions + s) * d, *c = cos + s * d, *n = sin + s * d;
            float *yr = y + (b * positions + s) * d;
            for (int64_t i = 0; i < half; i++) {
                float a = xr[i] * c[i], r = xr[i + half] * -n[i];
                yr[i] = a + r;
            }
            for (int64_t i = half; i < d; i++) {
                float a = xr[i] * c[i], r = xr[i - half] * n[i];
                yr[i] = a + r;
            }
        }
    return 0;
}

/* ---- attention of a few query rows ---------------------------------------------------- */

/* `std.nn.attention::attention` / `grouped_attention` for q [batch, heads, queries, d] and
 * keys, values [batch, kv_heads, keys, d] (query head h reads key/value head
 * h / (heads / kv_heads)), all contiguous f32, under a boolean mask [queries, keys] (NULL:
 * none):
 *   s_j = (q . k_j) * scale over the kept keys,  p_j = exp(s_j - max s) / sum exp(s - max s),
 *   y = sum_j p_j v_j;  a row that keeps no key gets the mean of all the values,
 * as the canonical body's -1e30 scores give (stdlib.md 9). The masked keys are skipped, as
 * SDPA's -inf scores skip them. Within f32 reordering of the body (expf for exp). On the
 * calling thread: a decode step's few rows are not worth a parallel region. */
#if defined(LINNET_AVX512)
static inline void vstore(float *p, vf a) { _mm512_storeu_ps(p, a); }
#elif defined(LINNET_AVX2)
static inline void vstore(float *p, vf a) {
    _mm256_storeu_ps(p, a.a);
    _mm256_storeu_ps(p + 8, a.b);
}
#endif

/* y += e * v over d values (vector lanes where they fit, in the same per-value order). */
static inline void add_scaled(float *y, float e, const float *v, int64_t d) {
    int64_t i = 0;
#ifdef VECTOR
    vf s = vset1(e);
    for (; i + 16 <= d; i += 16) {
        vf p = vload(v + i);
#if defined(LINNET_AVX512)
        vstore(y + i, _mm512_add_ps(vload(y + i), _mm512_mul_ps(s, p)));
#else
        vf m = {_mm256_mul_ps(s.a, p.a), _mm256_mul_ps(s.b, p.b)};
        vstore(y + i, vadd(vload(y + i), m));
#endif
    }
#endif
    for (; i < d; i++) y[i] += e * v[i];
}

int linnet_attention(const float *q, const float *k, const float *v, const uint8_t *mask,
                     int64_t batch, int64_t heads, int64_t kv_heads, int64_t queries,
                     int64_t keys, int64_t d, float scale, float *y) {
    if (kv_heads <= 0 || heads % kv_heads != 0 || d <= 0) return 1;
    float *weights = (float *)malloc(sizeof(float) * (size_t)(keys > 0 ? keys : 1));
    if (weights == NULL) return 2;
    int64_t group = heads / kv_heads;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++) {
            const float *kh = k + (b * kv_heads + h / group) * keys * d;
            const float *vh = v + (b * kv_heads + h / group) * keys * d;
            for (int64_t r = 0; r < queries; r++) {
                const float *qr = q + ((b * heads + h) * queries + r) * d;
                float *yr = y + ((b * heads + h) * queries + r) * d;
                const uint8_t *kept = mask ? mask + r * keys : NULL;
                float top = -INFINITY;
                int64_t count = 0;
                for (int64_t j = 0; j < keys; j++) {
                    if (kept && !kept[j]) continue;
                    const float *kj = kh + j * d;
                    float dot = 0.0f;
                    int64_t i = 0;
#ifdef VECTOR
                    vf acc = vzero();
                    for (; i + 16 <= d; i += 16) acc = vfma(vload(qr + i), vload(kj + i), acc);
                    dot = vsum(acc);
#endif
                    for (; i < d; i++) dot += qr[i] * kj[i];
                    float s = dot * scale;
                    weights[j] = s;
                    top = s > top ? s : top;
                    count++;
                }
                for (int64_t i = 0; i < d; i++) yr[i] = 0.0f;
                if (count == 0) { /* no key kept: the mean of all the values */
                    for (int64_t j = 0; j < keys; j++) add_scaled(yr, 1.0f, vh + j * d, d);
                    for (int64_t i = 0; i < d; i++) yr[i] /= (float)keys;
                    continue;
                }
                float total = 0.0f;
                for (int64_t j = 0; j < keys; j++) {
                    if (kept && !kept[j]) continue;
                    float e = expf(weights[j] - top);
                    total += e;
                    add_scaled(yr, e, vh + j * d, d);
                }
                for (int64_t i = 0; i < d; i++) yr[i] /= total;
            }
        }
    free(weights);
    return 0;
}

/* ---- cache span writes ---------------------------------------------------------------- */

/* `std.nn.cache::write_span` into the cache itself: for each of `rows` (batch x heads) rows,
 * positions [low, high) of `cache[rows, size, width]` take positions [low - start, high -
 * start) of `value[rows, count, width]`, `width` bytes a position: a copy, the same bytes. */
int linnet_write_span(uint8_t *cache, const uint8_t *value, int64_t rows, int64_t size,
                      int64_t count, int64_t width, int64_t low, int64_t high, int64_t start) {
    if (low < 0 || high > size || low >= high || low - start < 0 || high - start > count)
        return 1;
    for (int64_t r = 0; r < rows; r++)
        memcpy(cache + (r * size + low) * width, value + (r * count + low - start) * width,
               (size_t)((high - low) * width));
    return 0;
}
