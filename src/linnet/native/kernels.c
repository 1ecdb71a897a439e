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
 * Batch-1 decoding reads every weight once, so these are written for bandwidth: each OpenMP
 * thread streams contiguous pieces of output rows (about 128 KiB of weight each, taken in
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
 * integer dot products (a different function).
 */
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

#define ROWS 4 /* output rows per block (int8, f32, small int4 groups); 2, 6, 8 no faster */
#ifndef F32_TILED_FROM
#define F32_TILED_FROM 2 /* rows of x from which the f32 product takes the register tiles */
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
#define prefetch(p) __builtin_prefetch((const void *)(p), 0, 3)
#endif

/* Rows per piece of work: a multiple of 24 (whole blocks of 4, 6 or 8 rows) holding about
 * 128 KiB of weight. Threads take pieces in turn (OpenMP's dynamic schedule) rather than
 * a fixed half each: on a shared machine one thread is often slowed or descheduled for a
 * while, and the others then take its pieces instead of waiting for it. */
#ifndef PIECE_BYTES
#define PIECE_BYTES (128 * 1024)
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
 * rows of x (about 28, 37 and 38 G weight-rows/s). */
#ifndef WROWS
#define WROWS 6
#endif
#ifndef MTILE
#define MTILE 2
#endif

/* Rows [o, o + rows) of y for rows b0 .. b0 + MT - 1 of x: each chunk of each weight row is
 * turned into floats once for all MT rows of x. */
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
            __m512 acc = _mm512_setzero_ps();
            for (int64_t g = 0; g < groups; g += 16) {
                __mmask16 k = groups - g >= 16 ? 0xFFFF : (__mmask16)((1u << (groups - g)) - 1);
                __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, zr + g)));
                __m512 sz = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sr + g), z);
                acc = _mm512_fmadd_ps(sz, _mm512_maskz_loadu_ps(k, xs + g), acc);
            }
            y[(b0 + b) * out + o + r] = _mm512_reduce_add_ps(tot[r][b]) -
                                        _mm512_reduce_add_ps(acc) + (bias ? bias[o + r] : 0.0f);
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

/* ---- f32 ------------------------------------------------------------------------------ */

static void f32_rows(const float *x, int64_t m, int64_t in, const float *w, const float *bias,
                     float *y, int64_t out, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; o += ROWS) {
        int64_t rows = o1 - o < ROWS ? o1 - o : ROWS;
        const float *wr[ROWS];
        for (int r = 0; r < ROWS; r++) wr[r] = w + (o + (r < rows ? r : 0)) * in;
#ifdef VECTOR
        const float *ahead = w + (o + ROWS < o1 ? o + ROWS : o) * in; /* the next block */
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
                if (b == 0)
                    for (int r = 0; r < ROWS; r++) prefetch(ahead + ROWS * i + 16 * r);
                for (int r = 0; r < ROWS; r++) acc[r] = vfma(xv, vload(wr[r] + i), acc[r]);
            }
            for (int r = 0; r < ROWS; r++) dot[r] = vsum(acc[r]);
#endif
            for (; i < in; i++)
                for (int r = 0; r < ROWS; r++) dot[r] += xb[i] * wr[r][i];
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

int linnet_f32_linear(const float *x, int64_t m, int64_t in, const float *w, const float *bias,
                      float *y, int64_t out, int asked) {
    int threads = threads_for(out * in * 4, asked);
#ifdef VECTOR
    if (m >= F32_TILED_FROM) {
        PIECES(out, 4 * in, threads, f32_rows_tiled(x, m, in, w, bias, y, out, o0, o1));
        return 0;
    }
#endif
    PIECES(out, 4 * in, threads, f32_rows(x, m, in, w, bias, y, out, o0, o1));
    return 0;
}
