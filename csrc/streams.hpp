// Streams: one round of token-budget batching over a buffer, exact runs first, then the greedy
// rule (the twin of padless/_kernels/streams.py): the hot loop of padless.StreamBatcher with a
// TokenBudget.
#pragma once

#include "budget.hpp"
#include "common.hpp"

namespace padless {

// Products and sums of the round's int64 figures wrap around as numba's do (two's complement)
// instead of being undefined; with sizes below 2**31 and budgets below 2**62 they never do.
inline int64_t wrap_mul(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

inline int64_t wrap_add(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

inline int64_t wrap_sub(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

// Items per batch when every item has `size` (>= 0): what the greedy rule gives such a run of
// `count` items (0 = no limit for max_tokens / max_sentences).
inline int64_t run_batch(int64_t size, int64_t count, int64_t max_tokens, int64_t max_sentences,
                         int64_t multiple) {
    int64_t k = INT64_MAX_;
    if (max_tokens > 0 && size > 0) k = max_tokens / size;  // both positive: floor division
    if (max_sentences > 0 && max_sentences < k) k = max_sentences;
    if (multiple > 1 && k >= multiple && k != INT64_MAX_) k = k / multiple * multiple;
    if (k == INT64_MAX_) k = count;
    return std::max<int64_t>(k, 1);
}

struct BudgetRound {
    Buffer<int64_t> order;   // entries, batch after batch
    Buffer<int64_t> ends;    // batch ends into order
    Buffer<int64_t> real;    // per batch: its summed sizes
    Buffer<int64_t> padded;  // per batch: count × longest size
    Buffer<bool> leave;      // per batch: whether it leaves now
    bool keys_ok = true;     // false: a key outside [0, span) (nothing else is filled)
};

// Plan one round over a buffer of n entries.
// 1. Stable counting sort by `keys` (below span; length order, oldest first among equal keys).
// 2. Each run of one key gives its full batches of one length, oldest items first: they leave
//    (no padding).
// 3. The run remainders, in key order, are cut by the greedy budget rule (0 = no limit). A batch
//    leaves when `final`, when it holds a `late` entry, or when it is full (one more item of its
//    longest size, or `multiple` more once it holds that many, would break a limit) and pads at
//    most `target` of its slots (count × longest); else its entries wait.
// All the batches, the one-length ones first. O(n + span).
//
// The sort scatters each entry straight to its place in the result (the full batches of every
// run first, then the remainders, which the greedy rule cuts in that order): one pass over the
// entries after the histogram, and no sorted copy, remainder list or gathered sizes to hold.
template <class K, class T>
BudgetRound budget_round(const K* keys, int64_t n, int64_t span, const T* sizes, const bool* late,
                         int64_t max_tokens, int64_t max_sentences, int64_t multiple, bool final,
                         double target) {
    BudgetRound out;
    // histogram, and the size of each key's first entry (the size of its one-length batches)
    Buffer<int64_t> count = zeros<int64_t>(span);
    Buffer<int64_t> run_size(span);
    for (int64_t i = 0; i < n; ++i) {
        uint64_t k = static_cast<uint64_t>(static_cast<int64_t>(keys[i]));
        if (k >= static_cast<uint64_t>(span)) {
            out.keys_ok = false;
            return out;
        }
        if (count[static_cast<int64_t>(k)]++ == 0)
            run_size[static_cast<int64_t>(k)] = static_cast<int64_t>(sizes[i]);
    }
    // where each run's full batches and remainder go: full[r] entries at fill[r], the rest at
    // rest_fill[r] (after every run's full batches)
    Buffer<int64_t> fill(span), full_end(span), rest_fill(span);
    int64_t num_full = 0, num_full_batches = 0;
    for (int64_t r = 0; r < span; ++r) {
        if (count[r] == 0) continue;
        int64_t k = run_batch(run_size[r], count[r], max_tokens, max_sentences, multiple);
        int64_t full = count[r] / k * k;
        fill[r] = num_full;
        num_full += full;
        full_end[r] = num_full;
        num_full_batches += full / k;
    }
    int64_t rest_at = num_full;
    for (int64_t r = 0; r < span; ++r) {
        if (count[r] == 0) continue;
        rest_fill[r] = rest_at;
        rest_at += count[r] - (full_end[r] - fill[r]);
    }
    out.order = Buffer<int64_t>(n);
    int64_t* order = out.order.get();
    for (int64_t i = 0; i < n; ++i) {
        int64_t k = static_cast<int64_t>(keys[i]);
        if (fill[k] < full_end[k]) {
            order[fill[k]++] = i;
        } else {
            order[rest_fill[k]++] = i;
        }
    }
    // the greedy rule over the remainders (sizes read in place: rest[j] = order[num_full + j])
    const int64_t* rest = order + num_full;
    int64_t nr = n - num_full;
    // an item over max_tokens (the callers leave none) closes two batches, hence 2 per item
    Buffer<int64_t> cuts(2 * nr + 2);
    BudgetWalk walk(max_tokens, max_sentences, multiple);
    for (int64_t j = 0; j < nr; ++j) walk.step(j, static_cast<int64_t>(sizes[rest[j]]), cuts.get());
    walk.finish(nr, cuts.get());
    int64_t nb = num_full_batches + walk.closed;
    out.ends = Buffer<int64_t>(nb);
    out.real = Buffer<int64_t>(nb);
    out.padded = Buffer<int64_t>(nb);
    out.leave = Buffer<bool>(nb);
    int64_t b = 0, pos = 0;
    for (int64_t r = 0; r < span; ++r) {
        if (count[r] == 0) continue;
        int64_t size = run_size[r];
        int64_t k = run_batch(size, count[r], max_tokens, max_sentences, multiple);
        for (int64_t e = 0; e < count[r] / k; ++e) {
            pos += k;
            out.ends[b] = pos;
            out.real[b] = out.padded[b] = wrap_mul(k, size);
            out.leave[b] = true;
            ++b;
        }
    }
    int64_t start = 0;
    for (int64_t c = 0; c < walk.closed; ++c) {
        int64_t e = cuts[c];
        int64_t num = e - start;
        T longest = sizes[rest[start]];
        int64_t total = 0;
        bool due = final;
        for (int64_t j = start; j < e; ++j) {
            T s = sizes[rest[j]];
            if (s > longest) longest = s;
            total = wrap_add(total, static_cast<int64_t>(s));
            if (late[rest[j]]) due = true;
        }
        int64_t top = static_cast<int64_t>(longest);
        int64_t cost = wrap_mul(num, top);
        bool go = due;
        if (!go) {
            int64_t step = num >= multiple ? multiple : 1;
            bool full = max_tokens == 0 && max_sentences == 0;
            if (max_tokens > 0 && wrap_mul(wrap_add(num, step), top) > max_tokens) full = true;
            if (max_sentences > 0 && wrap_add(num, step) > max_sentences) full = true;
            // numba compares the int64 padding with a float64 product: both as float64
            go = full && static_cast<double>(wrap_sub(cost, total)) <=
                             target * static_cast<double>(cost);
        }
        out.ends[b] = num_full + e;
        out.real[b] = total;
        out.padded[b] = cost;
        out.leave[b] = go;
        ++b;
        start = e;
    }
    return out;
}

}  // namespace padless
