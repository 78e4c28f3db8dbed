// The step planner's placement: items, heaviest first, each into the least-cost bin with room;
// where the cap binds, a best fit; then the slots evened out (the twin of
// padless/_kernels/step.py, whose `step_fit_reference` is the spec).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "common.hpp"

namespace padless {

namespace step_detail {

// A bin's key in its rule's order, as one unsigned 128-bit number: the least-cost rule's key is
// (cost, stamp), the tight rule's (room, stamp), with the stamp (when the bin came to that cost
// and room) breaking ties; a parked bin's is (capacity - room, bin). A cost is a finite or
// infinite double >= 0 (a sum of non-negative costs from +0.0: never -0.0 nor NaN), whose bits
// order as the numbers do.
__extension__ typedef unsigned __int128 Key;

inline Key cost_key(double cost, int64_t low) {
    uint64_t bits;
    std::memcpy(&bits, &cost, sizeof bits);
    return (static_cast<Key>(bits) << 64) | static_cast<uint64_t>(low);
}
inline Key room_key(int64_t room, int64_t low) {
    return (static_cast<Key>(static_cast<uint64_t>(room)) << 64) | static_cast<uint64_t>(low);
}
inline int64_t key_bin(Key k) { return static_cast<int64_t>(static_cast<uint64_t>(k)); }

// A 4-ary min-heap of keys (four children a node: half the levels of a binary heap, the
// children side by side, the least of them picked without branches).
struct MinHeap {
    std::vector<Key> a;
    void clear() { a.clear(); }
    bool empty() const { return a.empty(); }
    Key top() const { return a[0]; }
    void down(size_t i) {
        const size_t n = a.size();
        const Key x = a[i];
        for (;;) {
            const size_t first = 4 * i + 1;
            if (first >= n) break;
            size_t c = first;
            if (first + 4 <= n) {
                const size_t c01 = a[first + 1] < a[first] ? first + 1 : first;
                const size_t c23 = a[first + 3] < a[first + 2] ? first + 3 : first + 2;
                c = a[c23] < a[c01] ? c23 : c01;
            } else {
                for (size_t j = first + 1; j < n; ++j) c = a[j] < a[c] ? j : c;
            }
            if (!(a[c] < x)) break;
            a[i] = a[c];
            i = c;
        }
        a[i] = x;
    }
    void up(size_t i) {
        const Key x = a[i];
        while (i > 0) {
            const size_t p = (i - 1) / 4;
            if (!(x < a[p])) break;
            a[i] = a[p];
            i = p;
        }
        a[i] = x;
    }
    void make() {  // heap order over the keys as they are
        for (size_t i = a.size() >= 2 ? (a.size() - 2) / 4 + 1 : 0; i-- > 0;) down(i);
    }
    void push(Key k) {
        a.push_back(k);
        up(a.size() - 1);
    }
    void pop() {
        a[0] = a.back();
        a.pop_back();
        if (!a.empty()) down(0);
    }
    void replace_top(Key k) {  // the top's key grew (or shrank: it stays on top)
        a[0] = k;
        down(0);
    }
};

// The open bins in a tournament tree over bin numbers: each node holds the least key and the
// most room among the bins below it, so the least key with room for an item is found by a
// descent that skips every subtree without room, or without a less key than the best found so
// far. The fallback of a try whose items come in an order that keeps parking bins (see
// `step_fit_try`): the same rule, O(log bins) a search whatever the order.
class BinTree {
  public:
    BinTree(int64_t bins, const std::vector<Key>& key, const std::vector<int64_t>& room,
            const std::vector<char>& closed) {
        while (width_ < bins) width_ *= 2;
        const size_t nodes = 2 * static_cast<size_t>(width_);
        key_.assign(nodes, NONE);
        room_.assign(nodes, -1);
        for (int64_t b = 0; b < bins; ++b) {
            const size_t u = static_cast<size_t>(b);
            if (closed[u]) continue;
            key_[static_cast<size_t>(width_ + b)] = key[u];
            room_[static_cast<size_t>(width_ + b)] = room[u];
        }
        for (size_t v = static_cast<size_t>(width_) - 1; v >= 1; --v) pull(v);
    }
    // the bin of least key with room >= s, or -1
    int64_t find(int64_t s) const {
        size_t best = 0;  // node 0 holds no key: none found yet
        size_t stack[128];
        size_t top = 0;
        stack[top++] = 1;
        while (top > 0) {
            const size_t v = stack[--top];
            if (room_[v] < s || (best != 0 && !(key_[v] < key_[best]))) continue;
            if (v >= static_cast<size_t>(width_)) {
                best = v;
                continue;
            }
            const size_t l = 2 * v, r = l + 1;
            // the child of less key is searched first (pushed last)
            if (key_[l] < key_[r]) {
                stack[top++] = r;
                stack[top++] = l;
            } else {
                stack[top++] = l;
                stack[top++] = r;
            }
        }
        return best == 0 ? -1 : static_cast<int64_t>(best) - width_;
    }
    // bin b now has key `key` and `room` left; a closed bin leaves the tree
    void set(int64_t b, Key key, int64_t room, bool closed) {
        size_t v = static_cast<size_t>(width_ + b);
        key_[v] = closed ? NONE : key;
        room_[v] = closed ? -1 : room;
        for (v /= 2; v >= 1; v /= 2) pull(v);
    }

  private:
    static constexpr Key NONE = ~static_cast<Key>(0);
    int64_t width_ = 1;
    std::vector<Key> key_;
    std::vector<int64_t> room_;
    void pull(size_t v) {
        const size_t l = 2 * v, r = l + 1;
        key_[v] = key_[r] < key_[l] ? key_[r] : key_[l];
        room_[v] = room_[l] > room_[r] ? room_[l] : room_[r];
    }
};

// The tight rule's bins by room, where rooms are small (capacity < 2**18): a queue of bins per
// room value (in the order they came to it) and a three-level bitset of the rooms that have
// one, so the least room >= s is a few word scans and a bin comes and goes in O(1).
class RoomQueues {
  public:
    static constexpr int64_t LIMIT = int64_t(1) << 18;  // rooms in [0, LIMIT)
    void reset(int64_t capacity, int64_t bins) {
        const size_t words = static_cast<size_t>(capacity / 64 + 1);
        l0_.assign(words, 0);
        l1_.assign(words / 64 + 1, 0);
        l2_ = 0;
        head_.resize(static_cast<size_t>(capacity) + 1);
        tail_.resize(static_cast<size_t>(capacity) + 1);
        next_.resize(static_cast<size_t>(bins));
        for (int64_t b = 0; b < bins; ++b) push(capacity, b);
    }
    // the least room >= s that has a bin, or -1
    int64_t least(int64_t s) const {
        size_t w0 = static_cast<size_t>(s) >> 6;
        if (w0 >= l0_.size()) return -1;
        uint64_t bits = l0_[w0] & (~uint64_t(0) << (s & 63));
        if (bits) return static_cast<int64_t>((w0 << 6) + ctz(bits));
        size_t w1 = w0 >> 6;
        bits = (w0 & 63) == 63 ? 0 : l1_[w1] & (~uint64_t(0) << ((w0 & 63) + 1));
        if (!bits) {
            const uint64_t top = (w1 & 63) == 63 ? 0 : l2_ & (~uint64_t(0) << ((w1 & 63) + 1));
            if (!top) return -1;
            w1 = ctz(top);
            bits = l1_[w1];
        }
        w0 = (w1 << 6) + ctz(bits);
        return static_cast<int64_t>((w0 << 6) + ctz(l0_[w0]));
    }
    // the most room that has a bin, or -1
    int64_t most() const {
        if (!l2_) return -1;
        const size_t w1 = 63 - clz(l2_);
        const size_t w0 = (w1 << 6) + 63 - clz(l1_[w1]);
        return static_cast<int64_t>((w0 << 6) + 63 - clz(l0_[w0]));
    }
    // the first bin that came to room r (r has one), taken out
    int64_t pop(int64_t r) {
        const size_t u = static_cast<size_t>(r);
        const int64_t b = head_[u];
        head_[u] = next_[static_cast<size_t>(b)];
        if (head_[u] < 0) {
            const size_t w0 = u >> 6, w1 = w0 >> 6;
            l0_[w0] &= ~(uint64_t(1) << (u & 63));
            if (!l0_[w0]) {
                l1_[w1] &= ~(uint64_t(1) << (w0 & 63));
                if (!l1_[w1]) l2_ &= ~(uint64_t(1) << (w1 & 63));
            }
        }
        return b;
    }
    // bin b comes to room r, last in its queue
    void push(int64_t r, int64_t b) {
        const size_t u = static_cast<size_t>(r);
        next_[static_cast<size_t>(b)] = -1;
        const size_t w0 = u >> 6, w1 = w0 >> 6;
        if (l0_[w0] & (uint64_t(1) << (u & 63))) {
            next_[static_cast<size_t>(tail_[u])] = b;
        } else {
            head_[u] = b;
            l0_[w0] |= uint64_t(1) << (u & 63);
            l1_[w1] |= uint64_t(1) << (w0 & 63);
            l2_ |= uint64_t(1) << (w1 & 63);
        }
        tail_[u] = b;
    }

  private:
    static size_t ctz(uint64_t x) { return static_cast<size_t>(__builtin_ctzll(x)); }
    static size_t clz(uint64_t x) { return static_cast<size_t>(__builtin_clzll(x)); }
    std::vector<uint64_t> l0_, l1_;
    uint64_t l2_ = 0;
    std::vector<int64_t> head_, tail_, next_;
};

// Working memory of the tries, sized once for the most bins a call reaches.
struct Work {
    std::vector<double> cost;
    std::vector<int64_t> room;
    std::vector<int64_t> stamp;  // the tie-break: when the bin came to its cost and room
    bool by_tokens = false;      // each item's cost is its size: least cost is most room
    std::vector<char> closed;
    MinHeap heap;    // the open bins with room for the item at hand, by the rule's key
    MinHeap parked;  // open bins passed over for want of room, by room (most room first)
    RoomQueues queues;
};

// One try over `bins` bins of `capacity` tokens. Least-cost rule: item i (in the order given)
// goes to the bin of least cost among those with room >= sizes[i]. Tight rule (`tight`): to the
// bin of least room >= sizes[i], a best fit. Ties, both rules: the bin that came to that cost
// and room first (untouched bins: the lowest first; a bin comes to them when item i goes in,
// stamped `bins + i`). Returns how many items were placed before one fit nowhere (n when all
// did; less, early, once the items left hold more tokens than the bins still open have room
// for). A bin with less room than every item still to come closes.
//
// How. With rooms under 2**18, the tight rule, and the least-cost rule where each item costs
// its size (least cost is then most room): a queue of bins per room (`RoomQueues`), O(1) an
// item. Else a heap of the open bins by the rule's key; a top without room for the item is
// parked (a heap by room, most first) and comes back once an item small enough comes. Items in
// non-increasing size (the planner's order) park a bin at most once per placement into it (a
// bin back from parking holds every item after), n parkings in all: O((n + bins) log bins). In
// another order a bin may be parked and brought back again and again: past n parkings the try
// goes on over a tournament tree (the same rule, O(log bins) a search whatever the order).
template <bool tight>
int64_t fit_try(const int64_t* sizes, const double* costs, const int64_t* smallest,
                const int64_t* after, int64_t n, int64_t bins, int64_t capacity, int64_t* bin_of,
                Work& w) {
    const size_t nb_ = static_cast<size_t>(bins);
    w.cost.assign(nb_, 0.0);
    w.room.assign(nb_, capacity);
    w.closed.assign(nb_, 0);
    w.stamp.resize(nb_);
    for (int64_t b = 0; b < bins; ++b) w.stamp[static_cast<size_t>(b)] = b;
    // room in the bins still open (saturating: bins * capacity may pass int64)
    int64_t open = bins > 0 && capacity > INT64_MAX / bins ? INT64_MAX : bins * capacity;
    // bin b takes item i
    auto place = [&](int64_t i, int64_t b) {
        const size_t u = static_cast<size_t>(b);
        bin_of[i] = b;
        w.room[u] -= sizes[i];
        w.cost[u] += costs[i];
        w.stamp[u] = bins + i;
        w.closed[u] = i + 1 < n && w.room[u] < smallest[i + 1];
        if (open != INT64_MAX) open -= w.closed[u] ? sizes[i] + w.room[u] : sizes[i];
    };
    if (capacity < RoomQueues::LIMIT && (tight || w.by_tokens)) {
        w.queues.reset(capacity, bins);
        for (int64_t i = 0; i < n; ++i) {
            if (open != INT64_MAX && after[i] > open) return i;  // what is left cannot fit
            const int64_t r = bins == 0 ? -1 : tight ? w.queues.least(sizes[i]) : w.queues.most();
            if (r < sizes[i]) return i;
            const int64_t b = w.queues.pop(r);
            place(i, b);
            if (!w.closed[static_cast<size_t>(b)]) w.queues.push(w.room[static_cast<size_t>(b)], b);
        }
        return n;
    }
    auto key_of = [&](int64_t b) {
        const size_t u = static_cast<size_t>(b);
        return tight ? room_key(w.room[u], w.stamp[u]) : cost_key(w.cost[u], w.stamp[u]);
    };
    auto bin_of_key = [&](Key k) {  // a key holds the stamp: the first bins, or an item's
        const int64_t low = key_bin(k);
        return low < bins ? low : bin_of[low - bins];
    };
    auto run = [&](MinHeap& q) -> int64_t {
        q.clear();
        w.parked.clear();
        int64_t parkings = 0;
        std::unique_ptr<BinTree> tree;
        int64_t i = 0;
        if (!tight) {
            // while every item so far cost something, item i goes to bin i (cost 0, the lowest
            // such bin; an empty bin holds any item)
            for (; i < n && i < bins && costs[i] > 0.0; ++i) {
                if (open != INT64_MAX && after[i] > open) return i;
                place(i, i);
            }
        }
        q.a.reserve(nb_);
        for (int64_t b = 0; b < bins; ++b)
            if (!w.closed[static_cast<size_t>(b)]) q.a.push_back(key_of(b));
        if (i > 0) q.make();  // else every key is (0.0, b) or (capacity, b): a heap already
        for (; i < n; ++i) {
            const int64_t s = sizes[i];
            if (open != INT64_MAX && after[i] > open) return i;  // what is left cannot fit
            int64_t b = -1;
            if (!tree) {
                // bins parked for want of room that hold this item come back
                while (!w.parked.empty()) {
                    const int64_t pb = key_bin(w.parked.top());
                    if (w.room[static_cast<size_t>(pb)] < s) break;
                    w.parked.pop();
                    q.push(key_of(pb));
                }
                while (!q.empty()) {
                    const int64_t top = bin_of_key(q.top());
                    const size_t u = static_cast<size_t>(top);
                    if (w.closed[u]) {
                        q.pop();
                    } else if (w.room[u] < s) {
                        q.pop();
                        // most room first: the key is (capacity - room, bin)
                        w.parked.push(room_key(capacity - w.room[u], top));
                        ++parkings;
                    } else {
                        b = top;
                        break;
                    }
                }
                if (parkings > n) {  // an order that keeps parking: a tree from here on
                    std::vector<Key> keys(nb_);
                    for (int64_t c = 0; c < bins; ++c) keys[static_cast<size_t>(c)] = key_of(c);
                    tree.reset(new BinTree(bins, keys, w.room, w.closed));
                    b = tree->find(s);
                }
            } else {
                b = tree->find(s);
            }
            if (b < 0) return i;
            place(i, b);
            const size_t u = static_cast<size_t>(b);
            if (tree) {
                tree->set(b, key_of(b), w.room[u], w.closed[u]);
            } else if (w.closed[u]) {
                q.pop();  // b is the top
            } else {
                q.replace_top(key_of(b));
            }
        }
        return n;
    };
    return run(w.heap);
}

inline int64_t step_fit_try(const int64_t* sizes, const double* costs, const int64_t* smallest,
                            const int64_t* after, int64_t n, int64_t bins, int64_t capacity,
                            bool tight, int64_t* bin_of, Work& w) {
    return tight ? fit_try<true>(sizes, costs, smallest, after, n, bins, capacity, bin_of, w)
                 : fit_try<false>(sizes, costs, smallest, after, n, bins, capacity, bin_of, w);
}

// The least smallest[i] (the smallest item from i on) and after[i] (the tokens from i on,
// saturating: sizes <= capacity <= 2**62 each) of `n` items.
inline void suffixes(const int64_t* sizes, int64_t n, std::vector<int64_t>& smallest,
                     std::vector<int64_t>& after) {
    smallest.resize(static_cast<size_t>(n > 0 ? n : 1));
    after.resize(static_cast<size_t>(n > 0 ? n : 1));
    int64_t low = INT64_MAX, rest = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
        const size_t u = static_cast<size_t>(i);
        low = sizes[i] < low ? sizes[i] : low;
        rest = rest > INT64_MAX - sizes[i] ? INT64_MAX : rest + sizes[i];
        smallest[u] = low;
        after[u] = rest;
    }
}

// A lower bound on the bins any placement of the items needs: the tokens over the capacity,
// and the items over half the capacity (no two share a bin). O(n).
inline int64_t quick_bound(const int64_t* sizes, int64_t n, int64_t capacity) {
    __extension__ typedef __int128 Wide;
    Wide total = 0;
    int64_t big = 0;
    for (int64_t i = 0; i < n; ++i) {
        total += sizes[i];
        big += 2 * static_cast<Wide>(sizes[i]) > capacity;
    }
    const int64_t tokens = static_cast<int64_t>((total + capacity - 1) / capacity);
    return tokens > big ? tokens : big;
}

// A lower bound on the bins any placement of the items needs (Martello and Toth's L2): for each
// threshold k <= capacity / 2, the items over capacity - k each need a bin of their own; so do
// those over half the capacity, which no two share; and the items in [k, capacity / 2] need
// what room those leave, and more bins for the rest. Only for sizes in non-increasing order
// (else 0: no bound). O(n). Tries below it fail whatever the rule, so they are skipped: the
// result is the one the tries would give.
inline int64_t bins_needed(const int64_t* sizes, int64_t n, int64_t capacity) {
    for (int64_t i = 1; i < n; ++i)
        if (sizes[i] > sizes[i - 1]) return 0;
    if (n == 0) return 0;
    __extension__ typedef __int128 Wide;
    // items in non-increasing order: [0, big) are over half the capacity
    int64_t big = 0;
    while (big < n && 2 * static_cast<Wide>(sizes[big]) > capacity) ++big;
    Wide total = 0;
    for (int64_t i = 0; i < n; ++i) total += sizes[i];
    int64_t best = static_cast<int64_t>((total + capacity - 1) / capacity);
    // prefix sums of the big ones, to split them at capacity - k
    std::vector<Wide> big_sum(static_cast<size_t>(big) + 1, 0);
    for (int64_t i = 0; i < big; ++i)
        big_sum[static_cast<size_t>(i) + 1] = big_sum[static_cast<size_t>(i)] + sizes[i];
    // thresholds k: 0, then each distinct small size, growing (the small ones from the end)
    Wide small_sum = 0;  // Σ of the small items >= k
    for (int64_t i = big; i < n; ++i) small_sum += sizes[i];
    if (big > best) best = big;  // no two of them share a bin
    int64_t over = 0;  // big items over capacity - k: [0, over)
    int64_t j = n;     // small items >= k: [big, j)
    int64_t k = 0;
    for (;;) {
        while (over < big && sizes[over] > capacity - k) ++over;
        const Wide n2 = big - over;
        const Wide free = n2 * capacity - (big_sum[static_cast<size_t>(big)] -
                                           big_sum[static_cast<size_t>(over)]);
        // big + ceil((small_sum - free) / capacity), divided only where it passes the best
        // (a 128-bit division is slow)
        if (small_sum > free && small_sum - free > static_cast<Wide>(best - big) * capacity)
            best = static_cast<int64_t>(big + (small_sum - free + capacity - 1) / capacity);
        // the next threshold: the next larger small size
        while (j > big && sizes[j - 1] <= k) {
            small_sum -= sizes[j - 1];
            --j;
        }
        if (j == big) break;
        k = sizes[j - 1];
    }
    return best;
}

// The bins by cost, the most costly first (ties: the lowest bin): a stable radix sort of the
// costs' bits (a cost >= 0 orders as its bits), a byte a pass, least significant first,
// skipping the bytes every cost shares (the counts of all eight in one pass). O(8·(bins + 256)).
inline void by_cost(const std::vector<double>& load, std::vector<int64_t>& order) {
    const size_t n = load.size();
    std::vector<uint64_t> key(n), key2(n);
    std::vector<int64_t> tmp(n);
    for (size_t b = 0; b < n; ++b) {
        uint64_t bits;
        std::memcpy(&bits, &load[b], sizeof bits);
        key[b] = ~bits;  // the most costly first
        order[b] = static_cast<int64_t>(b);
    }
    // the eight bytes' counts in one pass
    std::vector<uint32_t> counts(8 * 257, 0);
    for (size_t j = 0; j < n; ++j)
        for (size_t p = 0; p < 8; ++p) ++counts[p * 257 + ((key[j] >> (8 * p)) & 255) + 1];
    for (size_t p = 0; p < 8; ++p) {
        uint32_t* count = counts.data() + p * 257;
        const unsigned shift = static_cast<unsigned>(8 * p);
        if (count[((key.empty() ? 0 : key[0]) >> shift & 255) + 1] == n) continue;  // one byte
        for (size_t d = 0; d < 256; ++d) count[d + 1] += count[d];
        for (size_t j = 0; j < n; ++j) {
            const size_t at = count[(key[j] >> shift) & 255]++;
            key2[at] = key[j];
            tmp[at] = order[j];
        }
        key.swap(key2);
        order.swap(tmp);
    }
}

}  // namespace step_detail

// Bins as the fit fills them: the bin of each item, how many bins, and each bin's cost and
// tokens (bins numbered by cost, the most costly first).
struct StepFit {
    Buffer<int64_t> bin_of;
    int64_t bins = 0;
    Buffer<double> load;
    Buffer<int64_t> tokens;
};

// Tries bins, bins + step, bins + 2·step, ... until every item fits (it does once there is a bin
// per item: every size is at most capacity): at each count the least-cost rule, then the tight
// rule (fewer bins where the cap binds, less balanced). Counts below a lower bound on the bins
// (`quick_bound` at once, `bins_needed` once the first try fails) are skipped: they would fail,
// so the result is the one trying them would give.
//
// Then the slots (`world` >= 1; bins and step multiples of it): the bins by cost (the most
// costly first; ties: the lowest bin) in groups of `world`, slot 0 the most costly. A slot whose
// most costly bin costs more than (1 + polish) × its mean has its items (in their order) placed
// again over its own `world` bins, by the least-cost rule and, failing that, the tight rule; kept
// where everything fits and the slot's most costly bin costs less than before. Last, the bins
// are numbered by cost again (the most costly first; ties: the lower bin): bin k·world + r is
// place r of slot k.
inline StepFit step_fit(const int64_t* sizes, const double* costs, int64_t n, int64_t bins,
                        int64_t step, int64_t capacity, int64_t world, double polish) {
    using namespace step_detail;
    std::vector<int64_t> smallest, after;
    suffixes(sizes, n, smallest, after);
    Work w;
    w.by_tokens = true;
    for (int64_t i = 0; i < n && w.by_tokens; ++i)
        w.by_tokens = costs[i] == static_cast<double>(sizes[i]);
    StepFit out;
    out.bin_of = Buffer<int64_t>(n);
    int64_t* bin_of = out.bin_of.get();
    {  // at once, the bins the tokens need and one per item over half the capacity (no two of
       // those share a bin); the finer bound waits until the cap binds
        const int64_t least = quick_bound(sizes, n, capacity);
        if (least > bins) bins += (least - bins + step - 1) / step * step;
    }
    for (bool first = true;; bins += step, first = false) {
        if (step_fit_try(sizes, costs, smallest.data(), after.data(), n, bins, capacity, false,
                         bin_of, w) == n)
            break;
        if (first) {  // the cap binds: no try below the bound can hold the items
            const int64_t least = bins_needed(sizes, n, capacity);
            if (least > bins) {
                bins += (least - bins + step - 1) / step * step;
                if (step_fit_try(sizes, costs, smallest.data(), after.data(), n, bins, capacity,
                                 false, bin_of, w) == n)
                    break;
            }
        }
        if (step_fit_try(sizes, costs, smallest.data(), after.data(), n, bins, capacity, true,
                         bin_of, w) == n)
            break;
    }
    out.bins = bins;
    const size_t nb_ = static_cast<size_t>(bins);
    // each bin's cost: the try's sums (the costs added in item order)
    std::vector<double> load(w.cost.begin(), w.cost.begin() + static_cast<std::ptrdiff_t>(nb_));
    std::vector<int64_t> order(nb_);
    by_cost(load, order);
    if (bins > 0) {
        // the uneven slots: the most costly bin over (1 + polish) × the mean
        std::vector<int64_t> uneven;
        std::vector<double> worst_of;
        for (int64_t k = 0; k < bins / world; ++k) {
            const int64_t* group = order.data() + k * world;
            double worst = 0.0, sum = 0.0;
            for (int64_t r = 0; r < world; ++r) {
                const double l = load[static_cast<size_t>(group[r])];
                worst = l > worst ? l : worst;
                sum += l;
            }
            if (!(worst > sum / static_cast<double>(world) * (1.0 + polish))) continue;
            uneven.push_back(k);
            worst_of.push_back(worst);
        }
        // their items, in their order, in one pass
        std::vector<std::vector<int64_t>> picks(uneven.size());
        if (!uneven.empty()) {
            std::vector<int64_t> which(nb_, -1);  // bin -> its uneven slot's place in `uneven`
            for (size_t j = 0; j < uneven.size(); ++j)
                for (int64_t r = 0; r < world; ++r)
                    which[static_cast<size_t>(order[static_cast<size_t>(uneven[j] * world + r)])] =
                        static_cast<int64_t>(j);
            for (int64_t i = 0; i < n; ++i) {
                const int64_t j = which[static_cast<size_t>(bin_of[i])];
                if (j >= 0) picks[static_cast<size_t>(j)].push_back(i);
            }
        }
        std::vector<int64_t> sub_sizes, sub_bins, sub_small, sub_after;
        std::vector<double> sub_costs, sub_load;
        std::vector<int64_t> moved;  // the slots placed again
        for (size_t j = 0; j < uneven.size(); ++j) {
            const int64_t k = uneven[j];
            const int64_t* group = order.data() + k * world;
            const double worst = worst_of[j];
            const std::vector<int64_t>& pick = picks[j];
            const int64_t m = static_cast<int64_t>(pick.size());
            sub_sizes.resize(pick.size());
            sub_costs.resize(pick.size());
            sub_bins.resize(pick.size());
            for (size_t q = 0; q < pick.size(); ++q) {
                sub_sizes[q] = sizes[pick[q]];
                sub_costs[q] = costs[pick[q]];
            }
            suffixes(sub_sizes.data(), m, sub_small, sub_after);
            bool fits = false;
            for (bool tight : {false, true}) {
                if (step_fit_try(sub_sizes.data(), sub_costs.data(), sub_small.data(),
                                 sub_after.data(), m, world, capacity, tight, sub_bins.data(),
                                 w) == m) {
                    fits = true;
                    break;
                }
            }
            if (!fits) continue;
            // the slot's bins' costs as placed again (the costs added in item order)
            sub_load.assign(w.cost.begin(), w.cost.begin() + world);
            if (!(*std::max_element(sub_load.begin(), sub_load.end()) < worst)) continue;
            for (int64_t q = 0; q < m; ++q)
                bin_of[pick[static_cast<size_t>(q)]] = group[sub_bins[static_cast<size_t>(q)]];
            for (int64_t r = 0; r < world; ++r)
                load[static_cast<size_t>(group[r])] = sub_load[static_cast<size_t>(r)];
            moved.push_back(k);
        }
        if (!moved.empty()) {
            // the slots placed again leave the order; their bins go back in by cost (a merge)
            std::vector<char> out_of(nb_, 0);
            std::vector<Key> back;
            for (int64_t k : moved)
                for (int64_t r = 0; r < world; ++r) {
                    const int64_t b = order[static_cast<size_t>(k * world + r)];
                    out_of[static_cast<size_t>(b)] = 1;
                    back.push_back((~cost_key(load[static_cast<size_t>(b)], 0) >> 64 << 64) |
                                   static_cast<uint64_t>(b));
                }
            std::sort(back.begin(), back.end());
            std::vector<Key> kept;
            kept.reserve(nb_);
            for (int64_t b : order)
                if (!out_of[static_cast<size_t>(b)])
                    kept.push_back((~cost_key(load[static_cast<size_t>(b)], 0) >> 64 << 64) |
                                   static_cast<uint64_t>(b));
            std::vector<Key> merged(nb_);
            std::merge(kept.begin(), kept.end(), back.begin(), back.end(), merged.begin());
            for (size_t r = 0; r < nb_; ++r) order[r] = key_bin(merged[r]);
        }
    }
    // number the bins by cost, the most costly first
    std::vector<int64_t> rank(nb_);
    out.load = Buffer<double>(bins);
    out.tokens = zeros<int64_t>(bins);
    for (size_t r = 0; r < nb_; ++r) {
        rank[static_cast<size_t>(order[r])] = static_cast<int64_t>(r);
        out.load[static_cast<int64_t>(r)] = load[static_cast<size_t>(order[r])];
    }
    for (int64_t i = 0; i < n; ++i) {
        bin_of[i] = rank[static_cast<size_t>(bin_of[i])];
        out.tokens[bin_of[i]] += sizes[i];
    }
    return out;
}

}  // namespace padless
