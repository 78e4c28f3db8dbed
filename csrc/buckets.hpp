// Bucket boundaries: the split of a length histogram that minimises padded slots (the twin of
// padless/_kernels/buckets.py).
#pragma once

#include <stdexcept>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "sat.hpp"

namespace padless {

// 128-bit unsigned costs: every cost is at most Σ counts × max value < 2**126, so a sum of two
// never wraps, and the unsigned order is numba's (hi signed, lo unsigned) lexicographic order.
__extension__ typedef unsigned __int128 u128;

// Exact a × b of non-negative int64s.
inline u128 mul_wide(int64_t a, int64_t b) {
    return static_cast<u128>(static_cast<uint64_t>(a)) * static_cast<uint64_t>(b);
}

// Leftmost i in [olo, last] minimising prev[i] + (C[mid] − C[i]) · v[mid − 1], with its cost.
// Cost is int64_t (no cost passes INT64_MAX) or u128.
template <class Cost, class T>
inline std::pair<int64_t, Cost> best_split(const Cost* prev, const int64_t* csum, const T* values,
                                           int64_t mid, int64_t olo, int64_t last) {
    int64_t v = static_cast<int64_t>(values[mid - 1]);
    auto cost = [&](int64_t i) -> Cost {
        if constexpr (std::is_same_v<Cost, u128>) {
            return prev[i] + mul_wide(csum[mid] - csum[i], v);
        } else {
            return prev[i] + (csum[mid] - csum[i]) * v;
        }
    };
    int64_t arg = olo;
    Cost val = cost(olo);
    for (int64_t i = olo + 1; i <= last; ++i) {
        Cost c = cost(i);
        if (c < val) {  // strict: ties keep the leftmost split
            val = c;
            arg = i;
        }
    }
    return {arg, val};
}

// The DP of optimal_cuts over costs of type Cost, given csum (n + 1 prefix counts); writes the
// groups − 1 cuts to out.
template <class Cost, class T>
void optimal_cuts_dp(const T* values, const int64_t* csum, int64_t n, int64_t groups,
                     int64_t* out) {
    // cost of the first j values in the groups so far: prev[j]
    std::vector<Cost> prev(static_cast<size_t>(n + 1)), cur(static_cast<size_t>(n + 1));
    prev[0] = 0;
    for (int64_t j = 1; j <= n; ++j) {
        int64_t v = static_cast<int64_t>(values[j - 1]);
        if constexpr (std::is_same_v<Cost, u128>) {
            prev[j] = mul_wide(csum[j], v);
        } else {
            prev[j] = csum[j] * v;
        }
    }
    // best[m][j]: the leftmost best start of the last of m groups over the first j values
    // (int32: a histogram has fewer than 2**31 distinct values)
    std::vector<int32_t> best(static_cast<size_t>((groups + 1) * (n + 1)), 0);
    int64_t stack[130][4];  // depth-first: at most one pending sibling per level
    for (int64_t m = 2; m <= groups; ++m) {
        // cur[j] for j in [m, n]: best cost of the first j values in m groups
        stack[0][0] = m;
        stack[0][1] = n;
        stack[0][2] = m - 1;
        stack[0][3] = n - 1;
        int64_t top = 1;
        int32_t* row = best.data() + m * (n + 1);
        while (top > 0) {
            --top;
            int64_t lo = stack[top][0], hi = stack[top][1];
            int64_t olo = stack[top][2], ohi = stack[top][3];
            if (lo > hi) continue;
            int64_t mid = (lo + hi) / 2;
            int64_t last = ohi < mid - 1 ? ohi : mid - 1;
            auto [arg, val] = best_split(prev.data(), csum, values, mid, olo, last);
            cur[mid] = val;
            row[mid] = static_cast<int32_t>(arg);
            stack[top][0] = lo;
            stack[top][1] = mid - 1;
            stack[top][2] = olo;
            stack[top][3] = arg;
            ++top;
            stack[top][0] = mid + 1;
            stack[top][1] = hi;
            stack[top][2] = arg;
            stack[top][3] = ohi;
            ++top;
        }
        std::copy(cur.begin() + m, cur.end(), prev.begin() + m);
    }
    int64_t j = n;
    for (int64_t m = groups; m > 1; --m) {
        int64_t i = best[static_cast<size_t>(m * (n + 1) + j)];
        out[m - 2] = i - 1;
        j = i;
    }
}

// Split sorted distinct `values` (with `counts`) into min(k, L) contiguous groups that minimise
// Σ group count × group max; return the index of each group's last value but the last.
//
// DP over groups with the divide-and-conquer optimisation: the cost (C[j] − C[i])·v[j−1] of a
// group i..j−1 satisfies the quadrangle inequality, so the leftmost best split is monotone in j.
// O(k · L · log L) time, O(k · L) memory (int32 split table); ties go to the leftmost split.
// Exact integer arithmetic, never wrapping: int64 while Σ counts × max value fits in it, else
// 128-bit costs. Throws std::invalid_argument (ValueError) when the counts add up to 2**63 − 1
// or more (they count items).
template <class T>
Buffer<int64_t> optimal_cuts(const T* values, const int64_t* counts, int64_t n, int64_t k) {
    int64_t groups = k < n ? k : n;
    if (groups <= 1) return Buffer<int64_t>(0);
    std::vector<int64_t> csum(static_cast<size_t>(n + 1), 0);
    int64_t biggest = static_cast<int64_t>(values[0]);
    for (int64_t j = 0; j < n; ++j) {
        csum[j + 1] = sat_add(csum[j], counts[j]);
        int64_t v = static_cast<int64_t>(values[j]);
        if (v > biggest) biggest = v;
    }
    if (csum[n] == INT64_MAX_) {
        throw std::invalid_argument("optimal_cuts: counts must add up to less than 2**63 - 1");
    }
    Buffer<int64_t> out(groups - 1);
    // every cost is at most Σ counts × max value
    if (mul_exceeds(csum[n], biggest, INT64_MAX_)) {
        optimal_cuts_dp<u128>(values, csum.data(), n, groups, out.get());
    } else {
        optimal_cuts_dp<int64_t>(values, csum.data(), n, groups, out.get());
    }
    return out;
}

}  // namespace padless
