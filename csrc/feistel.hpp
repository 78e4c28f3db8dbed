// LM streams: a keyed permutation of [0, n) evaluated one index at a time, and row gathers (the
// twin of padless/_kernels/feistel.py).
#pragma once

#include <algorithm>
#include <cstdint>

#include "rng.hpp"

namespace padless {

// The width of the permuted domain: the smallest `bits` with 2**bits >= n (0 for n <= 1).
inline int64_t feistel_bits(int64_t n) {
    int64_t bits = 0;
    while (bits < 63 && (uint64_t{1} << bits) < static_cast<uint64_t>(n)) ++bits;
    return bits;
}

// One round of the network on x = L·2^right + R: R·2^left + (L ^ F(R)), F(R) = mix64(R ^ key)
// cut to `left` bits.
inline uint64_t feistel_round(uint64_t x, uint64_t right, uint64_t left, uint64_t rmask,
                              uint64_t lmask, uint64_t key) {
    uint64_t hi = x >> right;
    uint64_t lo = x & rmask;
    uint64_t f = mix64(lo ^ key) & lmask;
    return (lo << left) | (hi ^ f);
}

// Image of `i` under the keyed permutation of [0, n); 2**bits is the next power >= n.
//
// Each round maps x = L·2^b + R (L of a bits, R of b bits) to R·2^a + (L ^ F(R)), a bijection
// of [0, 2^bits) for any split a + b = bits; the split alternates so odd widths work (even
// rounds split at bits >> 1, odd ones at the rest: taken two rounds at a time, the shifts and
// masks stay loop constants). Cycle walking re-applies the network until the value falls
// below n.
inline int64_t feistel_one(int64_t i, int64_t n, int64_t bits, const uint64_t* round_keys,
                           int64_t rounds) {
    const uint64_t one = 1;
    const uint64_t right = static_cast<uint64_t>(bits >> 1);
    const uint64_t left = static_cast<uint64_t>(bits) - right;
    const uint64_t rmask = (one << right) - one;
    const uint64_t lmask = (one << left) - one;
    uint64_t x = static_cast<uint64_t>(i);
    const uint64_t limit = static_cast<uint64_t>(n);
    while (true) {
        int64_t r = 0;
        for (; r + 1 < rounds; r += 2) {
            x = feistel_round(x, right, left, rmask, lmask, round_keys[r]);
            x = feistel_round(x, left, right, lmask, rmask, round_keys[r + 1]);
        }
        if (r < rounds) x = feistel_round(x, right, left, rmask, lmask, round_keys[r]);
        if (x < limit) return static_cast<int64_t>(x);
    }
}

// Images of ids[0:count] (each in [0, n)) under the keyed permutation of [0, n).
inline void feistel_permute(const int64_t* ids, int64_t count, int64_t n,
                            const uint64_t* round_keys, int64_t rounds, int64_t* out) {
    int64_t bits = feistel_bits(n);
    for (int64_t k = 0; k < count; ++k) out[k] = feistel_one(ids[k], n, bits, round_keys, rounds);
}

// x86-64 builds target the baseline (SSE2); the gathers' widening copies (uint16 tokens into
// int64 rows...) run about twice as fast with AVX2's or AVX-512's vpmovzx, as numba compiled them
// for the host. So the contiguous copy is compiled three times and picked at run time.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PADLESS_GATHER_X86 1
#endif

// Row b of x (rows of w entries, back to back) is src[starts[b]:starts[b] + w] and row b of y
// the same shifted by one: the contiguous case, plain loops the compiler vectorises. Entries are
// cast to O as numpy's astype does (wrapping).
template <class S, class O>
__attribute__((always_inline)) inline void copy_rows(const S* src, const int64_t* starts,
                                                     int64_t rows, int64_t w, O* x, O* y) {
    // Ask for every 64-byte line of every row first: the requests are independent, so the
    // core keeps many cache misses in flight; the copy below then reads from cache.
    const int64_t step = std::max<int64_t>(64 / static_cast<int64_t>(sizeof(S)), 1);
    for (int64_t b = 0; b < rows && w > 0; ++b)
        for (int64_t t = 0; t <= w; t += step) __builtin_prefetch(src + starts[b] + t);
    for (int64_t b = 0; b < rows; ++b) {
        const S* xs = src + starts[b];
        const S* ys = xs + 1;
        O* xb = x + b * w;
        O* yb = y + b * w;
        for (int64_t t = 0; t < w; ++t) xb[t] = static_cast<O>(xs[t]);
        for (int64_t t = 0; t < w; ++t) yb[t] = static_cast<O>(ys[t]);
    }
}

template <class S, class O>
void copy_rows_base(const S* src, const int64_t* starts, int64_t rows, int64_t w, O* x, O* y) {
    copy_rows(src, starts, rows, w, x, y);
}

#ifdef PADLESS_GATHER_X86
template <class S, class O>
__attribute__((target("avx2"))) void copy_rows_avx2(const S* src, const int64_t* starts,
                                                    int64_t rows, int64_t w, O* x, O* y) {
    copy_rows(src, starts, rows, w, x, y);
}

template <class S, class O>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void copy_rows_avx512(
    const S* src, const int64_t* starts, int64_t rows, int64_t w, O* x, O* y) {
    copy_rows(src, starts, rows, w, x, y);
}
#endif

// copy_rows for src's entries `stride` elements apart (any stride, e.g. a column of a 2-D array).
template <class S, class O>
void gather_rows(const S* src, int64_t stride, const int64_t* starts, int64_t rows, int64_t w,
                 O* x, O* y) {
    if (stride == 1) {
#ifdef PADLESS_GATHER_X86
        if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
            return copy_rows_avx512(src, starts, rows, w, x, y);
        if (__builtin_cpu_supports("avx2")) return copy_rows_avx2(src, starts, rows, w, x, y);
#endif
        return copy_rows_base(src, starts, rows, w, x, y);
    }
    for (int64_t b = 0; b < rows; ++b) {
        const S* xs = src + starts[b] * stride;
        O* xb = x + b * w;
        O* yb = y + b * w;
        for (int64_t t = 0; t < w; ++t) {
            xb[t] = static_cast<O>(xs[t * stride]);
            yb[t] = static_cast<O>(xs[(t + 1) * stride]);
        }
    }
}

// The starts of an LM batch in random mode: row b holds subsequence perm((first + b) mod n),
// which starts at token offset + perm((first + b) mod n) · w.
inline void random_starts(int64_t first, int64_t n, int64_t offset, const uint64_t* round_keys,
                          int64_t rounds, int64_t w, int64_t rows, int64_t* starts) {
    int64_t bits = feistel_bits(n);
    for (int64_t b = 0; b < rows; ++b) {
        int64_t p = (first + b) % n;
        if (p != 0 && (p < 0) != (n < 0)) p += n;  // Python's modulo: the sign of n
        starts[b] = offset + feistel_one(p, n, bits, round_keys, rounds) * w;
    }
}

}  // namespace padless
