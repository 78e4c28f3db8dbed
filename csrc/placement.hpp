// Placement: shards of sequences onto (micro-batch slot, lanes) by list scheduling (the twin of
// padless/_kernels/placement.py's place_items_reference).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.hpp"

namespace padless {

struct Placed {
    int64_t failed = -1;      // position in `order` of the first item that fit no slot, or -1
    Buffer<int64_t> slot;     // per item
    Buffer<double> start;     // per item
    Buffer<int64_t> lanes;    // per item, wmax entries (-1 past its width), ascending
};

// Items in `order`, each onto widths[i] lanes of one of `slots` slots. In a slot, the lanes with
// room for tokens[i] more tokens (at most max_tokens per lane and slot) are ranked by (free time,
// lane); the item takes the first widths[i], starts at the latest of their free times and holds
// them for times[i]. The slot is the one where it finishes first (ties: the lowest slot).
//
// With `aligned`, an item of width w takes a whole block of w consecutive lanes starting at a
// multiple of w (the groups a runtime can create up front: floor(lanes / w) per width); in a
// slot, the block where it starts first (ties: the lowest block).
//
// Each slot keeps its lanes sorted by (free, lane), so a slot's scan stops at the item's width
// among lanes with room, or as soon as a lane's free time cannot beat the best finish so far.
// Cost: O(N · (slots · scanned + lanes)) with `scanned` usually the width (aligned: the lanes).
inline Placed place_items(const int64_t* order, const int64_t* widths, const double* times,
                          const int64_t* tokens, int64_t n, int64_t lanes, int64_t slots,
                          int64_t max_tokens, int64_t wmax, bool aligned = false) {
    Placed out;
    out.slot = zeros<int64_t>(n);
    out.start = zeros<double>(n);
    out.lanes = Buffer<int64_t>(n * wmax);
    std::fill(out.lanes.get(), out.lanes.get() + n * wmax, int64_t(-1));
    const size_t cells = static_cast<size_t>(slots * lanes);
    std::vector<double> free_sorted(cells, 0.0);  // per slot: free times, ascending
    std::vector<int64_t> lane_sorted(cells);      // per slot: the lane of each entry
    std::vector<int64_t> used(cells, 0);          // per slot and lane: tokens held
    std::vector<double> free_at(cells, 0.0);      // per slot and lane: free time
    for (int64_t m = 0; m < slots; ++m) {
        for (int64_t j = 0; j < lanes; ++j) lane_sorted[m * lanes + j] = j;
    }
    std::vector<int64_t> pick(static_cast<size_t>(wmax));
    std::vector<int64_t> best_pick(static_cast<size_t>(wmax));
    // per slot: how many of its sorted entries are live; a lane without room for the fewest
    // tokens of any item still to come leaves its slot's entries (it can take nothing more)
    std::vector<int64_t> live(static_cast<size_t>(slots), lanes);
    std::vector<int64_t> fewest(static_cast<size_t>(n) + 1, max_tokens + 1);
    for (int64_t p = n; p-- > 0;) fewest[p] = std::min(fewest[p + 1], tokens[order[p]]);
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t p = 0; p < n; ++p) {
        const int64_t i = order[p];
        const int64_t w = widths[i];
        const double t = times[i];
        const int64_t tau = tokens[i];
        double best = inf;
        int64_t best_m = -1;
        double best_at = 0.0;
        for (int64_t m = 0; m < slots && aligned; ++m) {
            const double* fa = &free_at[m * lanes];
            const int64_t* us = &used[m * lanes];
            for (int64_t b = 0; b + w <= lanes; b += w) {
                double at = 0.0;
                bool room = true;
                for (int64_t k = b; k < b + w && room; ++k) {
                    room = us[k] + tau <= max_tokens;
                    at = std::max(at, fa[k]);
                }
                if (room && at + t < best) {
                    best = at + t;
                    best_m = m;
                    best_at = at;
                    for (int64_t k = 0; k < w; ++k) best_pick[k] = b + k;
                }
            }
        }
        for (int64_t m = 0; m < slots && !aligned; ++m) {
            double* fs = &free_sorted[m * lanes];
            int64_t* ls = &lane_sorted[m * lanes];
            const int64_t* us = &used[m * lanes];
            int64_t& act = live[static_cast<size_t>(m)];
            int64_t got = 0;
            double at = 0.0;
            for (int64_t j = 0; j < act && got < w;) {
                if (!(fs[j] + t < best)) break;  // no later lane can finish sooner
                if (us[ls[j]] + tau > max_tokens) {
                    if (us[ls[j]] + fewest[p] > max_tokens) {  // full for good: drop it
                        std::copy(fs + j + 1, fs + act, fs + j);
                        std::copy(ls + j + 1, ls + act, ls + j);
                        --act;
                    } else {
                        ++j;
                    }
                    continue;
                }
                pick[got++] = ls[j];
                at = fs[j];
                ++j;
            }
            if (got < w) continue;
            if (at + t < best) {
                best = at + t;
                best_m = m;
                best_at = at;
                std::copy(pick.begin(), pick.begin() + w, best_pick.begin());
            }
        }
        if (best_m < 0) {
            out.failed = p;
            return out;
        }
        const int64_t m = best_m;
        const double end = best_at + t;
        int64_t* lane_out = out.lanes.get() + i * wmax;
        std::copy(best_pick.begin(), best_pick.begin() + w, lane_out);
        std::sort(lane_out, lane_out + w);
        for (int64_t k = 0; k < w; ++k) {
            used[m * lanes + lane_out[k]] += tau;
            free_at[m * lanes + lane_out[k]] = best_at + t;
        }
        out.slot[i] = m;
        out.start[i] = best_at;
        // re-sort the slot: each chosen lane (ascending) leaves its entry and moves right, past
        // the entries that sort before (end, lane); the others keep their order
        double* fs = &free_sorted[m * lanes];
        int64_t* ls = &lane_sorted[m * lanes];
        const int64_t act = live[static_cast<size_t>(m)];
        for (int64_t k = 0; k < w; ++k) {
            const int64_t lane = lane_out[k];
            int64_t j = 0;
            while (ls[j] != lane) ++j;
            // the first entry after j that sorts after (end, lane): binary search, then shift
            int64_t lo = j + 1, hi = act;
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (fs[mid] < end || (fs[mid] == end && ls[mid] < lane)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            std::copy(fs + j + 1, fs + lo, fs + j);
            std::copy(ls + j + 1, ls + lo, ls + j);
            fs[lo - 1] = end;
            ls[lo - 1] = lane;
        }
    }
    return out;
}

// Replay items in the order given on their lanes (n items, `width` lanes each, -1 past an
// item's degree): each starts when all its lanes are free. With `barrier`, the first item of a
// new slot (slots[i] != slots[i - 1]) first waits for every lane. Writes start[n] and free[lanes].
inline void replay_lanes(const int64_t* lanes_of, int64_t width, const double* times,
                         const int64_t* slots, int64_t n, int64_t lanes, bool barrier,
                         double* start, double* free) {
    std::fill(free, free + lanes, 0.0);
    for (int64_t i = 0; i < n; ++i) {
        if (barrier && i > 0 && slots[i] != slots[i - 1]) {
            const double top = *std::max_element(free, free + lanes);
            std::fill(free, free + lanes, top);
        }
        const int64_t* row = lanes_of + i * width;
        double s = 0.0;
        for (int64_t k = 0; k < width && row[k] >= 0; ++k) s = std::max(s, free[row[k]]);
        const double end = s + times[i];
        for (int64_t k = 0; k < width && row[k] >= 0; ++k) free[row[k]] = end;
        start[i] = s;
    }
}


struct Rounds {
    int64_t failed = -1;      // an item that fits no group (it opened a round and did not fit)
    Buffer<int64_t> round;    // per item
    Buffer<int64_t> first;    // per item: the first lane of its group
    Buffer<int64_t> size;     // per item: index into sizes
    Buffer<double> start;     // per item: work before it in its group
};

// Micro-batches built one at a time the way Megatron-LM's dev-branch dynamic CP does (the twin of
// padless/_kernels/placement.py's place_rounds_reference). work and tokens are n x n_sizes,
// row-major (work +inf: size not allowed). A round opens with the first item left on lanes
// 0..k-1 (k its smallest allowed size) and caps every lane's work at limits[that item]; each
// later item left, in order, tries each allowed size: the least busy group of that size with
// room for its tokens (the first on ties), or a new group on the lowest free lanes; it keeps the
// choice with the lowest busiest lane (the first found on ties) within the cap, else waits.
// Then, while lanes are free, the first group of the smallest size grows to the next size (the
// groups after it shift along) if the free lanes allow it.
// Cost: O(rounds * n * (n_sizes + groups per round)).
inline Rounds place_rounds(const int64_t* order, const int64_t* sizes, int64_t n_sizes,
                           const double* work, const int64_t* tokens, const double* limits,
                           int64_t n, int64_t lanes, int64_t max_tokens) {
    Rounds out;
    out.round = zeros<int64_t>(n);
    out.first = zeros<int64_t>(n);
    out.size = zeros<int64_t>(n);
    out.start = zeros<double>(n);
    std::vector<int64_t> left(order, order + n), later;
    std::vector<int64_t> g_first, g_size, g_used;
    std::vector<double> g_busy;
    std::vector<int64_t> sufmin;
    std::vector<std::vector<int64_t>> by_size(static_cast<size_t>(n_sizes));
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t r = 0; !left.empty(); ++r) {
        g_first.clear();
        g_size.clear();
        g_used.clear();
        g_busy.clear();
        for (auto& v : by_size) v.clear();
        std::vector<std::vector<int64_t>> g_items;
        auto open = [&](int64_t at, int64_t s) {
            // busy 0: after the groups of busy <= 0, before the rest (the list's order)
            std::vector<int64_t>& list = by_size[static_cast<size_t>(s)];
            auto it = list.begin();
            while (it != list.end() && g_busy[*it] <= 0.0) ++it;
            list.insert(it, static_cast<int64_t>(g_first.size()));
            g_first.push_back(at);
            g_size.push_back(s);
            g_used.push_back(0);
            g_busy.push_back(0.0);
            g_items.emplace_back();
        };
        const int64_t head = left[0];
        int64_t k0 = 0;
        while (k0 < n_sizes && !(work[head * n_sizes + k0] < inf)) ++k0;
        if (k0 == n_sizes || sizes[k0] > lanes || tokens[head * n_sizes + k0] > max_tokens) {
            out.failed = head;
            return out;
        }
        open(0, k0);
        g_busy[0] = work[head * n_sizes + k0];
        g_used[0] = tokens[head * n_sizes + k0];
        g_items[0].push_back(head);
        int64_t used = sizes[k0];
        const double cap = limits[head];
        double top = g_busy[0];
        later.clear();
        // the fewest tokens of any item from position p on, per size: a group without room
        // for that many leaves its size's list for the rest of the round
        const size_t count = left.size();
        sufmin.assign((count + 1) * static_cast<size_t>(n_sizes), max_tokens + 1);
        for (size_t p = count; p-- > 0;) {
            const int64_t i = left[p];
            for (int64_t s = 0; s < n_sizes; ++s) {
                sufmin[p * n_sizes + s] =
                    std::min(sufmin[(p + 1) * n_sizes + s], tokens[i * n_sizes + s]);
            }
        }
        for (size_t p = 1; p < count; ++p) {
            const int64_t i = left[p];
            double best = inf;
            int64_t best_s = -1, best_g = -1;
            bool found = false;
            for (int64_t s = 0; s < n_sizes; ++s) {
                const double t = work[i * n_sizes + s];
                if (!(t < inf)) continue;
                const int64_t tau = tokens[i * n_sizes + s];
                // the least busy group of this size with room (kept sorted by (busy, group))
                int64_t pick = -1;
                double low = inf;
                std::vector<int64_t>& list = by_size[static_cast<size_t>(s)];
                const int64_t least = sufmin[p * n_sizes + s];
                for (size_t at = 0; at < list.size();) {
                    const int64_t g = list[at];
                    if (g_busy[g] + t > cap) break;  // the rest are busier
                    if (g_used[g] + tau <= max_tokens) {
                        pick = g;
                        low = g_busy[g];
                        break;
                    }
                    if (g_used[g] + least > max_tokens) {
                        list.erase(list.begin() + static_cast<std::ptrdiff_t>(at));
                    } else {
                        ++at;
                    }
                }
                if (pick >= 0) {
                    const double after = std::max(low + t, top);
                    if (after <= cap && (!found || after < best)) {
                        best = after;
                        best_s = s;
                        best_g = pick;
                        found = true;
                    }
                }
                if (lanes - used >= sizes[s] && tau <= max_tokens) {
                    const double after = std::max(t, top);
                    if (after <= cap && (!found || after < best)) {
                        best = after;
                        best_s = s;
                        best_g = -1;
                        found = true;
                    }
                }
            }
            if (!found) {
                later.push_back(i);
                continue;
            }
            if (best_g < 0) {
                open(used, best_s);
                used += sizes[best_s];
                best_g = static_cast<int64_t>(g_first.size()) - 1;
            }
            g_busy[best_g] += work[i * n_sizes + best_s];
            g_used[best_g] += tokens[i * n_sizes + best_s];
            g_items[best_g].push_back(i);
            top = best;
            // move the group later in its size's list until it is in (busy, group) order again
            std::vector<int64_t>& list = by_size[static_cast<size_t>(best_s)];
            size_t at = 0;
            while (list[at] != best_g) ++at;
            const double busy = g_busy[best_g];
            size_t lo = at + 1, hi = list.size();  // the first entry that sorts after it
            while (lo < hi) {
                const size_t mid = lo + (hi - lo) / 2;
                const int64_t g = list[mid];
                if (g_busy[g] < busy || (g_busy[g] == busy && g < best_g)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            std::copy(list.begin() + static_cast<std::ptrdiff_t>(at) + 1,
                      list.begin() + static_cast<std::ptrdiff_t>(lo),
                      list.begin() + static_cast<std::ptrdiff_t>(at));
            list[lo - 1] = best_g;
        }
        const int64_t groups = static_cast<int64_t>(g_first.size());
        while (used < lanes) {
            const int64_t small = *std::min_element(g_size.begin(), g_size.end());
            if (small + 1 >= n_sizes) break;
            const int64_t step = sizes[small + 1] - sizes[small];
            if (used + step > lanes) break;
            int64_t at = 0;
            while (g_size[at] != small) ++at;
            g_size[at] = small + 1;
            for (int64_t g = at + 1; g < groups; ++g) g_first[g] += step;
            used += step;
        }
        for (int64_t g = 0; g < groups; ++g) {
            double clock = 0.0;
            const int64_t s = g_size[g];
            for (int64_t i : g_items[g]) {
                out.round[i] = r;
                out.first[i] = g_first[g];
                out.size[i] = s;
                out.start[i] = clock;
                clock += work[i * n_sizes + s];
            }
        }
        left.swap(later);
    }
    return out;
}

}  // namespace padless
