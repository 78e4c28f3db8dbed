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

}  // namespace padless
