// Per-segment figures of a plan (segment b is values[offsets[b]:offsets[b+1]]): the twin of
// padless/_kernels/segments.py.
#pragma once

#include "common.hpp"

namespace padless {

// Max of each segment (0 for an empty one), in the values' type (non-negative values).
template <class T>
Buffer<T> segment_max(const T* values, const int64_t* offsets, int64_t num_offsets) {
    int64_t nb = num_offsets - 1;
    Buffer<T> out = zeros<T>(nb > 0 ? nb : 0);
    for (int64_t b = 0; b < nb; ++b) {
        T m = T(0);
        for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i)
            if (values[i] > m) m = values[i];
        out[b] = m;
    }
    return out;
}

// The values of segments `picked` (each checked in range by the caller), one after the other.
inline Buffer<int64_t> take_segments(const int64_t* values, const int64_t* offsets,
                                     const int64_t* picked, int64_t n) {
    int64_t total = 0;
    for (int64_t k = 0; k < n; ++k) total += offsets[picked[k] + 1] - offsets[picked[k]];
    Buffer<int64_t> out(total);
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
        int64_t b = picked[k];
        for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) out[at++] = values[i];
    }
    return out;
}

// Mark in the bitset `named` (bit i of word i / 64) the index every value names (v names
// v % n; values non-negative): a bit per index keeps the random writes in cache.
inline void mark_named(uint64_t* named, const int64_t* values, int64_t count, int64_t n) {
    for (int64_t k = 0; k < count; ++k) {
        int64_t v = values[k];
        int64_t i = v < n ? v : v % n;  // a division only for piece codes
        named[i >> 6] |= uint64_t(1) << (i & 63);
    }
}

// The indices in [0, n) not marked in the bitset `named`, ascending.
inline Buffer<int64_t> unmarked(const uint64_t* named, int64_t n) {
    int64_t words = (n + 63) >> 6, marked = 0;
    for (int64_t w = 0; w < words; ++w) marked += __builtin_popcountll(named[w]);
    const int64_t left = n - marked;
    Buffer<int64_t> out(left);
    int64_t at = 0;
    for (int64_t w = 0; w < words; ++w) {
        uint64_t free = ~named[w];
        if (w == words - 1 && (n & 63)) free &= (uint64_t(1) << (n & 63)) - 1;
        while (free) {  // the unmarked bits of the word, lowest first
            out[at++] = (w << 6) + __builtin_ctzll(free);
            free &= free - 1;
        }
    }
    return out;
}

// The indices in [0, n) that no value of segments `picked` (checked in range by the caller)
// names (value v names v % n), ascending; `negative` is set, and nothing returned, when one
// of those values is negative.
inline Buffer<int64_t> unnamed_segments(const int64_t* values, const int64_t* offsets,
                                        const int64_t* picked, int64_t count, int64_t n,
                                        bool& negative) {
    Buffer<uint64_t> named = zeros<uint64_t>((n + 63) >> 6);
    negative = false;
    for (int64_t k = 0; k < count; ++k) {
        const int64_t b = picked[k];
        const int64_t* v = values + offsets[b];
        const int64_t size = offsets[b + 1] - offsets[b];
        for (int64_t i = 0; i < size; ++i) negative |= v[i] < 0;
        if (negative) return Buffer<int64_t>(0);
        mark_named(named.get(), v, size, n);
    }
    return unmarked(named.get(), n);
}

}  // namespace padless
