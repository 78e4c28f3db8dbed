// Windowed plans: read a window's items from (memory-mapped) lengths and plan it in one call
// (the twin of padless/_kernels/windows.py).
//
// A window is a list of blocks of consecutive positions. Position q holds item
// (q + rotation) mod n, block b the positions [b·block, min((b + 1)·block, n)), so a block is at
// most two runs of consecutive items and the lengths are read sequentially, block by block.
// The fused kernels plan one window exactly as the token budget and packing planners plan that
// window's lengths, with global item ids written straight into the order.
#pragma once

#include <cstdint>
#include <new>
#include <thread>
#include <vector>

#include "common.hpp"

#include "bittree.hpp"
#include "budget.hpp"
#include "order.hpp"

namespace padless {

// std::allocator with the huge-page advice Buffer takes (common.hpp), for a vector that grows
// big.
template <class T>
struct HugeAllocator {
    using value_type = T;
    HugeAllocator() = default;
    template <class U>
    HugeAllocator(const HugeAllocator<U>&) {}
    T* allocate(size_t count) {
        T* p = static_cast<T*>(::operator new(count * sizeof(T)));
        advise_huge_pages(p, count * sizeof(T));
        return p;
    }
    void deallocate(T* p, size_t) { ::operator delete(p); }
    template <class U>
    bool operator==(const HugeAllocator<U>&) const { return true; }
    template <class U>
    bool operator!=(const HugeAllocator<U>&) const { return false; }
};

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
// k, starts[span] the window's size. A size outside [0, span) stops the count, its item in
// `bad` (else -1), the bounds then unfinished.
template <class T>
Buffer<int64_t> window_histogram(Column<T> sizes, const WindowBlocks& win, int64_t span,
                                 int64_t& bad) {
    Buffer<int64_t> starts = zeros<int64_t>(span + 1);
    int64_t* s = starts.get();
    const uint64_t top = static_cast<uint64_t>(span);
    int64_t first_bad = -1;  // a local: the loop below keeps it (and `top`) in registers
    win.for_each_run([&](int64_t lo, int64_t hi) {
        if (first_bad >= 0) return;
        for (int64_t i = lo; i < hi; ++i) {
            // a negative size is a large unsigned one: one comparison checks both ends
            const uint64_t k = static_cast<uint64_t>(sizes[i]);
            if (k >= top) {
                first_bad = i;
                return;
            }
            s[k + 1] += 1;
        }
    });
    bad = first_bad;
    if (bad >= 0) return starts;
    for (int64_t k = 0; k < span; ++k) s[k + 1] += s[k];
    return starts;
}

// The window's item ids by increasing size, stably (ties in window order), into `order`, from
// the window's histogram `starts` (window_histogram).
template <class T>
void window_scatter(Column<T> sizes, const WindowBlocks& win, const int64_t* starts,
                    int64_t span, int64_t* order, const int64_t* names = nullptr) {
    std::vector<int64_t> fill(starts, starts + span);
    int64_t* f = fill.data();
    win.for_each_run([&](int64_t lo, int64_t hi) {
        if (names == nullptr) {
            for (int64_t i = lo; i < hi; ++i) order[f[sizes[i]]++] = i;
        } else {  // item i written as names[i] (a subset named by its corpus indices)
            for (int64_t i = lo; i < hi; ++i) order[f[sizes[i]]++] = names[i];
        }
    });
}

// Global ids of the window by increasing size, ties shuffled from `key`: length_order of the
// window's lengths with every position replaced by its item id.
template <class T>
CountingOrder window_order(Column<T> sizes, const WindowBlocks& win, int64_t span,
                           uint64_t key) {
    int64_t bad;
    CountingOrder out{Buffer<int64_t>(0), window_histogram(sizes, win, span, bad), bad};
    if (bad >= 0) return out;
    const int64_t* starts = out.starts.get();
    out.order = Buffer<int64_t>(starts[span]);
    window_scatter(sizes, win, starts, span, out.order.get());
    shuffle_runs(out.order.get(), starts, span + 1, key);
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

// Open rows of fit_rows by the space they have left: a LIFO stack per space, as
// RowStacks, but each stack is a chain of chunks of entries (`head[space]` is 8 * its top chunk
// + the top entry's place in it, -1 when empty) rather than a link stored with each row. Taking
// a row then reads the stack's top chunk, recently used and in cache, instead of the row's own
// link in a table of every row: a walk over millions of rows would wait on a cache miss at
// nearly every visit. An entry is W int64: the row, and with W = 2 its item count (max_per_row
// needs it at every visit).
template <int W>
class ChunkStacks {
public:
    explicit ChunkStacks(int64_t capacity) : tree_(capacity + 1), head_(capacity + 1, -1) {}

    // Put the entry on top of the stack of rows with `space` left.
    void push(int64_t space, const int64_t* entry) {
        int64_t h = head_[space];
        int64_t chunk, top;
        if (h >= 0 && (h & 7) + 1 < kPer) {
            chunk = h >> 3;
            top = (h & 7) + 1;
        } else {
            if (h < 0) tree_.set(space);
            chunk = take_chunk();
            chunks_[chunk].next = h < 0 ? -1 : h >> 3;
            top = 0;
        }
        for (int i = 0; i < W; ++i) chunks_[chunk].slot[W * top + i] = entry[i];
        head_[space] = 8 * chunk + top;
    }

    // Take the top entry off the stack of rows with `space` left (which must hold one).
    void pop(int64_t space, int64_t* entry) {
        int64_t h = head_[space];
        int64_t chunk = h >> 3, top = h & 7;
        for (int i = 0; i < W; ++i) entry[i] = chunks_[chunk].slot[W * top + i];
        if (top > 0) {
            head_[space] = h - 1;
            return;
        }
        int64_t below = chunks_[chunk].next;  // a full chunk
        chunks_[chunk].next = free_;
        free_ = chunk;
        if (below < 0) {
            head_[space] = -1;
            tree_.clear(space);
        } else {
            head_[space] = 8 * below + kPer - 1;
            __builtin_prefetch(&chunks_[below]);
        }
    }

    // The smallest space >= `space` with an open row, or -1.
    int64_t fit(int64_t space) const { return tree_.next(space); }

private:
    static constexpr int64_t kSlots = 7, kPer = kSlots / W;  // a chunk is one 64-byte line
    struct Chunk {
        int64_t next;  // the chunk below (or the next free one)
        int64_t slot[kSlots];
    };

    int64_t take_chunk() {
        if (free_ < 0) {
            chunks_.emplace_back();
            return static_cast<int64_t>(chunks_.size()) - 1;
        }
        int64_t chunk = free_;
        free_ = chunks_[chunk].next;
        return chunk;
    }

    BitTree tree_;
    std::vector<int64_t> head_;
    std::vector<Chunk, HugeAllocator<Chunk>> chunks_;
    int64_t free_ = -1;  // the free chunks, linked by `next`
};

// The packing plan, a run of equal sizes at a time. Run r holds items of size r (starts bounds
// the runs of an order by increasing size) and best fit walks them from the largest size down.
// The rows depend on the runs' sizes alone: fit_rows records the visits, (row, items), and
// counts each row's items. Once the rows' order is drawn, row_places says where each row goes
// and place_visits writes the items (then their sizes) there, reading the visits in order.
struct RowVisit {
    int64_t row, items;
};

// The visits of best_fit_runs into `visits` (room for one per item); counts[row + 1] gets the
// row's item count. Returns the number of visits; `rows` gets the number of rows.
template <int W>
int64_t fit_visits(const int64_t* starts, int64_t num_starts, int64_t capacity,
                   int64_t max_per_row, RowVisit* visits, int64_t* counts, int64_t* rows) {
    ChunkStacks<W> open(capacity);
    RowVisit* v = visits;
    int64_t num_rows = 0;
    for (int64_t r = num_starts - 2; r >= 0; --r) {
        int64_t c = starts[r + 1] - starts[r];
        const int64_t s = r;
        // a fresh row takes capacity / s items of size s: one division per run, not per visit
        const int64_t fresh = s > 0 ? capacity / s : c;
        while (c > 0) {
            int64_t slot = open.fit(s);
            int64_t entry[2] = {0, 0};  // row, items (W = 2)
            int64_t rem, q;
            if (slot < 0) {
                entry[0] = num_rows++;
                rem = capacity;
                q = std::min(c, fresh);
            } else {
                open.pop(slot, entry);
                rem = slot;
                q = c;
                // rem >= s; most rows taken again have room for one item only
                if (s > 0 && q > 1) q = rem - s < s ? 1 : std::min(q, rem / s);
            }
            const int64_t row = entry[0];
            if (W == 2 && max_per_row - entry[1] < q) q = max_per_row - entry[1];
            *v++ = RowVisit{row, q};
            c -= q;
            rem -= q * s;
            if (W == 2) {
                entry[1] += q;
                counts[row + 1] = entry[1];
                if (entry[1] < max_per_row) open.push(rem, entry);
            } else {
                // nothing waits on this count (no max_per_row): the cache miss is overlapped
                counts[row + 1] = slot < 0 ? q : counts[row + 1] + q;
                open.push(rem, entry);
            }
        }
    }
    *rows = num_rows;
    return v - visits;
}

// The rows of best fit over runs: its visits and each row's item count.
struct RowFit {
    Buffer<RowVisit> visits;
    int64_t num_visits = 0, num_rows = 0;
    Buffer<int64_t> counts;  // counts[row + 1]: the row's items (counts[0] is not used)
};

inline RowFit fit_rows(const int64_t* starts, int64_t num_starts, int64_t capacity,
                       int64_t max_per_row) {
    const int64_t n = starts[num_starts - 1];
    // at most one visit and one row per item (each places one at least); the pages past the
    // visits and rows made are never touched
    RowFit fit{Buffer<RowVisit>(n), 0, 0, Buffer<int64_t>(n + 1)};
    fit.num_visits = max_per_row > 0 ? fit_visits<2>(starts, num_starts, capacity, max_per_row,
                                                     fit.visits.get(), fit.counts.get(),
                                                     &fit.num_rows)
                                     : fit_visits<1>(starts, num_starts, capacity, 0,
                                                     fit.visits.get(), fit.counts.get(),
                                                     &fit.num_rows);
    return fit;
}

// fn(lo, hi) over [0, n) in two halves, the second on a thread of its own, when n is large
// enough to pay for a thread; the first half ends at a multiple of `grain`. The halves must
// write apart, so that the result does not depend on whether a thread ran.
template <class Fn>
void in_halves(int64_t n, int64_t grain, Fn&& fn) {
    const int64_t mid = n / 2 / grain * grain;
    if (n < (int64_t(1) << 16) || mid == 0) {
        fn(int64_t(0), n);
        return;
    }
    std::thread second([&] { fn(mid, n); });
    fn(int64_t(0), mid);
    second.join();
}

// Where the rows of a plan go: row k of the plan is row final[k], where `final` is the shuffled
// row order with each batch of rows_per_batch rows (the last one shorter) sorted in place (a
// batch lists its rows in the order they opened). Writes `bounds` (num_rows + 1), the CSR
// bounds of the plan's rows, and place[row], where row `row`'s first entry goes; false (nothing
// else written) when `final` is not a permutation of the rows. counts[row + 1] is the row's
// item count.
//
// The rows go to random places. Reading at random waits on a cache miss per read (a few at a
// time), writing at random does not, so every pass reads in order and writes at random: the
// rank of each row, each row's count at its rank, the bounds (a running sum), then where each
// row goes. Each pass but the running sum runs in two halves (on two cores where there are).
inline bool row_places(int64_t* final, int64_t num_rows, int64_t rows_per_batch,
                       const int64_t* counts, int64_t* bounds, int64_t* place) {
    {
        // a permutation: every entry a row, no row twice (one bit per row: the maps fit a cache)
        const size_t words = static_cast<size_t>(num_rows / 64 + 1);
        std::vector<uint64_t> seen[2] = {std::vector<uint64_t>(words, 0),
                                         std::vector<uint64_t>(words, 0)};
        bool fine[2] = {true, true};
        in_halves(num_rows, rows_per_batch, [&](int64_t lo, int64_t hi) {
            const int half = lo > 0;
            uint64_t* map = seen[half].data();
            for (int64_t k = lo; k < hi; ++k) {
                const int64_t row = final[k];
                if (row < 0 || row >= num_rows) {
                    fine[half] = false;
                    return;
                }
                uint64_t& word = map[row >> 6];
                const uint64_t bit = uint64_t(1) << (row & 63);
                if (word & bit) {
                    fine[half] = false;
                    return;
                }
                word |= bit;
            }
            if (rows_per_batch > 1) {
                for (int64_t a = lo; a < hi; a += rows_per_batch)
                    std::sort(final + a, final + std::min(a + rows_per_batch, hi));
            }
        });
        if (!fine[0] || !fine[1]) return false;
        for (size_t w = 0; w < words; ++w)
            if (seen[0][w] & seen[1][w]) return false;
    }
    in_halves(num_rows, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) place[final[k]] = k;  // the row's rank
    });
    bounds[0] = 0;
    in_halves(num_rows, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) bounds[place[r] + 1] = counts[r + 1];
    });
    for (int64_t k = 0; k < num_rows; ++k) bounds[k + 1] += bounds[k];
    in_halves(num_rows, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) place[final[k]] = bounds[k];
    });
    return true;
}

// Write every visit's items at its row's place, for the rows in [lo, hi): value(p, s) for the
// item at walk position p, of size s, at out[place[row]], place[row] then moving past them (so
// a row's items come in walk order). The visits are read in order, the rows' places at random.
template <class Value>
void place_visits(const RowFit& fit, const int64_t* starts, int64_t num_starts, int64_t* place,
                  int64_t lo, int64_t hi, int64_t* out, Value value) {
    const RowVisit* v = fit.visits.data.get();
    const RowVisit* vend = v + fit.num_visits;
    const int64_t ahead = 16;  // fetch the places of the rows visited next
    int64_t pos = 0;           // walk position of the visit's first item
    for (int64_t r = num_starts - 2; r >= 0; --r) {
        for (int64_t c = starts[r + 1] - starts[r]; c > 0; ++v) {
            if (vend - v > ahead) __builtin_prefetch(place + v[ahead].row);
            const int64_t row = v->row, q = v->items;
            if (row >= lo && row < hi) {
                int64_t* o = out + place[row];
                for (int64_t j = 0; j < q; ++j) o[j] = value(pos + j, r);
                place[row] += q;
            }
            pos += q;
            c -= q;
        }
    }
}

// The histogram plan's by-width index, one chunk of sequences at a time: sequence first_id + i
// (width widths[i]; those of width outside [low, runs) left out) goes to index[cursor[width]++],
// so the index holds the sequences by width, stable, when the chunks come in order. Disjoint
// width ranges touch disjoint cursors and places: threads may place one range each. Returns
// false (writing nothing more) when a cursor would fall outside the index.
template <class T, class I>
bool width_scatter(Column<T> widths, int64_t n, int64_t first_id, int64_t low, int64_t runs,
                   int64_t* cursor, I* index, int64_t size) {
    for (int64_t i = 0; i < n; ++i) {
        const int64_t w = static_cast<int64_t>(widths[i]);
        if (w < low || w >= runs) continue;
        const int64_t at = cursor[w]++;
        // a negative cursor is a large unsigned one: one comparison checks both ends
        if (static_cast<uint64_t>(at) >= static_cast<uint64_t>(size)) return false;
        index[at] = static_cast<I>(first_id + i);
    }
    return true;
}

}  // namespace padless
