// Cost models: budgets in cost units, per-batch costs, best fit under a row cost cap (the twin
// of padless/_kernels/cost.py). Costs are float64 computed by the caller; every sum here adds
// the same numbers in the same order as the reference (the build has -ffp-contract=off), so the
// kernels and the references agree bit for bit.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "bittree.hpp"
#include "budget.hpp"
#include "common.hpp"
#include "packing.hpp"
#include "sat.hpp"

namespace padless {

// fairseq's greedy token-budget rule with one more limit, a cost per field: `count × Σ_f max
// unit_f <= max_cost`. `sizes` and `units` (n × fields, row-major: each item's cost in each
// field) are in walk order; a batch's cost adds the fields' largest units left to right from
// 0.0 (every field pads to its own longest). The open batch [start, cut) grows by a tail
// [cut, pos] that joins it when the union is small (< multiple) or a multiple of `multiple`.
// When batch + tail breaks a limit (0 = none), the batch closes and the tail opens the next
// one; if the tail alone (with the new item) breaks max_tokens or max_cost, the tail without
// the new item closes too. Items must each fit both budgets alone: the first that does not
// (its size over max_tokens, or its own cost, negative units counted as 0, over max_cost) stops
// the walk, its position in `over_at` (else -1) and its reason in `over_cost` (the cost, not
// the size). With max_cost = 0 the ends are exactly those of budget_ends.
template <class T>
Buffer<int64_t> budget_field_cost_ends(const T* sizes, const double* units, int64_t n,
                                       int64_t fields, int64_t max_tokens, int64_t max_sentences,
                                       int64_t multiple, double max_cost, int64_t& over_at,
                                       bool& over_cost) {
    over_at = -1;
    over_cost = false;
    Buffer<int64_t> ends(n + 1);  // every item fits: every batch holds one, n ends at most
    int64_t closed = 0, start = 0, cut = 0;
    int64_t batch_max = 0, tail_max = 0;
    std::vector<double> batch_u(static_cast<size_t>(fields), 0.0);
    std::vector<double> tail_u(static_cast<size_t>(fields), 0.0);
    auto total = [&](bool with_batch) {
        double sum = 0.0;
        for (size_t f = 0; f < batch_u.size(); ++f) {
            double m = tail_u[f];
            if (with_batch && batch_u[f] > m) m = batch_u[f];
            sum += m;
        }
        return sum;
    };
    for (int64_t pos = 0; pos < n; ++pos) {
        const int64_t s = static_cast<int64_t>(sizes[pos]);
        const double* u = units + pos * fields;
        if (s > tail_max) tail_max = s;
        for (size_t f = 0; f < tail_u.size(); ++f) {
            if (u[f] > tail_u[f]) tail_u[f] = u[f];
        }
        const int64_t count = pos + 1 - start;
        const int64_t longest = batch_max > tail_max ? batch_max : tail_max;
        bool over = (max_sentences > 0 && count > max_sentences) ||
                    (max_tokens > 0 && mul_exceeds(count, longest, max_tokens));
        if (!over && max_cost > 0.0) over = static_cast<double>(count) * total(true) > max_cost;
        if (over) {
            // an item over a budget breaks it at its own step: checked here, once per batch
            if (max_tokens > 0 && s > max_tokens) {
                over_at = pos;
                break;
            }
            if (max_cost > 0.0) {
                double own = 0.0;
                for (int64_t f = 0; f < fields; ++f) own += u[f] > 0.0 ? u[f] : 0.0;
                if (own > max_cost) {
                    over_at = pos;
                    over_cost = true;
                    break;
                }
            }
            ends[closed++] = cut;
            const int64_t left = pos + 1 - cut;
            bool alone = max_tokens > 0 && mul_exceeds(left, tail_max, max_tokens);
            if (!alone && max_cost > 0.0) alone = static_cast<double>(left) * total(false) > max_cost;
            if (alone) {
                ends[closed++] = pos;
                tail_max = s;
                for (size_t f = 0; f < tail_u.size(); ++f) tail_u[f] = u[f];
                start = pos;
            } else {
                start = cut;
            }
            cut = pos + 1;
            batch_max = tail_max;
            batch_u = tail_u;
            tail_max = 0;
            std::fill(tail_u.begin(), tail_u.end(), 0.0);
        } else if (count < multiple || multiple_of(count, multiple)) {
            cut = pos + 1;
            batch_max = longest;
            for (size_t f = 0; f < batch_u.size(); ++f) {
                if (tail_u[f] > batch_u[f]) batch_u[f] = tail_u[f];
            }
            tail_max = 0;
            std::fill(tail_u.begin(), tail_u.end(), 0.0);
        }
    }
    if (over_at >= 0) {
        ends.used = 0;
        return ends;
    }
    if (cut > start) ends[closed++] = cut;
    if (n > cut) ends[closed++] = n;
    ends.used = closed;
    return ends;
}

// budget_field_cost_ends with one field: `count × max unit <= max_cost`.
template <class T>
Buffer<int64_t> budget_cost_ends(const T* sizes, const double* units, int64_t n,
                                 int64_t max_tokens, int64_t max_sentences, int64_t multiple,
                                 double max_cost, int64_t& over_at, bool& over_cost) {
    return budget_field_cost_ends(sizes, units, n, 1, max_tokens, max_sentences, multiple,
                                  max_cost, over_at, over_cost);
}

// Σ over a batch's rows of `base + Σ extras` (each row summed left to right from 0.0). Row r is
// entries row_bounds[r]:row_bounds[r + 1]; batch b is rows row_offsets[b]:row_offsets[b + 1]
// (num_batches + 1 offsets).
inline Buffer<double> packed_batch_costs(const double* extras, const int64_t* row_bounds,
                                         const int64_t* row_offsets, int64_t num_batches,
                                         double base) {
    Buffer<double> out(num_batches);
    for (int64_t b = 0; b < num_batches; ++b) {
        double total = 0.0;
        for (int64_t r = row_offsets[b]; r < row_offsets[b + 1]; ++r) {
            double acc = 0.0;
            for (int64_t e = row_bounds[r]; e < row_bounds[r + 1]; ++e) acc += extras[e];
            total += base + acc;
        }
        out[b] = total;
    }
    return out;
}

// The rows set aside for their cost: a binary min-heap by used cost, then row number.
class ParkedRows {
public:
    bool empty() const { return keys_.empty(); }
    double top_used() const { return keys_[0]; }
    int64_t top_row() const { return rows_[0]; }

    void push(double u, int64_t row) {
        size_t k = keys_.size();
        keys_.push_back(u);
        rows_.push_back(row);
        while (k > 0) {
            size_t parent = (k - 1) >> 1;
            if (!before(u, row, keys_[parent], rows_[parent])) break;
            keys_[k] = keys_[parent];
            rows_[k] = rows_[parent];
            k = parent;
        }
        keys_[k] = u;
        rows_[k] = row;
    }

    // Drop the top (read it first).
    void pop() {
        size_t size = keys_.size() - 1;
        double u = keys_[size];
        int64_t row = rows_[size];
        keys_.pop_back();
        rows_.pop_back();
        size_t k = 0;
        while (true) {
            size_t child = 2 * k + 1;
            if (child >= size) break;
            if (child + 1 < size &&
                before(keys_[child + 1], rows_[child + 1], keys_[child], rows_[child])) {
                child += 1;
            }
            if (!before(keys_[child], rows_[child], u, row)) break;
            keys_[k] = keys_[child];
            rows_[k] = rows_[child];
            k = child;
        }
        if (size > 0) {
            keys_[k] = u;
            rows_[k] = row;
        }
    }

private:
    // Heap order: less used cost first, then the lower row number.
    static bool before(double u1, int64_t r1, double u2, int64_t r2) {
        return u1 < u2 || (u1 == u2 && r1 < r2);
    }

    std::vector<double> keys_;
    std::vector<int64_t> rows_;
};

// Best fit by tokens among the rows whose cost stays within `max_row_cost`. Items come in the
// order given (longest first, so `extras` never increase). An open row fits an item when
// `base + (used + extra) <= max_row_cost` (`used`: its extras so far, summed from 0.0). Each item
// goes to the best-fitting row by tokens, as best_fit_rows (the smallest remaining space >= its
// size; among equal spaces the row that reached it last), looking only at the rows that fit its
// cost. Rows passed over for their cost are set aside (ParkedRows) and rejoin the top of their
// stack, in heap order, as soon as the items' extras have fallen to what they can still take.
// No open row fits: the item opens a new one (each item must fit an empty row). A row closes
// when it holds `max_per_row` items (0: no cap) or cannot take even the last (smallest) item's
// extra. Rows are numbered in the order they open. With a cap no row reaches, the rows are
// exactly those of best_fit_rows. O(log_64 capacity) per placement, plus O(log rows) each time a
// row is set aside or rejoins.
template <class T>
RowFit best_fit_rows_cost(const T* sizes, const double* extras, int64_t n, int64_t capacity,
                          int64_t max_per_row, double base, double max_row_cost) {
    const double floor_extra = n ? extras[n - 1] : 0.0;
    RowStacks stacks(capacity);
    ParkedRows parked;
    std::vector<int64_t> count, space;
    std::vector<double> used;
    RowFit out;
    out.row_of = Buffer<int64_t>(n);
    int64_t* row_of = out.row_of.get();
    int64_t rows = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = static_cast<int64_t>(sizes[i]);
        if (s < 0 || s > capacity) {
            throw std::out_of_range("best_fit_rows_cost: sizes[" + std::to_string(i) + "] = " +
                                    std::to_string(s) + " is outside [0, capacity = " +
                                    std::to_string(capacity) + "]");
        }
        const double e = extras[i];
        while (!parked.empty() && !(base + (parked.top_used() + e) > max_row_cost)) {
            int64_t back = parked.top_row();
            parked.pop();
            stacks.push(back, space[back]);
        }
        int64_t row = -1;
        int64_t r = stacks.fit(s);
        while (r >= 0) {
            int64_t cand = stacks.top(r);
            while (cand >= 0 && base + (used[cand] + e) > max_row_cost) {
                stacks.pop(r);
                parked.push(used[cand], cand);
                cand = stacks.top(r);
            }
            if (cand >= 0) {
                row = cand;
                stacks.pop(r);
                break;
            }
            r = stacks.fit(r + 1);
        }
        int64_t left;
        if (row < 0) {
            row = rows++;
            left = capacity - s;
            count.push_back(1);
            used.push_back(0.0 + e);
            space.push_back(0);
        } else {
            left = r - s;
            count[row] += 1;
            used[row] = used[row] + e;
        }
        row_of[i] = row;
        space[row] = left;
        if ((max_per_row == 0 || count[row] < max_per_row) &&
            !(base + (used[row] + floor_extra) > max_row_cost)) {
            stacks.push(row, left);
        }
    }
    out.rows = rows;
    return out;
}

}  // namespace padless
