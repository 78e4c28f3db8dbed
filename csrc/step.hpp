// The step planner's placement: items, heaviest first, each into the least-cost bin with room
// (the twin of padless/_kernels/step.py).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "common.hpp"

namespace padless {

// Bins as the fit fills them: the bin of each item, and how many bins it took.
struct StepFit {
    Buffer<int64_t> bin_of;
    int64_t bins = 0;
};

// The open bins in a tournament tree over bin numbers: each node holds the least (cost, bin)
// and the most room among the bins below it, so the least-cost bin with room for an item is
// found by a descent that skips every subtree without room, or without a cheaper bin than the
// best found so far. A closed bin (no room for any item still to come) leaves the tree.
class BinTree {
  public:
    // bin b keyed by its room (`by_room`: best fit) or by its cost; closed bins left out
    BinTree(int64_t bins, int64_t capacity, const std::vector<double>& cost,
            const std::vector<int64_t>& room, const std::vector<char>& closed, bool by_room) {
        (void)capacity;
        while (width_ < bins) width_ *= 2;
        const size_t nodes = 2 * static_cast<size_t>(width_);
        cost_.assign(nodes, INF);
        bin_.assign(nodes, INT64_MAX);
        room_.assign(nodes, -1);
        for (int64_t b = 0; b < bins; ++b) {
            const size_t u = static_cast<size_t>(b);
            if (closed[u]) continue;
            const size_t leaf = static_cast<size_t>(width_ + b);
            cost_[leaf] = by_room ? static_cast<double>(room[u]) : cost[u];
            bin_[leaf] = b;
            room_[leaf] = room[u];
        }
        for (size_t v = static_cast<size_t>(width_) - 1; v >= 1; --v) pull(v);
    }
    // the least (cost, bin) with room >= s, or -1
    int64_t find(int64_t s) const {
        size_t best = 0;  // node 0: no leaf yet
        size_t stack[128];
        size_t top = 0;
        stack[top++] = 1;
        while (top > 0) {
            const size_t v = stack[--top];
            if (room_[v] < s || (best != 0 && !less(v, best))) continue;
            if (v >= static_cast<size_t>(width_)) {
                best = v;
                continue;
            }
            const size_t l = 2 * v, r = l + 1;
            // the cheaper child is searched first (pushed last)
            if (less(l, r)) {
                stack[top++] = r;
                stack[top++] = l;
            } else {
                stack[top++] = l;
                stack[top++] = r;
            }
        }
        return best == 0 ? -1 : bin_[best];
    }
    // bin b now costs `cost` and has `room` left; closed bins leave the tree
    void set(int64_t b, double cost, int64_t room, bool closed) {
        size_t v = static_cast<size_t>(width_ + b);
        cost_[v] = closed ? INF : cost;
        bin_[v] = closed ? INT64_MAX : b;
        room_[v] = closed ? -1 : room;
        for (v /= 2; v >= 1; v /= 2) pull(v);
    }

  private:
    static constexpr double INF = std::numeric_limits<double>::infinity();
    int64_t width_ = 1;
    std::vector<double> cost_;
    std::vector<int64_t> bin_;
    std::vector<int64_t> room_;
    bool less(size_t a, size_t b) const {
        return cost_[a] < cost_[b] || (cost_[a] == cost_[b] && bin_[a] < bin_[b]);
    }
    void pull(size_t v) {
        const size_t l = 2 * v, r = l + 1;
        const size_t m = less(r, l) ? r : l;
        cost_[v] = cost_[m];
        bin_[v] = bin_[m];
        room_[v] = room_[l] > room_[r] ? room_[l] : room_[r];
    }
};

// A 4-ary min-heap of (cost, bin): the fast path of the least-cost rule while the least-cost
// open bin has room for each item (always, when the cost is the tokens).
struct BinHeap {
    std::vector<std::pair<double, int64_t>> a;
    explicit BinHeap(int64_t bins) {
        a.reserve(static_cast<size_t>(bins));
        for (int64_t b = 0; b < bins; ++b) a.emplace_back(0.0, b);  // a heap already
    }
    // four children a node: half the levels of a binary heap, the children side by side
    void down(size_t i) {
        const size_t n = a.size();
        const std::pair<double, int64_t> x = a[i];
        for (;;) {
            const size_t first = 4 * i + 1;
            if (first >= n) break;
            const size_t last = first + 4 < n ? first + 4 : n;
            size_t c = first;
            for (size_t j = first + 1; j < last; ++j)
                if (a[j] < a[c]) c = j;
            if (!(a[c] < x)) break;
            a[i] = a[c];
            i = c;
        }
        a[i] = x;
    }
    void pop() {
        a[0] = a.back();
        a.pop_back();
        if (!a.empty()) down(0);
    }
};

// One try over `bins` bins of `capacity` tokens. Least-cost rule: item i (in the order given)
// goes to the bin of least cost (ties: the lowest bin) among those with room >= sizes[i]. Tight
// rule (`tight`): to the bin of least room >= sizes[i] (ties: the lowest bin), a best fit.
// Returns how many items were placed before one fit nowhere (n when all did; less, early, once
// the items left hold more tokens than the bins still open have room for). A bin with less room
// than every item still to come closes. O(n log bins) (a heap while the least-cost bin has room,
// then a tree).
inline int64_t step_fit_try(const int64_t* sizes, const double* costs, const int64_t* smallest,
                            const int64_t* after, int64_t n, int64_t bins, int64_t capacity,
                            bool tight, int64_t* bin_of) {
    std::vector<double> cost(static_cast<size_t>(bins), 0.0);
    std::vector<int64_t> room(static_cast<size_t>(bins), capacity);
    std::vector<char> closed(static_cast<size_t>(bins), 0);
    // room in the bins still open (saturating: bins * capacity may pass int64)
    int64_t open = bins > 0 && capacity > INT64_MAX / bins ? INT64_MAX : bins * capacity;
    BinHeap heap(tight ? 0 : bins);
    std::unique_ptr<BinTree> tree;
    if (tight) tree.reset(new BinTree(bins, capacity, cost, room, closed, true));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = sizes[i];
        if (open != INT64_MAX && after[i] > open) return i;  // what is left cannot fit
        int64_t b = -1;
        while (!tree && !heap.a.empty()) {
            const int64_t top = heap.a[0].second;
            if (room[static_cast<size_t>(top)] >= s) {
                b = top;
            } else if (closed[static_cast<size_t>(top)]) {
                heap.pop();
                continue;
            } else {  // passed over: the rest of this try searches a tree
                tree.reset(new BinTree(bins, capacity, cost, room, closed, false));
            }
            break;
        }
        if (tree) b = tree->find(s);
        if (b < 0) return i;
        const size_t u = static_cast<size_t>(b);
        bin_of[i] = b;
        room[u] -= s;
        cost[u] += costs[i];
        closed[u] = i + 1 < n && room[u] < smallest[i + 1];
        if (open != INT64_MAX) open -= closed[u] ? s + room[u] : s;
        if (tree) {
            tree->set(b, tight ? static_cast<double>(room[u]) : cost[u], room[u], closed[u]);
        } else {
            heap.a[0].first = cost[u];
            heap.down(0);
        }
    }
    return n;
}

// Tries bins, bins + step, bins + 2·step, ... until every item fits (it does once there is a bin
// per item: every size is at most capacity): at each count the least-cost rule, then the tight
// rule (fewer bins where the cap binds, less balanced).
inline StepFit step_fit(const int64_t* sizes, const double* costs, int64_t n, int64_t bins,
                        int64_t step, int64_t capacity) {
    // the smallest item and the tokens from each item on (sizes <= capacity <= 2**62 each:
    // a sum saturates rather than wraps)
    std::vector<int64_t> smallest(static_cast<size_t>(n > 0 ? n : 1));
    std::vector<int64_t> after(static_cast<size_t>(n > 0 ? n : 1));
    for (int64_t i = n - 1; i >= 0; --i) {
        const size_t u = static_cast<size_t>(i);
        const int64_t next = i + 1 < n ? smallest[u + 1] : sizes[i];
        smallest[u] = sizes[i] < next ? sizes[i] : next;
        const int64_t rest = i + 1 < n ? after[u + 1] : 0;
        after[u] = rest > INT64_MAX - sizes[i] ? INT64_MAX : rest + sizes[i];
    }
    StepFit out;
    out.bin_of = Buffer<int64_t>(n);
    for (;; bins += step) {
        if (step_fit_try(sizes, costs, smallest.data(), after.data(), n, bins, capacity, false,
                         out.bin_of.get()) == n)
            break;
        if (step_fit_try(sizes, costs, smallest.data(), after.data(), n, bins, capacity, true,
                         out.bin_of.get()) == n)
            break;
    }
    out.bins = bins;
    return out;
}

}  // namespace padless
