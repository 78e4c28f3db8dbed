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

// The values of segments `picked` (each in [0, num_offsets - 1)), one after the other; -1 in
// `bad` is the position of the first picked segment out of range (nothing written then).
inline Buffer<int64_t> take_segments(const int64_t* values, const int64_t* offsets,
                                     int64_t num_offsets, const int64_t* picked, int64_t n,
                                     int64_t& bad) {
    int64_t total = 0;
    bad = -1;
    for (int64_t k = 0; k < n; ++k) {
        int64_t b = picked[k];
        if (b < 0 || b + 1 >= num_offsets) {
            bad = k;
            return Buffer<int64_t>(0);
        }
        total += offsets[b + 1] - offsets[b];
    }
    Buffer<int64_t> out(total);
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
        int64_t b = picked[k];
        for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) out[at++] = values[i];
    }
    return out;
}

// Mark in `named` the index every value names (v names v % n; values non-negative).
inline void mark_named(uint8_t* named, const int64_t* values, int64_t count, int64_t n) {
    for (int64_t k = 0; k < count; ++k) {
        int64_t v = values[k];
        named[v < n ? v : v % n] = 1;  // a division only for piece codes
    }
}

// The indices in [0, n) not marked in `named`, ascending.
inline Buffer<int64_t> unmarked(const uint8_t* named, int64_t n) {
    int64_t left = 0;
    for (int64_t i = 0; i < n; ++i) left += named[i] == 0;
    Buffer<int64_t> out(left + 1);  // one slot past the end: the branch-free write below
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
        out[at] = i;
        at += named[i] == 0;
    }
    out.used = left;
    return out;
}

// The indices in [0, n) that no value names (value v names v % n; values non-negative),
// ascending.
inline Buffer<int64_t> unnamed(const int64_t* values, int64_t count, int64_t n) {
    Buffer<uint8_t> named = zeros<uint8_t>(n);
    mark_named(named.get(), values, count, n);
    return unmarked(named.get(), n);
}

// unnamed() of the values of segments `picked` (checked in range by the caller); `negative`
// is set, and nothing returned, when one of those values is negative.
inline Buffer<int64_t> unnamed_segments(const int64_t* values, const int64_t* offsets,
                                        const int64_t* picked, int64_t count, int64_t n,
                                        bool& negative) {
    Buffer<uint8_t> named = zeros<uint8_t>(n);
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
