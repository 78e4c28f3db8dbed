// Static shapes: greedy batching into fixed (batch size, length) shapes, shape tags, and the
// choice of a shape set (the per-group DP, the plan's own cost, local moves, the carry DP).
//
// The twin of padless/_kernels/shapes.py, line for line: the same loops in the same order, so
// that ties (and so plans and shape sets) come out the same. All arithmetic is int64 on
// non-negative values; the Python layer keeps every sum below 2**62. Inputs follow the Python
// layer's rules: shape lengths and distinct sizes ascending, counts and rows >= 1, every size
// at most the longest shape.
#pragma once

#include <cstdint>
#include <vector>

#include "common.hpp"

namespace padless {
namespace shapes_detail {

// Python's a // b for b > 0 (a may be -1: an empty group's `(items - 1) // rows`).
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Index of the first entry of ascending `sorted_values` that is >= x (n if none).
inline int64_t first_at_least(const int64_t* sorted_values, int64_t n, int64_t x) {
    int64_t lo = 0;
    int64_t hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (sorted_values[mid] < x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Prefix sums of counts: csum[j] = counts[0] + ... + counts[j - 1], n + 1 entries.
inline std::vector<int64_t> prefix(const int64_t* counts, int64_t n) {
    std::vector<int64_t> csum(static_cast<size_t>(n + 1), 0);
    for (int64_t j = 0; j < n; ++j) csum[j + 1] = csum[j] + counts[j];
    return csum;
}

// Slots of a batch of `count` whose longest is group `s`'s length: the cheapest shape from `s`
// on that holds `count` rows (rows do not increase along the shapes).
inline int64_t closing_slots(int64_t count, int64_t s, const int64_t* ends, int64_t num_ends,
                             const int64_t* rows, const int64_t* values) {
    int64_t best = -1;
    for (int64_t t = s; t < num_ends; ++t) {
        int64_t r = rows[ends[t]];
        if (r < count) break;
        int64_t slots = r * values[ends[t]];
        if (best < 0 || slots < best) best = slots;
    }
    return best;
}

// shaped_cost over the prefix sums of the counts.
inline int64_t cost_of_ends(const int64_t* csum, const int64_t* values, const int64_t* rows,
                            const int64_t* ends, int64_t num_ends) {
    int64_t cost = 0;
    int64_t c = 0;
    int64_t start = 0;
    for (int64_t s = 0; s < num_ends; ++s) {
        int64_t e = ends[s];
        int64_t n = csum[e + 1] - csum[start];
        int64_t r = rows[e];
        if (c > 0 && c + 1 > r) {
            cost += closing_slots(c, s - 1, ends, num_ends, rows, values);
            c = 0;
        }
        int64_t total = c + n;
        int64_t full = floor_div(total - 1, r);
        cost += full * r * values[e];
        c = total - full * r;
        start = e + 1;
    }
    if (c > 0) cost += closing_slots(c, num_ends - 1, ends, num_ends, rows, values);
    return cost;
}

}  // namespace shapes_detail

// Where shape_ends stops at item p, a size no tier holds: the batches so far kept, p returned.
inline int64_t over_tiers(int64_t p, int64_t nb, Buffer<int64_t>& ends,
                          Buffer<int64_t>& longest) {
    ends.used = longest.used = nb;
    return p;
}

// Cut a walk of sizes greedily into batches that each fit one of the shapes.
//
// `tiers` are the distinct shape lengths, ascending; `caps[t]` is the most rows of any shape at
// least `tiers[t]` long (non-increasing). A batch of `c` items whose longest is `m` takes the
// next item `x` when `c + 1 <= caps[t]` for the first tier `t` with `tiers[t] >= max(m, x)`;
// otherwise it closes and `x` opens the next batch (its length counted). Every size must be
// <= `tiers[-1]` (tiers not empty): the first that is not stops the walk and is returned (else
// -1). Fills the end of every batch and its longest size. O(N + batches · log tiers) time.
template <class T>
int64_t shape_ends(const T* sizes, int64_t n, const int64_t* tiers, int64_t num_tiers,
                   const int64_t* caps, Buffer<int64_t>& ends, Buffer<int64_t>& longest) {
    ends = Buffer<int64_t>(n);
    longest = Buffer<int64_t>(n);
    int64_t nb = 0;
    int64_t count = 0;
    int64_t m = 0;
    int64_t t = 0;
    // a size over the last tier is caught where a tier scan starts (it would run past the end):
    // when a batch opens, and when it moves up a tier; never at an item that stays in its tier
    const int64_t top = num_tiers > 0 ? tiers[num_tiers - 1] : 0;
    for (int64_t p = 0; p < n; ++p) {
        int64_t x = static_cast<int64_t>(sizes[p]);
        if (count > 0) {
            int64_t mm = m >= x ? m : x;
            int64_t u = t;
            if (tiers[u] < mm) {
                if (mm > top) return over_tiers(p, nb, ends, longest);
                do ++u;
                while (tiers[u] < mm);
            }
            if (count + 1 <= caps[u]) {
                ++count;
                m = mm;
                t = u;
                continue;
            }
            ends[nb] = p;
            longest[nb] = m;
            ++nb;
        }
        if (x > top) return over_tiers(p, nb, ends, longest);
        count = 1;
        m = x;
        t = shapes_detail::first_at_least(tiers, num_tiers, x);
    }
    if (count > 0) {
        ends[nb] = n;
        longest[nb] = m;
        ++nb;
    }
    ends.used = nb;
    longest.used = nb;
    return -1;
}

// Tag batches with their shape: the index of the shape each (count, longest) takes.
//
// Shapes are sorted by (length, rows). Among the shapes at least `longest` long with at least
// `count` rows, the one with the fewest padded slots: rows × length when `pad_batches`, else
// length alone; ties go to the first (shorter, then fewer rows). -1 where none fits.
// O(batches · shapes) time at worst.
inline void pick_shapes(const int64_t* counts, const int64_t* longest, int64_t nb,
                        const int64_t* rows, const int64_t* lengths, int64_t k, bool pad_batches,
                        int64_t* out) {
    for (int64_t b = 0; b < nb; ++b) {
        int64_t c = counts[b];
        int64_t best = 0;
        int64_t at = -1;
        for (int64_t s = shapes_detail::first_at_least(lengths, k, longest[b]); s < k; ++s) {
            if (rows[s] < c) continue;
            int64_t cost = pad_batches ? rows[s] * lengths[s] : lengths[s];
            if (at < 0 || cost < best) {
                at = s;
                best = cost;
            }
            if (!pad_batches) break;
        }
        out[b] = at;
    }
}

// Padded slots (dummy rows included) of the FixedShapes plan of a length-sorted walk.
//
// The shapes are (rows[e], values[e]) for the group ends e in `ends` (ascending, the last
// n − 1), rows not increasing. Group by group: the open batch carries into the next group when
// one more row fits there, else it closes at its cheapest shape; full batches of a group cost
// rows × length. O(L + groups · shapes) time.
inline int64_t shaped_cost(const int64_t* values, const int64_t* counts, int64_t n,
                           const int64_t* rows, const int64_t* ends, int64_t num_ends) {
    std::vector<int64_t> csum = shapes_detail::prefix(counts, n);
    return shapes_detail::cost_of_ends(csum.data(), values, rows, ends, num_ends);
}

// Split sorted distinct `values` (with `counts`) into at most `k` contiguous groups that
// minimise the static cost; fills the index of each group's last value but the last.
// (shapes.cpp: the DP, its pruning and tie rules.)
Buffer<int64_t> static_cuts(const int64_t* values, const int64_t* counts, const int64_t* rows,
                            int64_t n, int64_t k);

// Improve group ends against shaped_cost by local moves; fills the ends, returns their cost.
// (shapes.cpp: the moves.)
int64_t polish_ends(const int64_t* values, const int64_t* counts, const int64_t* rows, int64_t n,
                    const int64_t* ends, int64_t num_ends, Buffer<int64_t>& out);

// Group ends for at most `k` shapes minimising shaped_cost exactly, pruned by `bound` (the cost
// of any feasible set of ends). (shapes.cpp: the carry DP.)
Buffer<int64_t> carry_cuts(const int64_t* values, const int64_t* counts, const int64_t* rows,
                           int64_t n, int64_t k, int64_t bound);

}  // namespace padless
