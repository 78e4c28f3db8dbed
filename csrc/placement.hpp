// Placement: shards of sequences onto (micro-batch slot, lanes) by list scheduling (the twin of
// padless/_kernels/placement.py's place_items_reference).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common.hpp"

namespace padless {

struct Placed {
    int64_t failed = -1;      // position in `order` of the first item that fit no slot, or -1
                              // (-2: stopped, a lane's busy time passed the limit)
    Buffer<int64_t> slot;     // per item
    Buffer<double> start;     // per item
    Buffer<int64_t> lanes;    // per item, wmax entries (-1 past its width), ascending
};

// Items in `order`, each onto widths[i] lanes of one of `slots` slots. In a slot, the lanes with
// room for tokens[i] more tokens (at most max_tokens per lane and slot) are ranked by (free time,
// lane); the item takes the first widths[i], starts at the latest of their free times and holds
// them for times[i]. The slot is the one where it finishes first (ties: the lowest slot).
//
// With a finite `limit`, once a lane's busy time (the sum of the times placed on it, in placement
// order) passes it, the placement stops (failed = -2) as soon as the items left provably fit:
// checked where the limit is passed, then 16, 32, 64... items later (at most ~log2 n checks);
// not aligned only (else it goes on to the end). The proof: with T the most tokens and W the widest
// of the items left and N their lanes in all, a lane of a slot with c = room / T >= 1 takes c more
// of them at least; N placements end at most the k live lanes of least c whose c sum to <= N; if
// the live lanes left are > slots * (W - 1), some slot has W of them before every item. So a
// caller that keeps only placements whose busiest lane is under a bound need not finish one that
// fits and is past it (a placement that would not fit is never stopped: it fails as without it).
//
// With `aligned`, an item of width w takes a whole block of w consecutive lanes starting at a
// multiple of w (the groups a runtime can create up front: floor(lanes / w) per width); in a
// slot, the block where it starts first (ties: the lowest block).
//
// Each slot keeps its lanes sorted by (free, lane), so a slot's scan stops at the item's width
// among lanes with room, or as soon as a lane's free time cannot beat the best finish so far;
// it skips blocks of 8 sorted lanes without room for the item at once (a bound per block), and
// slots none of whose lanes has room. The slots are visited by their earliest free lane, so the
// scan of most items stops after a slot or two. Cost: O(N · (slots · scanned + lanes)) at worst,
// with `scanned` usually the width (aligned: the lanes).
inline Placed place_items(const int64_t* order, const int64_t* widths, const double* times,
                          const int64_t* tokens, int64_t n, int64_t lanes, int64_t slots,
                          int64_t max_tokens, int64_t wmax, bool aligned = false,
                          double limit = std::numeric_limits<double>::infinity()) {
    Placed out;
    out.slot = zeros<int64_t>(n);
    out.start = zeros<double>(n);
    out.lanes = Buffer<int64_t>(n * wmax);
    std::fill(out.lanes.get(), out.lanes.get() + n * wmax, int64_t(-1));
    const size_t cells = static_cast<size_t>(slots * lanes);
    // per slot: how many of its sorted entries are live; a lane without room for the fewest
    // tokens of any item still to come leaves its slot's entries (it can take nothing more)
    std::vector<int64_t> live(static_cast<size_t>(slots), lanes);
    // per slot, its lanes by (free time, lane): each entry's free time, lane and tokens of room
    struct Entry {
        double free;
        int64_t lane;
        int64_t room;
    };
    std::vector<Entry> sorted(cells);
    std::vector<int64_t> used(cells, 0);          // per slot and lane: tokens held
    std::vector<double> free_at(cells, 0.0);      // per slot and lane: free time
    for (int64_t m = 0; m < slots; ++m) {
        for (int64_t j = 0; j < lanes; ++j) {
            sorted[static_cast<size_t>(m * lanes + j)] = {0.0, j, max_tokens};
        }
    }
    // per slot, per block of kBlock sorted entries: a bound on the most tokens any live lane
    // there still has room for (never below it). A scan skips a block whose bound is below the
    // item's tokens (late in a packed step most lanes are nearly full: without the blocks each
    // slot's scan walked all of them); a bound that does not rule a block out is made exact
    // first. When entries shift left by one, a block takes its successor's first entry: its
    // bound takes the successor's too.
    constexpr int64_t kBlock = 8;
    const int64_t blocks = (lanes + kBlock - 1) / kBlock;
    std::vector<int64_t> room_max(static_cast<size_t>(slots * blocks), max_tokens);
    std::vector<char> loose(static_cast<size_t>(slots * blocks), 0);  // bound maybe not exact
    // per slot: a bound on the most room of any of its live lanes (rooms only shrink), set when
    // a scan sees every live lane of the slot
    std::vector<int64_t> slot_room(static_cast<size_t>(slots), max_tokens);
    auto shifted = [&](int64_t m, int64_t from, int64_t to) {  // entries from+1..to-1 moved left
        int64_t* rm = &room_max[m * blocks];
        char* lz = &loose[static_cast<size_t>(m * blocks)];
        for (int64_t b = from / kBlock; b < (to - 1) / kBlock; ++b) {
            rm[b] = std::max(rm[b], rm[b + 1]);
            lz[b] = 1;
        }
        lz[(to - 1) / kBlock] = 1;
    };
    std::vector<double> busy(static_cast<size_t>(lanes), 0.0);  // per lane: seconds placed
    bool crossed = false;                                      // a lane is past the limit
    int64_t next_check = 0, stride = 16;
    std::vector<int64_t> caps;
    // do the items from position q on fit, whatever the choices (see above)?
    auto rest_fits = [&](int64_t q) {
        int64_t most = 0, widest = 1, need = 0;
        for (int64_t r = q; r < n; ++r) {
            most = std::max(most, tokens[order[r]]);
            widest = std::max(widest, widths[order[r]]);
            need += widths[order[r]];
        }
        if (q >= n || most == 0) return true;
        caps.clear();
        for (size_t c = 0; c < cells; ++c) {
            const int64_t cap = (max_tokens - used[c]) / most;
            if (cap >= 1) caps.push_back(cap);
        }
        std::sort(caps.begin(), caps.end());
        int64_t killed = 0, spent = 0;
        for (const int64_t cap : caps) {
            if (cap > need - spent) break;
            spent += cap;
            ++killed;
        }
        return static_cast<int64_t>(caps.size()) - killed > slots * (widest - 1);
    };
    std::vector<char> chosen(static_cast<size_t>(lanes), 0);  // the lanes a wide item took
    std::vector<Entry> rest(static_cast<size_t>(lanes));      // a slot's other entries
    std::vector<int64_t> pick(static_cast<size_t>(wmax));
    std::vector<int64_t> best_pick(static_cast<size_t>(wmax));
    std::vector<int64_t> fewest(static_cast<size_t>(n) + 1, max_tokens + 1);
    for (int64_t p = n; p-- > 0;) fewest[p] = std::min(fewest[p + 1], tokens[order[p]]);
    const double inf = std::numeric_limits<double>::infinity();
    // the slots by (key, slot), key a slot's earliest free time among its live entries (a lower
    // bound once entries leave): a scan visits them in that order and stops at the first whose
    // key alone cannot finish the item by the best (finish, slot) found
    std::vector<double> key(static_cast<size_t>(slots), 0.0);
    std::vector<int64_t> by_key(static_cast<size_t>(slots));
    for (int64_t m = 0; m < slots; ++m) by_key[static_cast<size_t>(m)] = m;
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
        for (int64_t q = 0; q < slots && !aligned; ++q) {
            const int64_t m = by_key[static_cast<size_t>(q)];
            if (key[static_cast<size_t>(m)] + t > best) break;  // so do the slots after it
            if (slot_room[static_cast<size_t>(m)] < tau) continue;  // no lane has room
            Entry* es = &sorted[static_cast<size_t>(m * lanes)];
            int64_t& act = live[static_cast<size_t>(m)];
            int64_t got = 0;
            double at = 0.0;
            int64_t* rm = &room_max[m * blocks];
            int64_t j = 0;
            while (j < act && got < w) {
                if (j % kBlock == 0) {
                    int64_t& bound = rm[j / kBlock];
                    char& lz = loose[static_cast<size_t>(m * blocks + j / kBlock)];
                    if (bound >= tau && lz) {  // made exact
                        lz = 0;
                        bound = -1;
                        for (int64_t e = j; e < std::min(j + kBlock, act); ++e) {
                            bound = std::max(bound, es[e].room);
                        }
                    }
                    if (bound < tau) {  // no lane of the block has room
                        j += kBlock;
                        continue;
                    }
                }
                const double fin = es[j].free + t;
                if (fin > best || (fin == best && m > best_m)) break;  // nor can a later lane
                if (es[j].room < tau) {
                    if (es[j].room < fewest[p]) {  // full for good: drop it
                        std::copy(es + j + 1, es + act, es + j);
                        shifted(m, j, act);
                        --act;
                    } else {
                        ++j;
                    }
                    continue;
                }
                pick[got++] = es[j].lane;
                at = es[j].free;
                ++j;
            }
            if (got < w && j >= act) {  // every live lane seen: the slot's most room, bounded
                int64_t most = -1;
                for (int64_t b = 0; b * kBlock < act; ++b) most = std::max(most, rm[b]);
                slot_room[static_cast<size_t>(m)] = most;
            }
            if (got < w) continue;
            if (at + t < best || (at + t == best && m < best_m)) {
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
        bool over = false;
        for (int64_t k = 0; k < w; ++k) {
            used[m * lanes + lane_out[k]] += tau;
            free_at[m * lanes + lane_out[k]] = best_at + t;
            double& b = busy[static_cast<size_t>(lane_out[k])];
            b += t;
            over = over || b > limit;
        }
        out.slot[i] = m;
        out.start[i] = best_at;
        crossed = crossed || over;
        if (crossed && !aligned && p >= next_check) {  // past the limit: stop if the rest fits
            if (rest_fits(p + 1)) {
                out.failed = -2;
                return out;
            }
            next_check = p + stride;
            stride *= 2;
        }
        // re-sort the slot: each chosen lane (ascending) leaves its entry and moves right, past
        // the entries that sort before (end, lane); the others keep their order
        Entry* es = &sorted[static_cast<size_t>(m * lanes)];
        const int64_t act = live[static_cast<size_t>(m)];
        if (w > 1) {
            // a wide item: one pass takes its lanes out and merges them back in at (end, lane),
            // then the slot's block bounds are made exact (O(lanes) instead of O(w · lanes))
            for (int64_t k = 0; k < w; ++k) chosen[static_cast<size_t>(lane_out[k])] = 1;
            int64_t kept = 0;
            for (int64_t e = 0; e < act; ++e) {
                if (!chosen[static_cast<size_t>(es[e].lane)]) {
                    rest[static_cast<size_t>(kept++)] = es[e];
                }
            }
            int64_t a = 0, k = 0, e = 0;
            while (k < w) {
                const int64_t lane = lane_out[k];
                if (a < kept) {
                    const Entry& r = rest[static_cast<size_t>(a)];
                    if (r.free < end || (r.free == end && r.lane < lane)) {
                        es[e++] = r;
                        ++a;
                        continue;
                    }
                }
                es[e++] = {end, lane, max_tokens - used[m * lanes + lane]};
                chosen[static_cast<size_t>(lane)] = 0;
                ++k;
            }
            while (a < kept) es[e++] = rest[static_cast<size_t>(a++)];
            int64_t* rm = &room_max[m * blocks];
            char* lz = &loose[static_cast<size_t>(m * blocks)];
            for (int64_t b = 0; b * kBlock < act; ++b) {
                int64_t most = -1;
                for (int64_t x = b * kBlock; x < std::min((b + 1) * kBlock, act); ++x) {
                    most = std::max(most, es[x].room);
                }
                rm[b] = most;
                lz[b] = 0;
            }
        }
        for (int64_t k = 0; k < w && w == 1; ++k) {
            const int64_t lane = lane_out[k];
            int64_t j = 0;
            while (es[j].lane != lane) ++j;
            // the first entry after j that sorts after (end, lane): binary search, then shift
            int64_t lo = j + 1;
            for (int64_t count = act - lo; count > 0;) {  // without branches
                const int64_t half = count / 2;
                const Entry& e = es[lo + half];
                const bool before = e.free < end || (e.free == end && e.lane < lane);
                lo = before ? lo + half + 1 : lo;
                count = before ? count - half - 1 : half;
            }
            std::copy(es + j + 1, es + lo, es + j);
            es[lo - 1] = {end, lane, max_tokens - used[m * lanes + lane]};
            shifted(m, j, lo);
            int64_t& bound = room_max[m * blocks + (lo - 1) / kBlock];
            bound = std::max(bound, es[lo - 1].room);
        }
        // the slot's key grew (its earliest entries may have moved on): back into (key, slot)
        // order, further along
        key[static_cast<size_t>(m)] = act > 0 ? es[0].free : inf;
        size_t q = 0;
        while (by_key[q] != m) ++q;
        const double mk = key[static_cast<size_t>(m)];
        for (; q + 1 < by_key.size(); ++q) {
            const int64_t next = by_key[q + 1];
            const double nk = key[static_cast<size_t>(next)];
            if (nk < mk || (nk == mk && next < m)) {
                by_key[q] = next;
            } else {
                break;
            }
        }
        by_key[q] = m;
    }
    return out;
}

// A shard's forward + backward seconds: per pass linear·s + per_sequence + step + hops ·
// max(step, exchange·s + latency), step = quadratic·s² (c as cost_table's; MeshCost.time's
// operations in its order).
inline double shard_seconds(double shard, const double* c, double hops) {
    const double step0 = shard * c[1] * shard;
    const double pass0 = shard * c[0] + c[2] + step0 + std::max(step0, shard * c[3] + c[8]) * hops;
    const double step1 = shard * c[5] * shard;
    const double pass1 = shard * c[4] + c[6] + step1 + std::max(step1, shard * c[7] + c[8]) * hops;
    return pass0 + pass1;
}

// The seconds of a shard of every length (rows) at every degree of ks (columns): the twin of
// padless/_kernels/placement.py's cost_table_reference (padless.MeshCost.time), the same
// operations in the same order (no contraction: -ffp-contract=off), so the same numbers bit for
// bit. c: forward linear, quadratic, per_sequence, exchange seconds per token; the same four of
// the backward; latency. Where ks[j] < kmin[i] the entry is inf. Per row also the first column
// of the minimum (0 when all are inf) and the widest column whose k·t is within (1 + slack) of
// the row's least (the last when all are inf). Below 2**52 tokens a row is one branch-free pass
// (SSE2: two columns at a time), then one pass for the row's two minima and two scans that stop
// at the columns sought; the columns' k, padding multiple and hops are computed once.
inline void cost_table(const int64_t* lengths, int64_t n, const int64_t* ks, int64_t n_ks,
                       const int64_t* kmin, const double* c, double* table, int64_t* fastest,
                       double slack, int64_t* widest) {
    const double inf = std::numeric_limits<double>::infinity();
    const size_t nk = static_cast<size_t>(n_ks);
    // what depends on the column only: k, the padding multiple m (2k, 1 at k = 1), the factor
    // m / k (2, 1 at k = 1: exact below 2**52 tokens) and the hops k - 1
    std::vector<double> kf(nk), mult(nk), twice(nk), hops(nk);
    for (size_t j = 0; j < nk; ++j) {
        kf[j] = static_cast<double>(ks[j]);
        mult[j] = ks[j] > 1 ? 2.0 * kf[j] : 1.0;
        twice[j] = ks[j] > 1 ? 2.0 : 1.0;
        hops[j] = kf[j] - 1.0;
    }
    const double* kp = kf.data();
    const double* mp = mult.data();
    const double* tp = twice.data();
    const double* hp = hops.data();
    constexpr double kExact = 4503599627370496.0;  // 2**52
    for (int64_t i = 0; i < n; ++i) {
        const double lf = static_cast<double>(lengths[i]);
        // ks[j] >= kmin[i] compared in doubles: exact, ks <= 2**20 (a kmin past 2**53 rounds
        // to a double past 2**20 still)
        const double low = static_cast<double>(kmin[i]);
        double* __restrict row = table + i * n_ks;
        if (lf <= kExact) {
            // one branch-free pass. ceil(q) for q in [0, 2**52]: (q + 2**52) - 2**52 rounds q
            // to an integer, one more where that fell below q
            size_t j = 0;
#if defined(__SSE2__)
            // two columns at a time, the same operations (max(comm, step) returns step on
            // ties, as std::max(step, comm) does)
            const __m128d vlf = _mm_set1_pd(lf), vlow = _mm_set1_pd(low);
            const __m128d magic = _mm_set1_pd(kExact), one = _mm_set1_pd(1.0);
            const __m128d vinf = _mm_set1_pd(inf), lat = _mm_set1_pd(c[8]);
            const __m128d l0 = _mm_set1_pd(c[0]), q0 = _mm_set1_pd(c[1]);
            const __m128d s0 = _mm_set1_pd(c[2]), e0 = _mm_set1_pd(c[3]);
            const __m128d l1 = _mm_set1_pd(c[4]), q1 = _mm_set1_pd(c[5]);
            const __m128d s1 = _mm_set1_pd(c[6]), e1 = _mm_set1_pd(c[7]);
            for (; j + 2 <= nk; j += 2) {
                const __m128d q = _mm_div_pd(vlf, _mm_loadu_pd(mp + j));
                __m128d up = _mm_sub_pd(_mm_add_pd(q, magic), magic);
                up = _mm_add_pd(up, _mm_and_pd(_mm_cmplt_pd(up, q), one));
                const __m128d shard = _mm_mul_pd(up, _mm_loadu_pd(tp + j));
                const __m128d h = _mm_loadu_pd(hp + j);
                const __m128d st0 = _mm_mul_pd(_mm_mul_pd(shard, q0), shard);
                const __m128d c0 = _mm_add_pd(_mm_mul_pd(shard, e0), lat);
                const __m128d p0 = _mm_add_pd(
                    _mm_add_pd(_mm_add_pd(_mm_mul_pd(shard, l0), s0), st0),
                    _mm_mul_pd(_mm_max_pd(c0, st0), h));
                const __m128d st1 = _mm_mul_pd(_mm_mul_pd(shard, q1), shard);
                const __m128d c1 = _mm_add_pd(_mm_mul_pd(shard, e1), lat);
                const __m128d p1 = _mm_add_pd(
                    _mm_add_pd(_mm_add_pd(_mm_mul_pd(shard, l1), s1), st1),
                    _mm_mul_pd(_mm_max_pd(c1, st1), h));
                const __m128d ok = _mm_cmpge_pd(_mm_loadu_pd(kp + j), vlow);
                const __m128d total = _mm_add_pd(p0, p1);
                _mm_storeu_pd(row + j, _mm_or_pd(_mm_and_pd(ok, total), _mm_andnot_pd(ok, vinf)));
            }
#endif
            for (; j < nk; ++j) {
                const double q = lf / mp[j];
                double up = (q + kExact) - kExact;
                up += up < q ? 1.0 : 0.0;
                row[j] = kp[j] >= low ? shard_seconds(up * tp[j], c, hp[j]) : inf;
            }
        } else {
            // ceil of a quotient in [2**52, 2**62]: truncation is exact (an integer there), and
            // the shard up * m / k as numpy computes it
            for (size_t j = 0; j < nk; ++j) {
                const double q = lf / mp[j];
                double up = static_cast<double>(static_cast<int64_t>(q));
                up += up < q ? 1.0 : 0.0;
                row[j] = kp[j] >= low ? shard_seconds(up * mp[j] / kp[j], c, hp[j]) : inf;
            }
        }
        // the row's least time and least rank-seconds k·t (the minimum is exact in any order)
        double least = inf, least_area = inf;
        size_t j = 0;
#if defined(__SSE2__)
        __m128d vt = _mm_set1_pd(inf), va = _mm_set1_pd(inf);
        for (; j + 2 <= nk; j += 2) {
            const __m128d r = _mm_loadu_pd(row + j);
            vt = _mm_min_pd(vt, r);
            va = _mm_min_pd(va, _mm_mul_pd(r, _mm_loadu_pd(kp + j)));
        }
        double lanes_t[2], lanes_a[2];
        _mm_storeu_pd(lanes_t, vt);
        _mm_storeu_pd(lanes_a, va);
        least = std::min(lanes_t[0], lanes_t[1]);
        least_area = std::min(lanes_a[0], lanes_a[1]);
#endif
        for (; j < nk; ++j) {
            least = std::min(least, row[j]);
            least_area = std::min(least_area, row[j] * kp[j]);
        }
        // the first column of the least time (0 when all are inf: the first equals inf then)
        int64_t best = 0;
        while (best < n_ks && row[best] != least) ++best;
        fastest[i] = best < n_ks ? best : 0;
        // the widest column whose rank-seconds k·t are within (1 + slack) of the row's least
        // (numpy's (1 + slack) * min(t * k) and t * k <= that, the same operations); the last
        // where none is (all inf)
        const double within = (1.0 + slack) * least_area;
        int64_t wide = n_ks - 1;
        for (int64_t jj = n_ks - 1; jj >= 0; --jj) {
            if (row[jj] * kp[jj] <= within) {
                wide = jj;
                break;
            }
        }
        widest[i] = n_ks > 0 ? wide : 0;
    }
}

// The tables of the Megatron-like candidates (the twin of padless/_kernels/placement.py's
// rounds_tables_reference, the same operations in the same order). Per length (n) and group size
// (ks, n_ks): tokens[i, s] a rank holds (the length padded to 2k, 1 at k = 1, over k), times[i, s]
// the shard's seconds (cost_table's), and the two work measures with inf where ks[s] < kmin[i]:
// work_time (the seconds) and work_quad (L·L/k); per length the caps of a round it opens,
// 1.05 × its work at its smallest allowed size k0 × max(1, k0·cap / L) (limit_time,
// limit_quad). Cost: O(n · n_ks).
inline void rounds_tables(const int64_t* lengths, int64_t n, const int64_t* ks, int64_t n_ks,
                          const int64_t* kmin, const double* c, int64_t cap, int64_t* tokens,
                          double* times, double* work_time, double* work_quad,
                          double* limit_time, double* limit_quad) {
    const double inf = std::numeric_limits<double>::infinity();
    const size_t nk = static_cast<size_t>(n_ks);
    {
        std::vector<int64_t> ones(static_cast<size_t>(n), 1), fastest(static_cast<size_t>(n));
        std::vector<int64_t> widest(static_cast<size_t>(n));
        cost_table(lengths, n, ks, n_ks, ones.data(), c, times, fastest.data(), 0.0,
                   widest.data());
    }
    std::vector<double> kf(nk), mult(nk), twice(nk);
    for (size_t s = 0; s < nk; ++s) {
        kf[s] = static_cast<double>(ks[s]);
        mult[s] = ks[s] > 1 ? 2.0 * kf[s] : 1.0;
        twice[s] = ks[s] > 1 ? 2.0 : 1.0;
    }
    constexpr double kExact = 4503599627370496.0;  // 2**52
    for (int64_t i = 0; i < n; ++i) {
        const double lf = static_cast<double>(lengths[i]);
        const size_t at = static_cast<size_t>(i) * nk;
        const int64_t low = kmin[i];
        int64_t k0 = -1;
        for (size_t s = 0; s < nk; ++s) {
            // numpy's ceil(L / m) * m / k, truncated to an integer: below 2**52 tokens the
            // product is exact and the quotient 2 * up (up at k = 1), as in cost_table
            const double q = lf / mult[s];
            double up = static_cast<double>(static_cast<int64_t>(q));
            up += up < q ? 1.0 : 0.0;
            const double shard = lf <= kExact ? up * twice[s] : up * mult[s] / kf[s];
            tokens[at + s] = static_cast<int64_t>(shard);
            const bool allowed = ks[s] >= low;
            k0 = allowed && k0 < 0 ? static_cast<int64_t>(s) : k0;
            work_time[at + s] = allowed ? times[at + s] : inf;
            work_quad[at + s] = allowed ? lf * lf / kf[s] : inf;
        }
        k0 = k0 < 0 ? 0 : k0;  // none allowed: the first (numpy's argmax of all False)
        const size_t z = static_cast<size_t>(k0);
        // ks[k0] * cap in int64 as numpy multiplies it (wrapping past 2**63), then in doubles
        const int64_t area = static_cast<int64_t>(static_cast<uint64_t>(ks[z]) *
                                                  static_cast<uint64_t>(cap));
        const double fill = std::max(1.0, static_cast<double>(area) / std::max(lf, 1.0));
        limit_time[i] = 1.05 * times[at + z] * fill;
        limit_quad[i] = 1.05 * (lf * lf / kf[z]) * fill;
    }
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
    // the fewest tokens and the least work (inf: no item may take the size), per size, of the
    // items from each position of `order` on. The items left in a round are a part of those
    // from their first one on: fewer tokens and less work than theirs are bounds (a group
    // without room for the fewest tokens of the items from p on leaves its size's list)
    std::vector<int64_t> sufmin((static_cast<size_t>(n) + 1) * n_sizes, max_tokens + 1);
    std::vector<double> sufwork((static_cast<size_t>(n) + 1) * n_sizes,
                                std::numeric_limits<double>::infinity());
    std::vector<int64_t> rank_of(static_cast<size_t>(n));
    std::vector<int64_t> live;
    live.reserve(static_cast<size_t>(n_sizes));
    for (int64_t p = n; p-- > 0;) {
        const int64_t i = order[p];
        rank_of[static_cast<size_t>(i)] = p;
        for (int64_t s = 0; s < n_sizes; ++s) {
            sufmin[p * n_sizes + s] = std::min(sufmin[(p + 1) * n_sizes + s], tokens[i * n_sizes + s]);
            sufwork[p * n_sizes + s] = std::min(sufwork[(p + 1) * n_sizes + s], work[i * n_sizes + s]);
        }
    }
    std::vector<std::vector<int64_t>> by_size(static_cast<size_t>(n_sizes));
    // per size: a bound on the most room (max_tokens - tokens) of the groups in its list, never
    // below it: an item with more tokens skips the list (made exact by a scan of the whole list)
    std::vector<int64_t> room_bound(static_cast<size_t>(n_sizes));
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t r = 0; !left.empty(); ++r) {
        g_first.clear();
        g_size.clear();
        g_used.clear();
        g_busy.clear();
        for (auto& v : by_size) v.clear();
        std::fill(room_bound.begin(), room_bound.end(), int64_t(-1));
        std::vector<std::vector<int64_t>> g_items;
        auto open = [&](int64_t at, int64_t s) {
            // busy 0: after the groups of busy <= 0, before the rest (the list's order)
            std::vector<int64_t>& list = by_size[static_cast<size_t>(s)];
            room_bound[static_cast<size_t>(s)] = max_tokens;
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
        const size_t count = left.size();
        // could any item from position p on be placed now? Each takes at least the least work
        // and the fewest tokens at a size (the bounds above), and a placement that fits also fits with less of either: when
        // an item with the least of both fits nowhere, none of them does (until one is placed)
        auto any_fits = [&](size_t p) {
            const size_t from = static_cast<size_t>(rank_of[static_cast<size_t>(left[p])]);
            for (int64_t s = 0; s < n_sizes; ++s) {
                const double t = sufwork[from * n_sizes + s];
                if (!(t < inf)) continue;
                const int64_t tau = sufmin[from * n_sizes + s];
                if (lanes - used >= sizes[s] && tau <= max_tokens && std::max(t, top) <= cap) {
                    return true;
                }
                for (const int64_t g : by_size[static_cast<size_t>(s)]) {
                    if (g_busy[g] + t > cap) break;
                    if (g_used[g] + tau <= max_tokens) {
                        if (std::max(g_busy[g] + t, top) <= cap) return true;
                        break;
                    }
                }
            }
            return false;
        };
        bool checked = false;  // any_fits was asked since the last item was placed
        // the sizes an item may still take in this round, ascending: a size is out once no
        // group of it can open (too few lanes free) and none in its list has room for the
        // fewest tokens of the items left (lanes are only taken, room only shrinks)
        bool stale = true;
        auto relive = [&](size_t p) {
            const size_t from = static_cast<size_t>(rank_of[static_cast<size_t>(left[p])]);
            live.clear();
            for (int64_t s = 0; s < n_sizes; ++s) {
                const size_t z = static_cast<size_t>(s);
                const bool can_open = lanes - used >= sizes[s];
                const bool can_join = !by_size[z].empty() && room_bound[z] >= sufmin[from * n_sizes + s];
                if (can_open || can_join) live.push_back(s);
            }
            stale = false;
        };
        for (size_t p = 1; p < count; ++p) {
            const int64_t i = left[p];
            double best = inf;
            int64_t best_s = -1, best_g = -1;
            bool found = false;
            if (stale) relive(p);
            for (const int64_t s : live) {
                const double t = work[i * n_sizes + s];
                if (!(t < inf)) continue;
                const int64_t tau = tokens[i * n_sizes + s];
                // the least busy group of this size with room (kept sorted by (busy, group))
                int64_t pick = -1;
                double low = inf;
                std::vector<int64_t>& list = by_size[static_cast<size_t>(s)];
                const int64_t least = sufmin[static_cast<size_t>(rank_of[i]) * n_sizes + s];
                int64_t& bound = room_bound[static_cast<size_t>(s)];
                int64_t most = -1;  // over the groups seen that stay in the list
                size_t at = 0;
                for (; at < list.size() && bound >= tau;) {
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
                        most = std::max(most, max_tokens - g_used[g]);
                        ++at;
                    }
                }
                if (at == list.size() && bound >= tau) {  // every group seen
                    bound = most;
                    stale = true;
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
                if (!checked) {
                    checked = true;
                    if (p + 1 < count && !any_fits(p + 1)) {  // the rest wait too, in order
                        later.insert(later.end(), left.begin() + static_cast<std::ptrdiff_t>(p) + 1,
                                     left.end());
                        break;
                    }
                }
                continue;
            }
            checked = false;
            stale = true;
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

// A 1F1B (vpp = 1) or interleaved (vpp > 1) pipeline of `stages` devices over `micro`
// micro-batches run in `order` (micro-batch order[j] takes the j-th place), each taking
// forward[m] / vpp and backward[m] / vpp per virtual stage (the twin of
// padless/_kernels/placement.py's pipeline_reference: the same ops in the same order, the same
// floats). Device d runs Megatron's order: `warm` forwards, then one forward and one backward in
// turn, then the backwards left; an op starts when its device is free and its inputs are done
// (the forward of the virtual stage before; the backward of the stage after and its own
// forward). An op's end does not depend on which device the loop visits first, so the loop below
// (devices in turn, each as far as it can go) gives the reference's floats. vpp > 1 needs
// micro % stages == 0 (the caller checks). Returns the makespan (NaN if the ops deadlock, which
// these orders never do). `done` holds 2 * micro * stages * vpp doubles, `pos` and `free` stages
// entries each: scratch the caller owns. Cost: O(stages · micro · vpp).
inline double pipeline(const double* forward, const double* backward, const int64_t* order,
                       int64_t micro, int64_t stages, int64_t vpp, double* done, int64_t* pos,
                       double* free_at) {
    const int64_t total = micro * vpp;
    const int64_t v_total = stages * vpp;
    const double scale = static_cast<double>(vpp);
    std::fill(done, done + 2 * micro * v_total, -1.0);  // -1: not done (ends are >= 0)
    std::fill(pos, pos + stages, int64_t(0));
    std::fill(free_at, free_at + stages, 0.0);
    double* done_f = done;
    double* done_b = done + micro * v_total;
    int64_t left = 2 * total * stages;
    // op k of a kind on device d: (micro-batch, virtual stage)
    auto op_of = [&](int64_t k, int64_t d, bool fwd, int64_t& mb, int64_t& v) {
        if (vpp == 1) {
            mb = k;
            v = d;
            return;
        }
        const int64_t c = (k / stages) % vpp;
        mb = (k / (stages * vpp)) * stages + k % stages;
        v = (fwd ? c : vpp - 1 - c) * stages + d;
    };
    while (left > 0) {
        bool moved = false;
        for (int64_t d = 0; d < stages; ++d) {
            const int64_t warm = vpp == 1 ? std::min(stages - d - 1, micro)
                                          : std::min((stages - d - 1) * 2 + (vpp - 1) * stages,
                                                     total);
            const int64_t steady = 2 * (total - warm);
            while (pos[d] < 2 * total) {
                const int64_t p = pos[d];
                bool fwd;
                int64_t k;
                if (p < warm) {
                    fwd = true;
                    k = p;
                } else if (p - warm < steady) {
                    const int64_t q = p - warm;
                    fwd = q % 2 == 0;
                    k = fwd ? warm + q / 2 : q / 2;
                } else {
                    fwd = false;
                    k = total - warm + (p - warm - steady);
                }
                int64_t mb, v;
                op_of(k, d, fwd, mb, v);
                double s = free_at[d];
                if (fwd) {
                    if (v > 0) {
                        const double need = done_f[mb * v_total + v - 1];
                        if (need < 0.0) break;
                        s = std::max(s, need);
                    }
                } else {
                    const double own = done_f[mb * v_total + v];
                    if (own < 0.0) break;
                    double after = 0.0;
                    if (v < v_total - 1) {
                        after = done_b[mb * v_total + v + 1];
                        if (after < 0.0) break;
                    }
                    s = std::max(s, own);
                    if (v < v_total - 1) s = std::max(s, after);
                }
                const int64_t m = order[mb];
                free_at[d] = s + (fwd ? forward[m] / scale : backward[m] / scale);
                (fwd ? done_f : done_b)[mb * v_total + v] = free_at[d];
                ++pos[d];
                --left;
                moved = true;
            }
        }
        if (!moved) return std::numeric_limits<double>::quiet_NaN();
    }
    double out = 0.0;
    for (int64_t d = 0; d < stages; ++d) out = std::max(out, free_at[d]);
    return out;
}


}  // namespace padless
