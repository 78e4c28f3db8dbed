// Packing: best-fit placement into rows over a 64-ary bit tree, then one scatter into rows (the
// twin of padless/_kernels/packing.py).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <algorithm>
#include <iterator>

#include "bittree.hpp"
#include "common.hpp"

namespace padless {

// Rows as the best fit places them: the row of each item, and how many rows opened.
struct RowFit {
    Buffer<int64_t> row_of;
    int64_t rows = 0;
};

namespace detail {

// Best fit with the open rows kept, per remaining space, in one contiguous LIFO stack each
// (`Entry` a row, or a row and its item count when rows close at a count). The rows and the
// order they leave a stack are those of RowStacks (a `head`/`below` linked stack per space);
// what changes is where a stack lives: the linked form reads `below[row]` of a random row on
// every pop, a cache miss once millions of rows are open, while a stack's top entries are hot.
template <class T, bool Counted>
RowFit best_fit_rows_impl(const T* sizes, int64_t n, int64_t capacity, int64_t max_per_row) {
    struct Entry {
        int64_t row;
        int64_t count;
    };
    using Slot = std::conditional_t<Counted, Entry, int64_t>;
    BitTree tree(capacity + 1);
    std::vector<std::vector<Slot>> stacks(static_cast<size_t>(capacity + 1));
    RowFit out;
    out.row_of = Buffer<int64_t>(n);
    int64_t* row_of = out.row_of.get();
    int64_t rows = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = static_cast<int64_t>(sizes[i]);
        if (s < 0 || s > capacity) throw std::out_of_range("best_fit_rows: size out of range");
        const int64_t r = tree.next(s);
        int64_t row, left, count = 1;
        if (r < 0) {
            row = rows++;
            left = capacity - s;
        } else {
            std::vector<Slot>& stack = stacks[static_cast<size_t>(r)];
            if constexpr (Counted) {
                row = stack.back().row;
                count = stack.back().count + 1;
            } else {
                row = stack.back();
            }
            stack.pop_back();
            if (stack.empty()) tree.clear(r);
            left = r - s;
        }
        row_of[i] = row;
        if (!Counted || count < max_per_row) {
            std::vector<Slot>& stack = stacks[static_cast<size_t>(left)];
            if (stack.empty()) tree.set(left);
            if constexpr (Counted) {
                stack.push_back(Entry{row, count});
            } else {
                stack.push_back(row);
            }
        }
    }
    out.rows = rows;
    return out;
}

}  // namespace detail

// Best-fit placement of items (in the order given) into rows of `capacity`. Each item goes to
// the open row with the smallest remaining space >= its size (among equal remaining spaces, the
// row that reached it last), else opens a new row. A row holding `max_per_row` items (0: no cap)
// closes. Sizes must lie in [0, capacity] (std::out_of_range otherwise). Rows are numbered in
// the order they open. O(n · log_64 capacity).
template <class T>
RowFit best_fit_rows(const T* sizes, int64_t n, int64_t capacity, int64_t max_per_row) {
    if (max_per_row == 0) return detail::best_fit_rows_impl<T, false>(sizes, n, capacity, 0);
    return detail::best_fit_rows_impl<T, true>(sizes, n, capacity, max_per_row);
}

// The largest value of every 64 positions of [0, n), level above level (a 64-ary max tree), so
// the first position >= pos holding a value >= v is found in O(64 · log_64 n) reads. Values are
// int32 (4 bytes per position at the bottom level); `empty` marks a position holding none.
class MaxTree64 {
public:
    MaxTree64(int64_t n, int32_t empty) : empty_(empty) {
        int64_t size = n > 0 ? n : 1;
        while (true) {
            levels_.emplace_back(static_cast<size_t>(size), empty);
            if (size == 1) break;
            size = (size + 63) >> 6;
        }
    }

    int32_t get(int64_t pos) const { return levels_[0][static_cast<size_t>(pos)]; }

    void set(int64_t pos, int32_t value) {
        levels_[0][static_cast<size_t>(pos)] = value;
        for (size_t lev = 1; lev < levels_.size(); ++lev) {
            const std::vector<int32_t>& below = levels_[lev - 1];
            const int64_t parent = pos >> 6;
            const size_t lo = static_cast<size_t>(parent << 6);
            const size_t hi = std::min(lo + 64, below.size());
            int32_t top = empty_;
            for (size_t j = lo; j < hi; ++j) top = std::max(top, below[j]);
            int32_t& slot = levels_[lev][static_cast<size_t>(parent)];
            if (slot == top) return;
            slot = top;
            pos = parent;
        }
    }

    // The first position >= pos whose value is >= v, or -1.
    int64_t first_at_least(int64_t pos, int32_t v) const {
        size_t lev = 0;
        int64_t found = -1;
        while (found < 0) {
            const std::vector<int32_t>& here = levels_[lev];
            const int64_t size = static_cast<int64_t>(here.size());
            if (pos >= size) return -1;
            const int64_t end = std::min(((pos >> 6) + 1) << 6, size);
            for (int64_t j = pos; j < end; ++j) {
                if (here[static_cast<size_t>(j)] >= v) {
                    found = j;
                    break;
                }
            }
            if (found >= 0) break;
            if (lev + 1 == levels_.size()) return -1;
            pos = (pos >> 6) + 1;
            lev += 1;
        }
        while (lev > 0) {
            lev -= 1;
            const std::vector<int32_t>& here = levels_[lev];
            int64_t j = found << 6;
            const int64_t end = std::min(j + 64, static_cast<int64_t>(here.size()));
            while (j < end && here[static_cast<size_t>(j)] < v) ++j;
            found = j;  // a child holds the maximum its parent records
        }
        return found;
    }

private:
    int32_t empty_;
    std::vector<std::vector<int32_t>> levels_;
};

// Vector best fit over two fields: items (in the order given, `first[i]` and `second[i]` their
// sizes in each field) into rows of `capacity0` and `capacity1`. An item (a, b) goes to the open
// row with residuals r0 >= a and r1 >= b of the least r0, then the least r1, then the row opened
// last; else it opens a new row. A row holding `max_per_row` items (0: no cap) closes. Sizes
// must lie in [0, capacity] of their field (std::out_of_range otherwise). Rows are numbered in
// the order they open.
//
// The open rows of each first-field residual r0 live in an ordered set of their own, by (r1, row
// opened last first), and move from set to set by node handle (no allocation per placement); a
// max tree over r0 holds each set's largest r1, so the least feasible r0 is found in
// O(64 · log_64 capacity0) and the row within it in O(log rows there). O(n · (log rows +
// 64 · log_64 capacity0)); memory: one node per open row, 12 bytes per unit of capacity0.
template <class T>
RowFit best_fit_pairs(const T* first, const T* second, int64_t n, int64_t capacity0,
                      int64_t capacity1, int64_t max_per_row) {
    struct Key {
        int64_t r1, row;
    };
    struct Less {
        bool operator()(const Key& x, const Key& y) const {
            if (x.r1 != y.r1) return x.r1 < y.r1;
            return x.row > y.row;  // the row opened last first
        }
    };
    using Bucket = std::set<Key, Less>;
    constexpr int64_t highest = std::numeric_limits<int64_t>::max();
    std::vector<std::unique_ptr<Bucket>> buckets(static_cast<size_t>(capacity0 + 1));
    MaxTree64 tree(capacity0 + 1, -1);  // per r0: the largest r1 of an open row, -1 for none
    std::vector<int64_t> count;         // items per row, when rows close at a count
    RowFit out;
    out.row_of = Buffer<int64_t>(n);
    int64_t* row_of = out.row_of.get();
    int64_t rows = 0;
    auto bucket = [&](int64_t r0) -> Bucket& {
        std::unique_ptr<Bucket>& b = buckets[static_cast<size_t>(r0)];
        if (!b) b = std::make_unique<Bucket>();
        return *b;
    };
    auto enter = [&](int64_t r0, typename Bucket::node_type&& node) {
        const int64_t r1 = node.value().r1;
        bucket(r0).insert(std::move(node));
        if (tree.get(r0) < r1) tree.set(r0, static_cast<int32_t>(r1));
    };
    for (int64_t i = 0; i < n; ++i) {
        const int64_t a = static_cast<int64_t>(first[i]);
        const int64_t b = static_cast<int64_t>(second[i]);
        if (a < 0 || a > capacity0 || b < 0 || b > capacity1)
            throw std::out_of_range("best_fit_pairs: size out of range");
        const int64_t r0 = tree.first_at_least(a, static_cast<int32_t>(b));
        if (r0 < 0) {
            const int64_t row = rows++;
            row_of[i] = row;
            if (max_per_row) count.push_back(1);
            if (max_per_row != 1) {
                Bucket& at = bucket(capacity0 - a);
                at.insert(Key{capacity1 - b, row});
                if (tree.get(capacity0 - a) < capacity1 - b)
                    tree.set(capacity0 - a, static_cast<int32_t>(capacity1 - b));
            }
            continue;
        }
        Bucket& from = *buckets[static_cast<size_t>(r0)];
        auto it = from.lower_bound(Key{b, highest});  // the least r1 >= b there
        const bool top = std::next(it) == from.end();
        auto node = from.extract(it);
        if (top) tree.set(r0, from.empty() ? -1 : static_cast<int32_t>(from.rbegin()->r1));
        Key& key = node.value();
        row_of[i] = key.row;
        if (max_per_row && ++count[static_cast<size_t>(key.row)] >= max_per_row) continue;
        key.r1 -= b;
        enter(r0 - a, std::move(node));
    }
    out.rows = rows;
    return out;
}

// Items grouped by row: rows in increasing `row_rank[row]`, a row's items in input order.
struct Scattered {
    Buffer<int64_t> values, sizes, bounds;
};

// Regroups `values` and `sizes` (n each) by row, `bounds[k]:bounds[k + 1]` the items of the row
// of rank k (num_rows ranks). One counting pass and one scatter pass, O(n + rows).
template <class V, class T>
Scattered scatter_rows(const int64_t* row_of, int64_t n, const int64_t* row_rank,
                       int64_t num_rows, const V* values, const T* sizes) {
    Scattered out;
    out.bounds = zeros<int64_t>(num_rows + 1);
    int64_t* bounds = out.bounds.get();
    for (int64_t i = 0; i < n; ++i) bounds[row_rank[row_of[i]] + 1] += 1;
    for (int64_t k = 0; k < num_rows; ++k) bounds[k + 1] += bounds[k];
    std::vector<int64_t> fill(bounds, bounds + num_rows);
    out.values = Buffer<int64_t>(n);
    out.sizes = Buffer<int64_t>(n);
    int64_t* out_values = out.values.get();
    int64_t* out_sizes = out.sizes.get();
    for (int64_t i = 0; i < n; ++i) {
        int64_t p = fill[static_cast<size_t>(row_rank[row_of[i]])]++;
        out_values[p] = static_cast<int64_t>(values[i]);
        out_sizes[p] = static_cast<int64_t>(sizes[i]);
    }
    return out;
}

}  // namespace padless
