/* A host fingerprint's statistics in one pass over the tensor (record/host_stats.py compiles and loads it).

   The torch ops it replaces read a large tensor about eight times (|x|, its sum, its max, the squares, their
   sum, the fold for the sketch), each a dispatch of its own; this reads it once. Every statistic is summed
   in double, as the torch path sums tensors of at most one period (larger float32 ones it sums in float32).

   PERIOD and WIDTH come from the compile command (record/fingerprint.py's SKETCH_PERIOD and SKETCH_WIDTH).
   Built with -fassociative-math so that the sums vectorize: their order is not the torch ops' order, which a
   fingerprint never promised (they are compared with a tolerance). NaN and Inf still propagate into the sums,
   which is how the caller knows to take the non-finite path.

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

/* out = [sum, l1, sum of squares, max |x|, WIDTH signed sums] from the fold's `cols` column sums.
   weights: [1 + WIDTH][PERIOD] doubles, row-major: a row of ones (the sum), then the sketch's signs. */
CLONES static void products(const double *fold, int64_t cols, const double *weights, double *out) {
    double sums[1 + WIDTH];
    int j = 0;
    /* Four rows at a time: four independent sums (one would wait on its own latency at each step). */
    for (; j + 4 <= 1 + WIDTH; j += 4) {
        const double *w0 = weights + (int64_t)j * PERIOD, *w1 = w0 + PERIOD, *w2 = w1 + PERIOD, *w3 = w2 + PERIOD;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t c = 0; c < cols; c++) {
            double f = fold[c];
            s0 += w0[c] * f; s1 += w1[c] * f; s2 += w2[c] * f; s3 += w3[c] * f;
        }
        sums[j] = s0; sums[j + 1] = s1; sums[j + 2] = s2; sums[j + 3] = s3;
    }
    for (; j <= WIDTH; j++) {
        const double *w = weights + (int64_t)j * PERIOD;
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += w[c] * fold[c];
        sums[j] = s;
    }
    out[0] = sums[0];
    for (j = 1; j <= WIDTH; j++) out[3 + j] = sums[j];
}

/* One thread's share of the rows: its fold of them and its sums. */
struct share {
    double fold[PERIOD];
    double l1, sq, max_abs;
};

/* Rows [first, last) of x's PERIOD-element rows (the last may be short) into `p`. Element i adds to column
   i mod PERIOD of the fold. max |x| is taken on the bits with the sign cleared: for finite values their order
   as unsigned integers is their order as numbers, and an integer max vectorizes where a float one
   (NaN-aware) does not. */
#define FOLD(NAME, T, U, SIGN)                                                                  \
    CLONES static void NAME(const void *data, int64_t n, int64_t first, int64_t last,           \
                            struct share *p) {                                                  \
        const T *x = (const T *)data;                                                           \
        double *fold = p->fold;                                                                 \
        double l1 = 0, sq = 0;                                                                  \
        U max_bits = 0;                                                                         \
        memset(fold, 0, sizeof(double) * (size_t)(n < PERIOD ? n : PERIOD));                    \
        for (int64_t r = first; r < last; r++) {                                                \
            const T *row = x + r * PERIOD;                                                      \
            int64_t m = n - r * PERIOD < PERIOD ? n - r * PERIOD : PERIOD;                      \
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

typedef void (*fold_fn)(const void *, int64_t, int64_t, int64_t, struct share *);

/* out = [sum, l1, sum of squares, max |x|, *sketch] of x's n elements, over up to `threads` threads.
   Returns 0, or -1 where memory for the folds could not be had (the caller takes the torch ops then). */
static int stats(fold_fn fold, const void *x, int64_t n, int threads, const double *weights, double *out) {
    int64_t rows = (n + PERIOD - 1) / PERIOD;
    int64_t cols = n < PERIOD ? n : PERIOD;
    if (threads > rows) threads = (int)rows;
    if (threads < 1) threads = 1;
    /* On the heap: a fold is 32 KiB, more than some threads' stacks can spare. */
    struct share *shares = malloc(sizeof(struct share) * (size_t)threads);
    if (!shares) return -1;
    int used = 1;
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        {
            int t = omp_get_thread_num(), k = omp_get_num_threads();
            if (t == 0) used = k;
            fold(x, n, rows * t / k, rows * (t + 1) / k, &shares[t]);
        }
    } else
#endif
        fold(x, n, 0, rows, &shares[0]);
    double l1 = 0, sq = 0, max_abs = 0;
    for (int t = 0; t < used; t++) {
        double m = shares[t].max_abs;
        l1 += shares[t].l1;
        sq += shares[t].sq;
        max_abs = m > max_abs || m != m ? m : max_abs; /* a NaN's bits sort past every number's: kept */
        if (t)
            for (int64_t c = 0; c < cols; c++) shares[0].fold[c] += shares[t].fold[c];
    }
    products(shares[0].fold, cols, weights, out);
    out[1] = l1;
    out[2] = sq;
    out[3] = max_abs;
    free(shares);
    return 0;
}

int tracediff_stats_f32(const float *x, int64_t n, int threads, const double *weights, double *out) {
    return stats(fold_f32, x, n, threads, weights, out);
}

int tracediff_stats_f64(const double *x, int64_t n, int threads, const double *weights, double *out) {
    return stats(fold_f64, x, n, threads, weights, out);
}
