// Windowed plans: read a window's items from (memory-mapped) lengths and plan it in one call
// (the twin of padless/_kernels/windows.py).
//
// A window is a list of blocks of consecutive positions. Position q holds item
// (q + rotation) mod n, block b the positions [b·block, min((b + 1)·block, n)), so a block is at
// most two runs of consecutive items and the lengths are read sequentially, block by block.
// The fused kernels plan one window exactly as the token budget and packing planners plan that
// window's lengths, with global item ids written straight into the order.
#pragma once

#include <vector>

// common.hpp first: bittree.hpp uses size_t without including <cstddef>
#include "common.hpp"

#include "bittree.hpp"
#include "budget.hpp"
#include "order.hpp"

namespace padless {

// The lengths as the caller holds them: any integer dtype, any stride (a column of a mapped
// (N, F) file is read in place, never copied). Entry i as int64.
template <class T>
struct Column {
    const T* data;
    int64_t stride;  // in elements
    int64_t operator[](int64_t i) const { return static_cast<int64_t>(data[i * stride]); }
};

// An (rows, fields) matrix of lengths, any strides (in elements).
template <class T>
struct Matrix {
    const T* data;
    int64_t rows, fields, row_stride, field_stride;
    int64_t at(int64_t i, int64_t f) const {
        return static_cast<int64_t>(data[i * row_stride + f * field_stride]);
    }
};

// Which positions a window holds: n items, blocks of `block` positions, the epoch's rotation,
// and the window's block numbers.
struct WindowBlocks {
    int64_t n, block, rotation;
    const int64_t* blocks;
    int64_t num_blocks;

    // fn(lo, hi) for every run of consecutive item ids [lo, hi) of the window, in order: each
    // block is the items g, g+1, ... up to the wrap at n, then 0, 1, ...
    template <class Fn>
    void for_each_run(Fn&& fn) const {
        for (int64_t t = 0; t < num_blocks; ++t) {
            int64_t q0 = blocks[t] * block;
            int64_t q1 = std::min(q0 + block, n);
            int64_t g = q0 + rotation;
            if (g >= n) g -= n;
            int64_t first = std::min(q1 - q0, n - g);
            fn(g, g + first);
            if (q1 - q0 - first > 0) fn(int64_t(0), q1 - q0 - first);
        }
    }

    // Number of positions in the window.
    int64_t size() const {
        int64_t total = 0;
        for (int64_t t = 0; t < num_blocks; ++t) {
            int64_t q0 = blocks[t] * block;
            total += std::min(q0 + block, n) - q0;
        }
        return total;
    }
};

// Global item ids of the window's positions (block after block, in order).
inline Buffer<int64_t> window_items(const WindowBlocks& win) {
    Buffer<int64_t> out(win.size());
    int64_t pos = 0;
    win.for_each_run([&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[pos++] = i;
    });
    return out;
}

// src[items] of an (N, F) array as int64, row-major (items, F): one window's lengths.
template <class T>
Buffer<int64_t> gather_rows(const Matrix<T>& src, const int64_t* items, int64_t num_items) {
    Buffer<int64_t> out(num_items * src.fields);
    int64_t* o = out.get();
    for (int64_t i = 0; i < num_items; ++i) {
        int64_t row = items[i];
        for (int64_t f = 0; f < src.fields; ++f) *o++ = src.at(row, f);
    }
    return out;
}

// One pass over an (n, F) chunk: lowest and highest entry (the range check), and the smallest
// and largest size (max over fields) with the first row holding each (-1 for an empty chunk,
// whose figures are all 0).
struct LengthScan {
    int64_t lowest = 0, highest = 0, size_lo = 0, arg_lo = -1, size_hi = 0, arg_hi = -1;
};

template <class T>
LengthScan scan_lengths(const Matrix<T>& src) {
    LengthScan out;
    if (src.rows == 0) return out;
    int64_t lowest = src.at(0, 0), highest = lowest;
    int64_t size_lo = 0, size_hi = 0, arg_lo = -1, arg_hi = -1;
    for (int64_t i = 0; i < src.rows; ++i) {
        int64_t s = src.at(i, 0);
        if (s < lowest) lowest = s;
        if (s > highest) highest = s;
        for (int64_t f = 1; f < src.fields; ++f) {
            int64_t v = src.at(i, f);
            if (v < lowest) lowest = v;
            if (v > highest) highest = v;
            if (v > s) s = v;
        }
        if (arg_lo < 0 || s < size_lo) {
            size_lo = s;
            arg_lo = i;
        }
        if (arg_hi < 0 || s > size_hi) {
            size_hi = s;
            arg_hi = i;
        }
    }
    out.lowest = lowest;
    out.highest = highest;
    out.size_lo = size_lo;
    out.arg_lo = arg_lo;
    out.size_hi = size_hi;
    out.arg_hi = arg_hi;
    return out;
}

// Run bounds of the window's sizes (all below span): starts[k]:starts[k+1] is the run of size
// k, starts[span] the window's size.
template <class T>
Buffer<int64_t> window_histogram(Column<T> sizes, const WindowBlocks& win, int64_t span) {
    Buffer<int64_t> starts = zeros<int64_t>(span + 1);
    int64_t* s = starts.get();
    win.for_each_run([&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) s[sizes[i] + 1] += 1;
    });
    for (int64_t k = 0; k < span; ++k) s[k + 1] += s[k];
    return starts;
}

// Global ids of the window by increasing size, ties shuffled from `key`: length_order of the
// window's lengths with every position replaced by its item id.
template <class T>
CountingOrder window_order(Column<T> sizes, const WindowBlocks& win, int64_t span,
                           uint64_t key) {
    CountingOrder out{Buffer<int64_t>(0), window_histogram(sizes, win, span)};
    const int64_t* starts = out.starts.get();
    out.order = Buffer<int64_t>(starts[span]);
    std::vector<int64_t> fill(starts, starts + span);
    int64_t* order = out.order.get();
    int64_t* f = fill.data();
    win.for_each_run([&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) order[f[sizes[i]]++] = i;
    });
    shuffle_runs(order, starts, span + 1, key);
    return out;
}

// budget_ends_runs with multiple 1 over runs of sizes 0, 1, ..., runs - 1, a batch at a time:
// the number of ends, written to `ends` unless it is null (just count them).
//
// With multiple 1 every item that fits joins the batch, so the batch at an item of size s closes
// when it would hold more than cap(s) = min(max_sentences, max_tokens // s) items (sizes only
// grow, so s is its longest); a run then continues in batches of cap(s). An item never breaks
// max_tokens alone (longer items are skipped before), so no tail closes alone.
inline int64_t budget_ends_runs1(const int64_t* starts, int64_t runs, int64_t max_tokens,
                                 int64_t max_sentences, int64_t* ends) {
    const int64_t no_cap = int64_t(1) << 62;
    int64_t closed = 0, start = 0;
    for (int64_t r = 0; r < runs; ++r) {
        int64_t p0 = starts[r], p1 = starts[r + 1];
        if (p1 == p0) continue;
        int64_t cap = max_sentences > 0 ? max_sentences : no_cap;
        if (max_tokens > 0 && r > 0 && max_tokens / r < cap) cap = max_tokens / r;
        int64_t pos = std::max(p0, start + cap);
        while (pos < p1) {
            if (ends != nullptr) ends[closed] = pos;
            closed += 1;
            start = pos;
            pos = start + cap;
        }
    }
    if (starts[runs] > start) {
        if (ends != nullptr) ends[closed] = starts[runs];
        closed += 1;
    }
    return closed;
}

// The token-budget batch ends over the runs of sizes 0 .. runs - 1: a batch at a time with
// multiple 1, else the greedy rule item by item (budget_ends_runs over values 0, 1, ...).
//
// The buffer has the size of the window's batches, not of its items: an (untouched) entry per
// item, as numpy's empty gave, still costs page faults each window once the allocator hands such
// blocks back to the system between windows.
inline Buffer<int64_t> budget_ends(const int64_t* starts, int64_t runs, int64_t max_tokens,
                                   int64_t max_sentences, int64_t multiple) {
    if (multiple == 1) {
        Buffer<int64_t> ends(budget_ends_runs1(starts, runs, max_tokens, max_sentences, nullptr));
        budget_ends_runs1(starts, runs, max_tokens, max_sentences, ends.get());
        return ends;
    }
    // A step closes at most two batches (finish too): the room grows a chunk of steps at a time.
    const int64_t chunk = 4096;
    std::vector<int64_t> room;
    auto reserve = [&](int64_t need) {
        if (static_cast<int64_t>(room.size()) < need)
            room.resize(static_cast<size_t>(std::max(need, 2 * static_cast<int64_t>(room.size()))));
    };
    BudgetWalk walk(max_tokens, max_sentences, multiple);
    for (int64_t r = 0; r < runs; ++r) {
        for (int64_t pos = starts[r]; pos < starts[r + 1];) {
            int64_t stop = std::min(pos + chunk, starts[r + 1]);
            reserve(walk.closed + 2 * (stop - pos));
            for (; pos < stop; ++pos) walk.step(pos, r, room.data());
        }
    }
    reserve(walk.closed + 2);
    walk.finish(starts[runs], room.data());
    Buffer<int64_t> ends(walk.closed);
    std::copy(room.data(), room.data() + walk.closed, ends.get());
    return ends;
}

// Number of batches budget_ends makes.
inline int64_t budget_ends_count(const int64_t* starts, int64_t runs, int64_t max_tokens,
                                 int64_t max_sentences, int64_t multiple) {
    if (multiple == 1) return budget_ends_runs1(starts, runs, max_tokens, max_sentences, nullptr);
    return budget_ends(starts, runs, max_tokens, max_sentences, multiple).used;
}

// Row visits of best_fit_runs are the rows of an (nv, 4) int64 array: visit v puts
// visits[4v + ITEMS] items of size visits[4v + SIZE], from walk position visits[4v + FIRST] on,
// into row visits[4v + ROW].
enum VisitField : int64_t { ROW = 0, FIRST = 1, ITEMS = 2, SIZE = 3, VISIT = 4 };

struct FitRuns {
    int64_t visits = 0, rows = 0;
};

// Best fit over items by decreasing size, a run of equal sizes at a time.
//
// Run r (size r, starts[r+1] - starts[r] items) is walked from the largest size down. Each step
// takes the open row with the smallest remaining space >= r (among equal spaces the one that
// reached it last), else opens a row, and puts as many of the run's items in it as fit: one item
// at a time, best fit would pick that same row again for each (its new space is below the old
// one and still >= r, and nothing lay in between). So the rows are those of best_fit_rows on the
// expanded sizes. Visits are recorded into `visits` (room for one per item) unless it is null.
inline FitRuns best_fit_runs(const int64_t* starts, int64_t num_starts, int64_t capacity,
                             int64_t max_per_row, int64_t* visits) {
    RowStacks stacks(capacity);
    std::vector<int64_t> count;  // items in each row
    FitRuns out;
    int64_t pos = 0;
    for (int64_t r = num_starts - 2; r >= 0; --r) {
        int64_t c = starts[r + 1] - starts[r];
        const int64_t s = r;
        while (c > 0) {
            int64_t slot = stacks.fit(s);
            int64_t row, rem, have;
            if (slot < 0) {
                row = out.rows++;
                count.push_back(0);
                rem = capacity;
                have = 0;
            } else {
                row = stacks.pop(slot);
                rem = slot;
                have = count[row];
            }
            int64_t q = c;
            if (s > 0 && rem / s < q) q = rem / s;
            if (max_per_row > 0 && max_per_row - have < q) q = max_per_row - have;
            if (visits != nullptr) {
                int64_t* v = visits + VISIT * out.visits;
                v[ROW] = row;
                v[FIRST] = pos;
                v[ITEMS] = q;
                v[SIZE] = s;
            }
            out.visits += 1;
            pos += q;
            c -= q;
            rem -= q * s;
            have += q;
            count[row] = have;
            if (max_per_row == 0 || have < max_per_row) stacks.push(row, rem);
        }
    }
    return out;
}

// The walk's items grouped by row rank, as scatter_rows groups them: rows by increasing
// row_rank[row], a row's items in walk order (walk position p is order[n - 1 - p]). `out` gets
// n entries, `bounds` num_rows + 1 (zeroed).
inline void scatter_visits(const int64_t* order, int64_t n, const int64_t* visits, int64_t nv,
                           const int64_t* row_rank, int64_t num_rows, int64_t* out,
                           int64_t* bounds) {
    for (const int64_t* v = visits; v < visits + VISIT * nv; v += VISIT)
        bounds[row_rank[v[ROW]] + 1] += v[ITEMS];
    for (int64_t k = 0; k < num_rows; ++k) bounds[k + 1] += bounds[k];
    std::vector<int64_t> fill(bounds, bounds + num_rows);
    for (const int64_t* v = visits; v < visits + VISIT * nv; v += VISIT) {
        int64_t k = row_rank[v[ROW]];
        int64_t p = fill[k];
        int64_t first = n - 1 - v[FIRST];
        for (int64_t j = 0; j < v[ITEMS]; ++j) out[p + j] = order[first - j];
        fill[k] = p + v[ITEMS];
    }
}

// The size of every entry of scatter_visits' layout (piece lengths); `lens` gets
// bounds[num_rows] entries.
inline void visit_lengths(const int64_t* visits, int64_t nv, const int64_t* row_rank,
                          int64_t num_rows, const int64_t* bounds, int64_t* lens) {
    std::vector<int64_t> fill(bounds, bounds + num_rows);
    for (const int64_t* v = visits; v < visits + VISIT * nv; v += VISIT) {
        int64_t k = row_rank[v[ROW]];
        int64_t p = fill[k];
        for (int64_t j = 0; j < v[ITEMS]; ++j) lens[p + j] = v[SIZE];
        fill[k] = p + v[ITEMS];
    }
}

}  // namespace padless
