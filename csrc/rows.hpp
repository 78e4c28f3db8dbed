// Packed rows' columns for padless.ray: the gather behind padless/ray/_pack.py's row_columns.
#pragma once

#include <cstdint>

namespace padless {

// Packed rows' columns, flat: tokens, position_ids, seq_idx, cu_seqlens. Entry e is
// values[src[e] : src[e] + seg[e]]; row r holds entries bounds[r]:bounds[r + 1], back to back.
// cu_seqlens holds k + 1 values per row of k entries (from 0). One pass over the output tokens
// (`total` = the sum of seg; cu has n + num_bounds - 1 entries).
template <class T>
void row_columns(const T* values, const int64_t* src, const int64_t* seg, const int64_t* bounds,
                 int64_t num_bounds, T* tokens, int32_t* position, int32_t* seq_idx,
                 int32_t* cu) {
    int64_t t = 0;
    for (int64_t r = 0; r + 1 < num_bounds; ++r) {
        const int64_t lo = bounds[r], hi = bounds[r + 1];
        const int64_t base = t;
        cu[lo + r] = 0;
        for (int64_t e = lo; e < hi; ++e) {
            const int64_t s = src[e], k = seg[e];
            const int32_t within = static_cast<int32_t>(e - lo);
            for (int64_t j = 0; j < k; ++j) {
                tokens[t + j] = values[s + j];
                position[t + j] = static_cast<int32_t>(j);
                seq_idx[t + j] = within;
            }
            t += k;
            cu[e + r + 1] = static_cast<int32_t>(t - base);
        }
    }
}

}  // namespace padless
