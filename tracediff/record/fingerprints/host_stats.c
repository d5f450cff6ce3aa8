/* A host fingerprint's statistics in one pass over the tensor (record/fingerprints/host_stats.py compiles and loads it).

   The torch ops it replaces read a large tensor about eight times (|x|, its sum, its max, the squares, their
   sum, the fold for the sketch), each a dispatch of its own; this reads it once, strided views in place.

   PERIOD and WIDTH come from the compile command (record/fingerprints/fingerprint.py's SKETCH_PERIOD and SKETCH_WIDTH).
   Element i (in row-major order) adds to column i mod PERIOD of the fold, whose sum and signed sums (by the
   sketch's signs, given as one bit mask per column) are the sum and the sketch. Built with -fassociative-math so that the sums
   vectorize: their order is not the torch ops' order, which a fingerprint never promised (they are compared
   with a tolerance). NaN and Inf still propagate into the sums, which is how the caller knows to take the
   non-finite path.

   Precision: float64 tensors and float32 ones of at most one row are summed in double, as the torch path
   sums them. Larger float32 tensors are summed in float32 vectors (eight elements an operation, no
   conversion on the way; BENCHMARKS.md, tenth pass), but every float sum is short before it joins a double
   one: a block of BLOCK_ROWS rows' column sums, then the fold; per lane, at most 32 terms of |x| and of x^2,
   then a double. Their rounding stays within a few float32 ulps (at most 2e-6 of the sum's scale, typically
   2e-7), as the torch ops' float32 sums did, far inside a float32 comparison's tolerance.

   Built with -fopenmp where torch's own libgomp is loaded, and linked without naming any libgomp: the loader
   binds its OpenMP calls to torch's, so a large tensor's rows are split over torch's warm thread pool, as its
   own ops split them. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef TRACEDIFF_CLONES
/* One build for every x86-64 host: the loader picks the AVX2 version where the CPU has it. */
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* TRACEDIFF_PORTABLE: the portable loop only (tests build it to compare the two). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(TRACEDIFF_PORTABLE)
#define HAVE_AVX2_PATH 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))
#endif

#define MAX_DIMS 8
#define BLOCK_ROWS 16
#define CHUNK 1024

/* sums[j], j < 8: the sum of b's 256 entries, each signed by bit j of its index (set: +1, clear: -1); b[0] ends as the
   sum of all 256. Bit by bit from the highest, each level halving b: the sums of its halves make that bit's signed
   sum, and their sum (the entries that differ in that bit alone added) goes on to the next, 765 additions in all
   where signing all 256 for each bit took 4096. */
static void signed_by_bits(double *b, double *sums) {
    for (int j = 7, half = 128; j >= 0; j--, half /= 2) {
        double set = 0, clear = 0;
        for (int v = 0; v < half; v++) {
            clear += b[v];
            set += b[v + half];
            b[v] += b[v + half];
        }
        sums[j] = set - clear;
    }
}

/* out = [sum, WIDTH signed sums] of the fold's `cols` column sums. masks[c]: the sketch's signs of column c as bits
   (set: +1, clear: -1; record/fingerprints/fingerprint.py's sketch_masks), 16 KiB to read where a table of signs as doubles was
   557 KiB, which a large tensor's pass had pushed out of the caches: those loads were about a tenth of a recorded
   CPU GPT-2 call (BENCHMARKS.md, eleventh pass). The columns are summed by each byte of their mask first (two
   buckets per column, not sixteen signed sums), then each byte's buckets signed bit by bit. */
CLONES static void products(const double *fold, int64_t cols, const uint32_t *masks, double *out) {
    _Static_assert(WIDTH == 16, "the sketch's signs as the two bytes of a mask");
    double low[256], high[256];
    memset(low, 0, sizeof low);
    memset(high, 0, sizeof high);
    for (int64_t c = 0; c < cols; c++) {
        double f = fold[c];
        uint32_t m = masks[c];
        low[m & 255] += f;
        high[m >> 8 & 255] += f;
    }
    signed_by_bits(low, out + 1);
    signed_by_bits(high, out + 9);
    out[0] = low[0];
}

/* ---- Where the elements are: contiguous, or a strided view read in place ---------------------------- */

/* A strided view's sizes and strides in elements, outermost first, with dims of size 1 dropped and dims
   that run on from each other merged (ndim 0: contiguous). */
struct layout {
    int ndim;
    int64_t size[MAX_DIMS], stride[MAX_DIMS];
};

/* The tensor being read: its first element, its element count and size, and its layout. */
struct source {
    const char *data;
    int64_t n;
    size_t itemsize;
    struct layout layout;
};

/* Where a strided read stands: the multi-index of the next element and its address. */
struct cursor {
    int64_t index[MAX_DIMS];
    const char *at;
};

static void cursor_at(const struct source *s, int64_t linear, struct cursor *c) {
    const struct layout *l = &s->layout;
    c->at = s->data;
    for (int d = l->ndim - 1; d >= 0; d--) {
        c->index[d] = linear % l->size[d];
        linear /= l->size[d];
        c->at += (size_t)(c->index[d] * l->stride[d]) * s->itemsize;
    }
}

/* The next `count` elements in row-major order into `out`, contiguous, and the cursor past them: runs of
   the innermost dim copied whole where it is contiguous, else element by element. */
static void gather(const struct source *s, struct cursor *c, char *out, int64_t count) {
    const struct layout *l = &s->layout;
    const int inner = l->ndim - 1;
    const size_t item = s->itemsize;
    while (count > 0) {
        int64_t take = l->size[inner] - c->index[inner];
        if (take > count) take = count;
        if (l->stride[inner] == 1) {
            memcpy(out, c->at, (size_t)take * item);
        } else {
            for (int64_t k = 0; k < take; k++) memcpy(out + k * item, c->at + (size_t)(k * l->stride[inner]) * item, item);
        }
        out += (size_t)take * item;
        count -= take;
        c->index[inner] += take;
        c->at += (size_t)(take * l->stride[inner]) * item;
        /* Carry into the outer dims. */
        for (int d = inner; d > 0 && c->index[d] == l->size[d]; d--) {
            c->at -= (size_t)(l->size[d] * l->stride[d]) * item;
            c->index[d] = 0;
            c->index[d - 1] += 1;
            c->at += (size_t)l->stride[d - 1] * item;
        }
    }
}

/* One thread's share of the rows: its fold of them, its sums, and room for one row gathered from a strided
   view. */
struct share {
    double sums[1 + WIDTH]; /* the products of its fold: its sum and sketch */
    double fold[PERIOD];
    float block[PERIOD]; /* float32 tensors of several rows: a block of rows' column sums */
    double row[PERIOD];  /* a strided view's row, gathered (as float or double) */
    double l1, sq, max_abs;
};

/* Row r's m elements: in place where the tensor is contiguous, else gathered into the share's buffer (rows
   are visited in order, so the cursor stands at row r). */
static inline const void *row_at(const struct source *s, struct cursor *c, int64_t r, int64_t m, struct share *p) {
    if (s->layout.ndim == 0) return s->data + (size_t)(r * PERIOD) * s->itemsize;
    gather(s, c, (char *)p->row, m);
    return p->row;
}

static inline void start_rows(const struct source *s, int64_t first, struct cursor *c) {
    if (s->layout.ndim) cursor_at(s, first * PERIOD, c);
}

static inline int64_t row_length(const struct source *s, int64_t r) {
    return s->n - r * PERIOD < PERIOD ? s->n - r * PERIOD : PERIOD;
}

/* ---- Summed in double: float64 tensors, float32 ones of at most one row -------------------------------- */

/* Rows [first, last) into `p`. max |x| is taken on the bits with the sign cleared: for finite values their
   order as unsigned integers is their order as numbers, and an integer max vectorizes where a float one
   (NaN-aware) does not. */
#define FOLD(NAME, T, U, SIGN)                                                                  \
    CLONES static void NAME(const struct source *s, int64_t first, int64_t last, struct share *p) { \
        double *fold = p->fold;                                                                 \
        double l1 = 0, sq = 0;                                                                  \
        U max_bits = 0;                                                                         \
        struct cursor cur;                                                                      \
        start_rows(s, first, &cur);                                                             \
        memset(fold, 0, sizeof(double) * (size_t)(s->n < PERIOD ? s->n : PERIOD));              \
        for (int64_t r = first; r < last; r++) {                                                \
            int64_t m = row_length(s, r);                                                       \
            const T *row = (const T *)row_at(s, &cur, r, m, p);                                 \
            for (int64_t c = 0; c < m; c++) {                                                   \
                double v = (double)row[c];                                                      \
                U bits;                                                                         \
                memcpy(&bits, &row[c], sizeof(U));                                              \
                bits &= ~(U)SIGN;                                                               \
                fold[c] += v;                                                                   \
                l1 += fabs(v);                                                                  \
                sq += v * v;                                                                    \
                max_bits = bits > max_bits ? bits : max_bits;                                   \
            }                                                                                   \
        }                                                                                       \
        T max_abs;                                                                              \
        memcpy(&max_abs, &max_bits, sizeof(U));                                                 \
        p->l1 = l1;                                                                             \
        p->sq = sq;                                                                             \
        p->max_abs = (double)max_abs;                                                           \
    }

FOLD(fold_f32, float, uint32_t, 0x80000000u)
FOLD(fold_f64, double, uint64_t, 0x8000000000000000ull)

/* ---- float32 tensors of several rows, in float32 vectors ---------------------------------------------- */

/* A row's last elements (past a multiple of 32), one at a time. */
static inline void row_tail(const float *row, int64_t c, int64_t m, float *block, double *l1, double *sq,
                            uint32_t *max_bits) {
    for (; c < m; c++) {
        float v = row[c];
        uint32_t bits;
        memcpy(&bits, &row[c], sizeof bits);
        bits &= 0x7fffffffu;
        block[c] += v;
        *l1 += fabs((double)v);
        *sq += (double)v * v;
        *max_bits = bits > *max_bits ? bits : *max_bits;
    }
}

/* Both versions' vector sums below, as they lie in memory: four lanes of |x|'s sums and of x^2's, and eight
   of max |x|'s bits. */
struct lanes {
    double l1[4], sq[4];
    uint32_t max_bits[8];
};

/* The lanes of `sums` (a struct lanes in memory) added into the row tails' sums and maximum, in lane order. */
static inline void add_lanes(const void *sums, double *l1, double *sq, uint32_t *max_bits) {
    struct lanes v;
    memcpy(&v, sums, sizeof v);
    for (int j = 0; j < 4; j++) {
        *l1 += v.l1[j];
        *sq += v.sq[j];
    }
    for (int j = 0; j < 8; j++)
        if (v.max_bits[j] > *max_bits) *max_bits = v.max_bits[j];
}

/* Rows [first, last), a block of BLOCK_ROWS at a time; `CHUNK_FN(row, c, end, block, &sums)` takes columns
   [c, end) of one row, 32 at a time, and returns where it stopped (`sums`: SUMS_T, its vector accumulators,
   zeroed first, a struct lanes in memory). */
#define FOLD_BLOCKS(NAME, CHUNK_FN, SUMS_T)                                                     \
    static void NAME(const struct source *s, int64_t first, int64_t last, struct share *p) {    \
        double *fold = p->fold;                                                                 \
        float *block = p->block;                                                                \
        double l1 = 0, sq = 0;                                                                  \
        uint32_t max_bits = 0;                                                                  \
        SUMS_T sums;                                                                            \
        memset(&sums, 0, sizeof sums);                                                          \
        struct cursor cur;                                                                      \
        start_rows(s, first, &cur);                                                             \
        memset(fold, 0, sizeof(double) * PERIOD);                                               \
        for (int64_t r0 = first; r0 < last; r0 += BLOCK_ROWS) {                                 \
            int64_t r1 = r0 + BLOCK_ROWS < last ? r0 + BLOCK_ROWS : last;                       \
            memset(block, 0, sizeof(float) * PERIOD);                                           \
            for (int64_t r = r0; r < r1; r++) {                                                 \
                int64_t m = row_length(s, r), c = 0;                                            \
                const float *row = (const float *)row_at(s, &cur, r, m, p);                     \
                while (c + 32 <= m) c = CHUNK_FN(row, c, c + CHUNK < m ? c + CHUNK : m, block, &sums); \
                row_tail(row, c, m, block, &l1, &sq, &max_bits);                                \
            }                                                                                   \
            for (int64_t c = 0; c < PERIOD; c++) fold[c] += block[c];                           \
        }                                                                                       \
        add_lanes(&sums, &l1, &sq, &max_bits);                                                  \
        float max_abs;                                                                          \
        memcpy(&max_abs, &max_bits, sizeof max_abs);                                            \
        p->l1 = l1;                                                                             \
        p->sq = sq;                                                                             \
        p->max_abs = (double)max_abs;                                                           \
    }

/* Portable: GCC/clang vector types. Four vector sums per statistic, each its own dependency chain: one would
   wait on its add's latency at every step. */
typedef float f8 __attribute__((vector_size(32)));
typedef float f4 __attribute__((vector_size(16)));
typedef double d4 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

struct wide_sums {
    d4 l1, sq;
    i32x8 max_bits;
};
_Static_assert(sizeof(struct wide_sums) == sizeof(struct lanes), "a struct lanes in memory");

static inline d4 widened(f8 f) {
    f4 lo = {f[0], f[1], f[2], f[3]}, hi = {f[4], f[5], f[6], f[7]};
    return __builtin_convertvector(lo, d4) + __builtin_convertvector(hi, d4);
}

/* Eight elements at column c + 8k: into the block, the k-th sums, and the max of |x|'s bits. */
#define TURN(k)                                                                                 \
    do {                                                                                        \
        f8 v_, s_;                                                                              \
        memcpy(&v_, row + c + 8 * (k), sizeof v_);                                              \
        memcpy(&s_, block + c + 8 * (k), sizeof s_);                                            \
        s_ += v_;                                                                               \
        memcpy(block + c + 8 * (k), &s_, sizeof s_);                                            \
        i32x8 b_ = (i32x8)v_ & 0x7fffffff;                                                      \
        l1_##k += (f8)b_;                                                                       \
        sq_##k += v_ * v_;                                                                      \
        i32x8 more_ = b_ > max_v;                                                               \
        max_v = (b_ & more_) | (max_v & ~more_);                                                \
    } while (0)

static inline int64_t chunk_portable(const float *row, int64_t c, int64_t end, float *block, struct wide_sums *s) {
    f8 l1_0 = {0}, l1_1 = {0}, l1_2 = {0}, l1_3 = {0}, sq_0 = {0}, sq_1 = {0}, sq_2 = {0}, sq_3 = {0};
    i32x8 max_v = s->max_bits;
    for (; c + 32 <= end; c += 32) {
        TURN(0);
        TURN(1);
        TURN(2);
        TURN(3);
    }
    s->l1 += widened((l1_0 + l1_1) + (l1_2 + l1_3));
    s->sq += widened((sq_0 + sq_1) + (sq_2 + sq_3));
    s->max_bits = max_v;
    return c;
}

FOLD_BLOCKS(fold_f32_blocks, chunk_portable, struct wide_sums)

#ifdef HAVE_AVX2_PATH
/* AVX2 with intrinsics, where the compiler's vectors fall short: max |x| as one vpmaxud (the portable
   compare and blend is a longer dependency chain, the loop's bottleneck), the squares by FMA. About 1.5x the
   portable loop's speed on a tensor in cache. */
struct avx2_sums {
    __m256d l1, sq;
    __m256i max_bits;
};
_Static_assert(sizeof(struct avx2_sums) == sizeof(struct lanes), "a struct lanes in memory");

#define AVX_TURN(k)                                                                             \
    do {                                                                                        \
        __m256 v_ = _mm256_loadu_ps(row + c + 8 * (k));                                         \
        _mm256_storeu_ps(block + c + 8 * (k), _mm256_add_ps(_mm256_loadu_ps(block + c + 8 * (k)), v_)); \
        __m256i b_ = _mm256_and_si256(_mm256_castps_si256(v_), mask);                           \
        max_v = _mm256_max_epu32(max_v, b_);                                                    \
        l1_##k = _mm256_add_ps(l1_##k, _mm256_castsi256_ps(b_));                                \
        sq_##k = _mm256_fmadd_ps(v_, v_, sq_##k);                                               \
    } while (0)

AVX2 static inline __m256d avx2_widened(__m256 f) {
    return _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

AVX2 static inline int64_t chunk_avx2(const float *row, int64_t c, int64_t end, float *block, struct avx2_sums *s) {
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256 l1_0 = _mm256_setzero_ps(), l1_1 = l1_0, l1_2 = l1_0, l1_3 = l1_0;
    __m256 sq_0 = l1_0, sq_1 = l1_0, sq_2 = l1_0, sq_3 = l1_0;
    __m256i max_v = s->max_bits;
    for (; c + 32 <= end; c += 32) {
        AVX_TURN(0);
        AVX_TURN(1);
        AVX_TURN(2);
        AVX_TURN(3);
    }
    s->l1 = _mm256_add_pd(s->l1, avx2_widened(_mm256_add_ps(_mm256_add_ps(l1_0, l1_1), _mm256_add_ps(l1_2, l1_3))));
    s->sq = _mm256_add_pd(s->sq, avx2_widened(_mm256_add_ps(_mm256_add_ps(sq_0, sq_1), _mm256_add_ps(sq_2, sq_3))));
    s->max_bits = max_v;
    return c;
}

AVX2 FOLD_BLOCKS(fold_f32_blocks_avx2, chunk_avx2, struct avx2_sums)
#endif

/* ---- The entry points ----------------------------------------------------------------------------------- */

typedef void (*fold_fn)(const struct source *, int64_t, int64_t, struct share *);

/* The layout of a view of `ndim` dims (0, or sizes and strides in elements), dims of size 1 dropped and
   adjacent dims that run on from each other merged; ndim 0 where that leaves one contiguous run. Returns -1
   for more than MAX_DIMS dims. */
static int make_layout(int ndim, const int64_t *sizes, const int64_t *strides, struct layout *l) {
    l->ndim = 0;
    if (ndim > MAX_DIMS) return -1;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] == 1) continue;
        if (l->ndim && l->stride[l->ndim - 1] == sizes[d] * strides[d]) {
            l->size[l->ndim - 1] *= sizes[d];
            l->stride[l->ndim - 1] = strides[d];
        } else {
            l->size[l->ndim] = sizes[d];
            l->stride[l->ndim] = strides[d];
            l->ndim++;
        }
    }
    if (l->ndim == 1 && l->stride[0] == 1) l->ndim = 0;
    return 0;
}

/* Bytes of one thread's share: the caller's workspace holds one per thread. */
int64_t tracediff_share_bytes(void) { return (int64_t)sizeof(struct share); }

/* out = [sum, l1, sum of squares, max |x|, *sketch] of the source's elements, over up to `threads` threads, their
   shares in `workspace` (of `workspace_bytes`; where it is too small, on the heap). Returns 0, or -1 where memory
   for the shares could not be had (the caller takes the torch ops then). */
static int stats(fold_fn fold, const struct source *s, int threads, const uint32_t *masks, double *out,
                 void *workspace, int64_t workspace_bytes) {
    int64_t rows = (s->n + PERIOD - 1) / PERIOD;
    int64_t cols = s->n < PERIOD ? s->n : PERIOD;
    if (threads > rows) threads = (int)rows;
    if (threads < 1) threads = 1;
    /* Not on the stack: a share is 88 KiB, more than some threads' stacks can spare. Nor on the heap each time:
       two shares are past glibc's mmap threshold, and in a recording, where torch's own frees keep trimming the
       heap, a fresh allocation faulted its pages in again on every call (about a thousand faults per recorded
       call of the CPU GPT-2). */
    size_t need = sizeof(struct share) * (size_t)threads;
    struct share *shares = workspace_bytes >= (int64_t)need ? (struct share *)workspace : malloc(need);
    if (!shares) return -1;
    int used = 1;
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        {
            int t = omp_get_thread_num(), k = omp_get_num_threads();
            if (t == 0) used = k;
            fold(s, rows * t / k, rows * (t + 1) / k, &shares[t]);
            products(shares[t].fold, cols, masks, shares[t].sums);
        }
    } else
#endif
    {
        fold(s, 0, rows, &shares[0]);
        products(shares[0].fold, cols, masks, shares[0].sums);
    }
    /* The sum and sketch are linear in the fold: each thread's of its own rows, added here (no fold to merge). */
    double l1 = 0, sq = 0, max_abs = 0, sums[1 + WIDTH] = {0};
    for (int t = 0; t < used; t++) {
        double m = shares[t].max_abs;
        l1 += shares[t].l1;
        sq += shares[t].sq;
        max_abs = m > max_abs || m != m ? m : max_abs; /* a NaN's bits sort past every number's: kept */
        for (int j = 0; j <= WIDTH; j++) sums[j] += shares[t].sums[j];
    }
    out[0] = sums[0];
    out[1] = l1;
    out[2] = sq;
    out[3] = max_abs;
    for (int j = 1; j <= WIDTH; j++) out[3 + j] = sums[j];
    if (shares != workspace) free(shares);
    return 0;
}

/* 1 where float32 tensors of several rows take the AVX2 loop here, 0 for the portable one. */
int tracediff_float32_avx2(void) {
#ifdef HAVE_AVX2_PATH
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* The statistics of x's n elements, read in row-major order: `ndim` 0 for a contiguous tensor, else its
   sizes and strides in elements (at most MAX_DIMS dims). Returns 0, or -1 (the caller takes the torch ops). */
int tracediff_stats_f32(const float *x, int64_t n, int ndim, const int64_t *sizes, const int64_t *strides,
                        int threads, const uint32_t *masks, double *out, void *workspace, int64_t workspace_bytes) {
    struct source s = {(const char *)x, n, sizeof(float), {0}};
    if (make_layout(ndim, sizes, strides, &s.layout) != 0) return -1;
    fold_fn fold = fold_f32;
    if (n > PERIOD) {
        fold = fold_f32_blocks;
#ifdef HAVE_AVX2_PATH
        if (tracediff_float32_avx2()) fold = fold_f32_blocks_avx2;
#endif
    }
    return stats(fold, &s, threads, masks, out, workspace, workspace_bytes);
}

int tracediff_stats_f64(const double *x, int64_t n, int ndim, const int64_t *sizes, const int64_t *strides,
                        int threads, const uint32_t *masks, double *out, void *workspace, int64_t workspace_bytes) {
    struct source s = {(const char *)x, n, sizeof(double), {0}};
    if (make_layout(ndim, sizes, strides, &s.layout) != 0) return -1;
    return stats(fold_f64, &s, threads, masks, out, workspace, workspace_bytes);
}
