// Exact-length batching: runs cut into fixed-size batches, leftovers merged by a cap rule (the
// twin of padless/_kernels/exact.py). Sizes are widened to int64 before any arithmetic, as numba
// did with every narrower integer.
#pragma once

#include "common.hpp"
#include "sat.hpp"

namespace padless {

// What exact_split hands back: the kept count, the batch ends, the left-out items and their runs.
struct ExactSplit {
    int64_t kept = 0;
    Buffer<int64_t> ends, rest, rest_run;
};

// Cut run r of `order` (order[starts[r]:starts[r+1]], `runs` + 1 starts) into batches of
// run_size[r]. A run with run_size[r] == 0 is left out. `mode` says what happens to a run's last,
// incomplete batch: 0 keeps it as a smaller batch, 1 or 2 moves its items to `rest`. Kept items
// are compacted to the front of `order` in place (nothing moves when nothing is left out).
// order[:kept] holds the batches, `ends` their ends, then the left-out items in run order with
// the run each came from. O(runs + batches + items moved) time.
inline ExactSplit exact_split(int64_t* order, int64_t n, const int64_t* starts, int64_t runs,
                              const int64_t* run_size, int64_t mode) {
    int64_t n_keep = 0, n_batches = 0;
    for (int64_t r = 0; r < runs; ++r) {
        int64_t count = starts[r + 1] - starts[r];
        int64_t size = run_size[r];
        if (count == 0 || size == 0) continue;
        int64_t full = count / size;
        n_keep += full * size;
        n_batches += full;
        if (mode == 0 && count > full * size) {
            n_keep += count - full * size;
            n_batches += 1;
        }
    }
    ExactSplit out;
    out.kept = n_keep;
    out.ends = Buffer<int64_t>(n_batches);
    out.rest = Buffer<int64_t>(n - n_keep);
    out.rest_run = Buffer<int64_t>(n - n_keep);
    int64_t k = 0, b = 0, q = 0;
    for (int64_t r = 0; r < runs; ++r) {
        int64_t lo = starts[r], hi = starts[r + 1];
        int64_t size = run_size[r];
        if (hi == lo) continue;
        int64_t stop = lo;
        if (size > 0) stop = mode == 0 ? hi : lo + ((hi - lo) / size) * size;
        if (k < lo) std::copy(order + lo, order + stop, order + k);  // moves down: no overlap harm
        int64_t pos = k;
        k += stop - lo;
        while (pos < k) {
            pos = size < k - pos ? pos + size : k;  // pos + size could pass INT64_MAX
            out.ends[b++] = pos;
        }
        for (int64_t i = stop; i < hi; ++i) {
            out.rest[q] = order[i];
            out.rest_run[q] = r;
            ++q;
        }
    }
    return out;
}

// Greedy batches over items in order: a batch holds at most the cap of its longest item. Item i
// has size sizes[i] and cap caps[i] (the batch size its size allows; equal sizes must have equal
// caps). An item joins the open batch when the count stays within the cap of the batch's longest
// item, itself included; otherwise it opens the next batch. Returns the batch ends. O(n).
template <class T>
Buffer<int64_t> capped_ends(const T* sizes, const int64_t* caps, int64_t n) {
    Buffer<int64_t> ends(n);
    int64_t b = 0, count = 0, longest = 0, cap = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t s = static_cast<int64_t>(sizes[i]);
        int64_t new_longest = longest, new_cap = cap;
        if (count == 0 || s >= longest) {
            new_longest = s;
            new_cap = caps[i];
        }
        if (count > 0 && count + 1 > new_cap) {
            ends[b++] = i;
            count = 0;
            new_longest = s;
            new_cap = caps[i];
        }
        ++count;
        longest = new_longest;
        cap = new_cap;
    }
    if (count > 0) ends[b++] = n;
    ends.used = b;
    return ends;
}

// The first item a last batch ending at j may start at: j - caps[j - 1], within [0, j - 1].
inline int64_t first_start(int64_t j, int64_t cap) {
    int64_t lo = j - cap > 0 ? j - cap : 0;
    return lo < j - 1 ? lo : j - 1;
}

// The prefix tables of least_padding_ends with exact int64 arithmetic (the caller makes sure no
// total passes INT64_MAX): the best last batch [i, j) for each j, the earliest i on ties.
template <class T>
void least_padding_dp(const T* sizes, const int64_t* caps, int64_t n, int64_t* best_count,
                      int64_t* best_pad, int64_t* back) {
    std::unique_ptr<int64_t[]> csum(new int64_t[n + 1]);
    csum[0] = 0;
    for (int64_t i = 0; i < n; ++i) csum[i + 1] = csum[i] + static_cast<int64_t>(sizes[i]);
    for (int64_t j = 1; j <= n; ++j) {
        int64_t top = static_cast<int64_t>(sizes[j - 1]);
        int64_t lo = first_start(j, caps[j - 1]);
        int64_t bc = -1, bp = 0, bi = j - 1;
        for (int64_t i = lo; i < j; ++i) {
            int64_t c = best_count[i] + 1;
            int64_t pad = best_pad[i] + (j - i) * top - (csum[j] - csum[i]);
            if (bc < 0 || c < bc || (c == bc && pad < bp)) {
                bc = c;
                bp = pad;
                bi = i;
            }
        }
        best_count[j] = bc;
        best_pad[j] = bp;
        back[j] = bi;
    }
}

// least_padding_dp with paddings summed item by item, saturating at INT64_MAX.
template <class T>
void least_padding_dp_saturating(const T* sizes, const int64_t* caps, int64_t n,
                                 int64_t* best_count, int64_t* best_pad, int64_t* back) {
    for (int64_t j = 1; j <= n; ++j) {
        int64_t top = static_cast<int64_t>(sizes[j - 1]);
        int64_t lo = first_start(j, caps[j - 1]);
        int64_t bc = -1, bp = 0, bi = j - 1;
        int64_t window = 0;  // padding of the batch [i, j)
        // last cuts first, so "<=" keeps the earliest tie
        for (int64_t i = j - 1; i >= lo; --i) {
            window = sat_add(window, top - static_cast<int64_t>(sizes[i]));
            int64_t c = best_count[i] + 1;
            int64_t pad = sat_add(best_pad[i], window);
            if (bc < 0 || c < bc || (c == bc && pad <= bp)) {
                bc = c;
                bp = pad;
                bi = i;
            }
        }
        best_count[j] = bc;
        best_pad[j] = bp;
        back[j] = bi;
    }
}

// Batch ends over items sorted by size: fewest batches, then least padding among those. A batch
// [i, j) is allowed when j - i <= caps[j - 1] (the cap of its longest, last item) and pads
// (j - i) · sizes[j - 1] − Σ sizes[i:j]. Dynamic programming over prefixes with (count, padding)
// compared lexicographically; ties keep the earliest cut. The greedy (capped_ends) gives the same
// count but cuts wherever a batch fills, often mid-run of a length; this moves cuts to length
// changes. O(n · max cap) time, O(n) memory.
//
// Paddings are exact below INT64_MAX and saturate there (never wrap): when n × the largest size
// could pass it, paddings are summed item by item with saturating adds (about 2× slower).
template <class T>
Buffer<int64_t> least_padding_ends(const T* sizes, const int64_t* caps, int64_t n) {
    int64_t biggest = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t s = static_cast<int64_t>(sizes[i]);
        if (s > biggest) biggest = s;
    }
    Buffer<int64_t> best_count = zeros<int64_t>(n + 1);
    Buffer<int64_t> best_pad = zeros<int64_t>(n + 1);
    Buffer<int64_t> back = zeros<int64_t>(n + 1);
    if (mul_exceeds(n, biggest, INT64_MAX_)) {
        least_padding_dp_saturating(sizes, caps, n, best_count.get(), best_pad.get(), back.get());
    } else {
        least_padding_dp(sizes, caps, n, best_count.get(), best_pad.get(), back.get());
    }
    int64_t count = best_count[n];
    Buffer<int64_t> ends(count);
    int64_t j = n;
    for (int64_t b = count - 1; b >= 0; --b) {
        ends[b] = j;
        j = back[j];
    }
    return ends;
}

}  // namespace padless
