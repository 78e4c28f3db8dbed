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
    std::vector<double> tmp_free(static_cast<size_t>(lanes));
    std::vector<int64_t> tmp_lane(static_cast<size_t>(lanes));
    std::vector<char> taken(static_cast<size_t>(lanes), 0);
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
            const double* fs = &free_sorted[m * lanes];
            const int64_t* ls = &lane_sorted[m * lanes];
            const int64_t* us = &used[m * lanes];
            int64_t got = 0;
            double at = 0.0;
            for (int64_t j = 0; j < lanes && got < w; ++j) {
                if (!(fs[j] + t < best)) break;  // no later lane can finish sooner
                if (us[ls[j]] + tau > max_tokens) continue;
                pick[got++] = ls[j];
                at = fs[j];
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
        // re-sort the slot: the others keep their order, the chosen (free = end) merge in by
        // lane; the entries before the first chosen one stay where they are
        double* fs = &free_sorted[m * lanes];
        int64_t* ls = &lane_sorted[m * lanes];
        for (int64_t k = 0; k < w; ++k) taken[static_cast<size_t>(lane_out[k])] = 1;
        int64_t first = 0;
        while (!taken[static_cast<size_t>(ls[first])]) ++first;
        int64_t kept = 0;
        for (int64_t j = first; j < lanes; ++j) {
            if (!taken[static_cast<size_t>(ls[j])]) {
                tmp_free[kept] = fs[j];
                tmp_lane[kept++] = ls[j];
            }
        }
        for (int64_t k = 0; k < w; ++k) taken[static_cast<size_t>(lane_out[k])] = 0;
        int64_t a = 0, b = 0, o = first;
        while (a < kept || b < w) {
            bool take_kept = b >= w || (a < kept && (tmp_free[a] < end ||
                                                     (tmp_free[a] == end && tmp_lane[a] < lane_out[b])));
            if (take_kept) {
                fs[o] = tmp_free[a];
                ls[o++] = tmp_lane[a++];
            } else {
                fs[o] = end;
                ls[o++] = lane_out[b++];
            }
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

}  // namespace padless
