/* One-pass greedy reductions over rows of float32 logits, for the verification policies.
 *
 * Why this exists: a greedy verification round needs, per row of the target's [k+1, V] logits, the maximum, the
 * first index of the maximum (torch's argmax) and the maximum of every CHUNK-wide slice (for top-n reads), and
 * for the relaxed rows a softmax normaliser. torch computes these as several passes and ~10 dispatched ops
 * (its CPU argmax is not vectorised); at V = 152k that is ~1 ms a round on two cores. Here each row is read
 * once, 16 lanes at a time, through GCC/Clang vector extensions (AVX-512, AVX2, NEON: whatever -march gives),
 * with rows (or blocks of a row) shared out over OpenMP threads when built with -fopenmp (serial without it).
 *
 * Built and loaded by relaxbench/decoding/kernels.py (ctypes); the torch code in sampling.py is the reference
 * every result here is tested against, and the fallback when no C compiler is present.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 16
typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(LANES * sizeof(int32_t))));

static inline vf load(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline vf splat(float x) { return (vf){0} + x; }
/* a > b ? a : b per lane (b when either is NaN; NaN rows are flagged separately) */
static inline vf vmax(vf a, vf b) { vi m = a > b; return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline float hmax(vf v) {
    float m = v[0];
    for (int j = 1; j < LANES; j++) m = v[j] > m ? v[j] : m;
    return m;
}

/* ---- row reductions: max, first argmax, chunk maxima ------------------------------------------------------ */

typedef struct {
    const float *x;        /* rows, each `stride` floats apart */
    int64_t stride, vocab, chunk, n_chunks;
    const int64_t *drafts; /* NULL, or [n_drafts]: the draft token of each row */
    int64_t n_drafts;
    int stop_at_mismatch;  /* skip rows after the first one whose argmax differs from its draft */
    int64_t *stop;         /* shared: the first mismatching (or NaN) row found so far; `last` when none */
    float *row_max;        /* [rows] */
    int64_t *row_argmax;   /* [rows] */
    float *chunk_max;      /* [rows, n_chunks] (full chunks, then the tail's maximum when chunk does not divide V) */
    float *draft_logit;    /* [n_drafts] the row's logit of its draft token (-inf for an id outside the row) */
} ReduceJob;

static int64_t load_stop(const int64_t *stop) { return __atomic_load_n(stop, __ATOMIC_RELAXED); }

static void lower_stop(int64_t *stop, int64_t row) {
    int64_t seen = load_stop(stop);
    while (row < seen && !__atomic_compare_exchange_n(stop, &seen, row, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* Reads row r once. Returns 1 when it holds a NaN, 2 when it was abandoned because an earlier row stopped the
 * scan (its results are then incomplete, and never read), else 0. */
static int reduce_row(const ReduceJob *job, int64_t r) {
    const float *x = job->x + r * job->stride;
    const int64_t vocab = job->vocab, chunk = job->chunk, full = vocab / chunk * chunk;
    float *maxima = job->chunk_max + r * job->n_chunks;
    vi nan_seen = (vi){0};
    float best = -INFINITY;
    int64_t best_chunk = 0;
    for (int64_t c = 0; c < full; c += chunk) { /* four accumulators: independent max chains keep loads in flight */
        if ((c / chunk) % 64 == 63 && r > load_stop(job->stop)) return 2;
        vf a0 = load(x + c), a1 = load(x + c + LANES), a2 = load(x + c + 2 * LANES), a3 = load(x + c + 3 * LANES);
        vi n0 = a0 != a0, n1 = a1 != a1;
        n0 |= a2 != a2;
        n1 |= a3 != a3;
        for (int64_t i = c + 4 * LANES; i < c + chunk; i += 4 * LANES) {
            vf v0 = load(x + i), v1 = load(x + i + LANES), v2 = load(x + i + 2 * LANES), v3 = load(x + i + 3 * LANES);
            n0 |= v0 != v0;
            n1 |= v1 != v1;
            n0 |= v2 != v2;
            n1 |= v3 != v3;
            a0 = vmax(v0, a0);
            a1 = vmax(v1, a1);
            a2 = vmax(v2, a2);
            a3 = vmax(v3, a3);
        }
        nan_seen |= n0 | n1;
        float m = hmax(vmax(vmax(a0, a1), vmax(a2, a3)));
        maxima[c / chunk] = m;
        if (m > best || c == 0) { best = m; best_chunk = c; }
    }
    int64_t index = -1;
    for (int64_t i = best_chunk; i < best_chunk + chunk && full > 0; i++)
        if (x[i] == best) { index = i; break; }
    int nan_any = 0;
    if (full < vocab) { /* the tail follows every full chunk: it holds the first maximum only when strictly larger */
        float tail = x[full];
        int64_t tail_index = full;
        for (int64_t i = full; i < vocab; i++) {
            nan_any |= x[i] != x[i];
            if (x[i] > tail) { tail = x[i]; tail_index = i; }
        }
        maxima[full / chunk] = tail;
        if (index < 0 || tail > best) { best = tail; index = tail_index; }
    }
    for (int j = 0; j < LANES; j++) nan_any |= nan_seen[j] != 0;
    job->row_max[r] = best;
    job->row_argmax[r] = index < 0 ? 0 : index;
    if (job->drafts && r < job->n_drafts) {
        const int64_t d = job->drafts[r];
        job->draft_logit[r] = d >= 0 && d < vocab ? x[d] : -INFINITY;
    }
    return nan_any;
}

/* Rows [first, last) in order, shared out one row at a time over up to `threads` OpenMP threads. With `drafts`
 * and `stop_at_mismatch`, rows after the first one whose argmax differs from its draft are skipped (or abandoned
 * part-read): a greedy verdict never reads them. chunk must be a positive multiple of 4 * LANES.
 * Returns `end`: rows [first, end) are done (end = the first mismatching row + 1, or last); -2 when a row holds a
 * NaN; -1 on bad arguments. */
int64_t rb_row_reductions(const float *x, int64_t first, int64_t last, int64_t stride, int64_t vocab, int64_t chunk,
                          int64_t threads, const int64_t *drafts, int64_t n_drafts, int stop_at_mismatch,
                          float *row_max, int64_t *row_argmax, float *chunk_max, float *draft_logit) {
    if (chunk <= 0 || chunk % (4 * LANES) || vocab <= 0 || first < 0 || last < first) return -1;
    if (!drafts) n_drafts = 0, stop_at_mismatch = 0;
    if (threads > last - first) threads = last - first;
    if (threads < 1) threads = 1;
    int64_t stop = last;
    int nan = 0;
    const ReduceJob job = {x, stride, vocab, chunk, (vocab + chunk - 1) / chunk, drafts, n_drafts, stop_at_mismatch,
                           &stop, row_max, row_argmax, chunk_max, draft_logit};
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(| : nan)
    for (int64_t r = first; r < last; r++) {
        if (r > load_stop(&stop)) continue; /* past a mismatch: no verdict reads it */
        int status = reduce_row(&job, r);
        if (status == 2) continue;
        nan |= status;
        if (status || (stop_at_mismatch && r < n_drafts && row_argmax[r] != drafts[r])) lower_stop(&stop, r);
    }
    if (nan && stop < last) { /* a NaN counts only in a row the verdict reads */
        int nan_read = 0;
        for (int64_t r = first; r <= stop; r++) {
            const float *row = x + r * stride;
            for (int64_t i = 0; i < vocab && !nan_read; i++) nan_read = row[i] != row[i];
        }
        nan = nan_read;
    }
    if (nan) return -2;
    return stop == last ? last : stop + 1;
}

/* ---- one row: the n largest values, and the argmax of a*x + b*y ------------------------------------------- */

/* The n (<= 64) largest values of row x, descending (ties repeated, as torch.topk), from its chunk maxima: they lie
 * in the n chunks with the largest maxima or in the tail, so only those are read. Returns 0, or -1 on bad n. */
int rb_top_values(const float *x, int64_t vocab, int64_t chunk, const float *maxima, int64_t n, float *out) {
    const int64_t full = vocab / chunk * chunk, n_full = full / chunk;
    if (n < 1 || n > 64 || n > vocab) return -1;
    int64_t chosen[64];
    float chosen_max[64];
    int64_t n_chosen = 0;
    for (int64_t c = 0; c < n_full; c++) { /* the n chunks with the largest maxima (insertion into a sorted list) */
        float m = maxima[c];
        if (n_chosen == n && !(m > chosen_max[n - 1])) continue;
        int64_t i = n_chosen < n ? n_chosen++ : n - 1;
        while (i > 0 && m > chosen_max[i - 1]) { chosen_max[i] = chosen_max[i - 1]; chosen[i] = chosen[i - 1]; i--; }
        chosen_max[i] = m;
        chosen[i] = c;
    }
    int64_t count = 0;
    for (int64_t k = 0; k <= n_chosen; k++) {
        int64_t lo = k < n_chosen ? chosen[k] * chunk : full, hi = k < n_chosen ? lo + chunk : vocab;
        for (int64_t j = lo; j < hi; j++) {
            float v = x[j];
            if (count == n && !(v > out[n - 1])) continue;
            int64_t i = count < n ? count++ : n - 1;
            while (i > 0 && v > out[i - 1]) { out[i] = out[i - 1]; i--; }
            out[i] = v;
        }
    }
    return count == n ? 0 : -1;
}

/* First index of the maximum of a*x + b*y (the fused logits of a row): torch's argmax of torch.add(a*x, y, alpha=b)
 * up to the rounding of the multiply-add. *has_nan is set when a value is NaN; -1 when the answer is torch's to give. */
int64_t rb_fused_argmax(const float *x, const float *y, int64_t vocab, float a, float b, int32_t *has_nan) {
    float best = -INFINITY;
    int64_t index = -1, chunk_start = 0;
    const vf va = splat(a), vb = splat(b);
    vi nan_seen = (vi){0};
    const int64_t full = vocab / (4 * LANES) * (4 * LANES);
    for (int64_t c = 0; c < full; c += 4 * LANES) {
        vf acc = splat(-INFINITY);
        for (int64_t i = c; i < c + 4 * LANES; i += LANES) {
            vf v = va * load(x + i) + vb * load(y + i);
            nan_seen |= v != v;
            acc = vmax(v, acc);
        }
        float m = hmax(acc);
        if (m > best || c == 0) { best = m; chunk_start = c; }
    }
    if (full > 0) { /* recomputed as above (same vector code, so the same rounding) to find the first maximum */
        float values[4 * LANES];
        for (int64_t i = 0; i < 4 * LANES; i += LANES) {
            vf v = va * load(x + chunk_start + i) + vb * load(y + chunk_start + i);
            memcpy(values + i, &v, sizeof v);
        }
        for (int64_t i = 0; i < 4 * LANES; i++)
            if (values[i] == best) { index = chunk_start + i; break; }
        if (index < 0) return -1; /* not met again (NaN): the caller uses torch */
    }
    int nan_any = 0;
    for (int64_t i = full; i < vocab; i++) {
        float v = a * x[i] + b * y[i];
        nan_any |= v != v;
        if (v > best || index < 0) { best = v; index = i; }
    }
    for (int j = 0; j < LANES; j++) nan_any |= nan_seen[j] != 0;
    *has_nan = nan_any;
    return index;
}

/* ---- softmax sums: S = sum e^s, T = sum e^s * s with s = x - m --------------------------------------------- */

/* e^d for -87 <= d <= 0 (the caller clamps: e^-87 ~ 1.6e-38 adds nothing to a sum that is >= 1), to ~1 ulp, in
 * 12 vector operations: n = round(d / ln 2) by the 1.5 * 2^23 trick (whose low mantissa bits then hold n, so 2^n
 * is (bits << 23) added to the exponent), r = d - n ln 2 in one fused multiply-add, e^r by a degree-6 polynomial
 * (the Cephes expf coefficients). A NaN stays NaN. */
static inline vf vexp(vf d) {
    const vf shifted = d * splat(1.44269504088896341f) + splat(12582912.0f);
    const vf n = shifted - splat(12582912.0f);
    const vf r = d - n * splat(0.693147180559945309f);
    vf p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    p = p * (r * r) + r + splat(1.0f);
    return (vf)((vi)p + ((vi)shifted << 23));
}

/* S = sum e^(x-m) and T = sum e^(x-m)(x-m) over one row of `vocab` floats, for its maximum m, over up to
 * `threads` OpenMP threads. Lanes add 64 terms each in float; each 1024-wide block's sums are kept in double and
 * added in block order, so the result does not depend on the threads and keeps ~7 significant digits at any V.
 * ln S is the log-normaliser above m, ln S - T/S the entropy. A NaN in the row or in m makes both NaN (as
 * torch's would be). */
void rb_softmax_sums(const float *row, int64_t vocab, float m, int64_t threads, double *sum, double *shift_sum) {
    enum { BLOCK = 64 * LANES, MAX_BLOCKS = 4096 };
    double block_s[MAX_BLOCKS], block_t[MAX_BLOCKS];
    const vf vm = splat(m), floor = splat(-87.0f);
    int64_t n_blocks = vocab / BLOCK;
    if (n_blocks > MAX_BLOCKS) n_blocks = MAX_BLOCKS; /* V over 4M: the scalar loop below takes the rest */
    if (threads < 1 || n_blocks < 16) threads = 1;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
    for (int64_t b = 0; b < n_blocks; b++) {
        vf s0 = (vf){0}, s1 = (vf){0}, t0 = (vf){0}, t1 = (vf){0};
        for (int64_t i = b * BLOCK; i < (b + 1) * BLOCK; i += 2 * LANES) {
            /* floor > d ? floor : d: clamps -inf (a masked logit) and lets NaN through */
            vf d0 = vmax(floor, load(row + i) - vm), d1 = vmax(floor, load(row + i + LANES) - vm);
            vf e0 = vexp(d0), e1 = vexp(d1);
            s0 += e0;
            s1 += e1;
            t0 += e0 * d0;
            t1 += e1 * d1;
        }
        s0 += s1;
        t0 += t1;
        double S = 0, T = 0;
        for (int j = 0; j < LANES; j++) { S += s0[j]; T += t0[j]; }
        block_s[b] = S;
        block_t[b] = T;
    }
    double S = 0, T = 0;
    for (int64_t b = 0; b < n_blocks; b++) { S += block_s[b]; T += block_t[b]; }
    int64_t i = n_blocks * BLOCK;
    if (i + LANES <= vocab) { /* the last part block, a vector at a time */
        vf s0 = (vf){0}, t0 = (vf){0};
        for (; i + LANES <= vocab; i += LANES) {
            vf d0 = vmax(floor, load(row + i) - vm), e0 = vexp(d0);
            s0 += e0;
            t0 += e0 * d0;
        }
        for (int j = 0; j < LANES; j++) { S += s0[j]; T += t0[j]; }
    }
    for (; i < vocab; i++) {
        double d = (double)row[i] - m;
        d = d < -87.0 ? -87.0 : d;
        double e = exp(d);
        S += e;
        T += e * d;
    }
    if (m != m) S = T = NAN;
    *sum = S;
    *shift_sum = T;
}
