// Packing: best-fit placement into rows over a 64-ary bit tree, then one scatter into rows (the
// twin of padless/_kernels/packing.py).
#pragma once

#include <stdexcept>
#include <type_traits>
#include <vector>

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
