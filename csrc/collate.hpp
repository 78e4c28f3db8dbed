// The collate family: a whole planned batch built from a token store in one pass (the twin of
// padless/_kernels/collate.py): padded rows with their mask, or packed rows with labels,
// position ids, segment ids and cu_seqlens, as padless.torch's collates build them. Plain C++
// over pointers and sizes; the checks and the bindings are in collate.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

namespace padless {

// Ask for the first cache lines of every item at once: independent misses kept in flight together
// (the items of a batch lie anywhere in a mapped file).
template <class S>
inline void prefetch_items(const S* src, const int64_t* starts, const int64_t* lengths,
                           int64_t n) {
    const int64_t step = std::max<int64_t>(64 / static_cast<int64_t>(sizeof(S)), 1);
    for (int64_t k = 0; k < n; ++k) {
        const int64_t ahead = std::min<int64_t>(lengths[k], 16 * step);
        for (int64_t t = 0; t < ahead; t += step) __builtin_prefetch(src + starts[k] + t);
    }
}

// The rows next fit cuts the items into (padless.planners.packing.next_fit_rows): a new row
// starts when the next item does not fit in the current one, or the current one holds
// max_per_row items (0: no cap). Returns how many rows; lengths are in [0, capacity].
inline int64_t next_fit_count(const int64_t* lengths, int64_t n, int64_t capacity,
                              int64_t max_per_row) {
    int64_t rows = 0, used = 0, count = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t s = lengths[k];
        if (count > 0 && (used + s > capacity || count == max_per_row)) used = count = 0;
        if (count == 0) ++rows;
        used += s;
        ++count;
    }
    return rows;
}

struct PackedCounts {
    int64_t segments;
    int64_t longest;
};

// A packed batch: each item's tokens at its place, then each row's padding tail as a segment of
// its own (2-D rows of `capacity`; flatten: one row, no padding). Per token of the output:
// ids (the token, or pad), labels (the token; ignore at each item's first token and on padding),
// positions (restarting at position_start in every segment), seq_idx (the segment number);
// cu[0..segments] the segments' bounds. The items fit the rows (next_fit_count <= rows, checked).
template <class S, class O>
PackedCounts packed_fill(const S* src, const int64_t* starts, const int64_t* lengths, int64_t n,
                         int64_t rows, int64_t capacity, int64_t max_per_row, bool flatten, O pad,
                         O ignore, int64_t position_start, O* ids, O* labels, int64_t* positions,
                         int32_t* seq_idx, int32_t* cu) {
    prefetch_items(src, starts, lengths, n);
    int64_t at = 0, seg = 0, longest = 0;
    cu[0] = 0;
    auto segment = [&](int64_t len) {
        int64_t* pos = positions + at;
        int32_t* sid = seq_idx + at;
        const int32_t id = static_cast<int32_t>(seg);
        for (int64_t t = 0; t < len; ++t) pos[t] = position_start + t;
        std::fill(sid, sid + len, id);
        cu[seg + 1] = static_cast<int32_t>(at + len);
        longest = std::max(longest, len);
        ++seg;
        at += len;
    };
    auto item = [&](int64_t k) {
        const S* p = src + starts[k];
        const int64_t len = lengths[k];
        O* o = ids + at;
        O* l = labels + at;
        for (int64_t t = 0; t < len; ++t) o[t] = static_cast<O>(p[t]);
        std::copy(o, o + len, l);  // from the ids just written (in cache), not the file again
        if (len > 0) l[0] = ignore;
        segment(len);
    };
    if (flatten) {
        for (int64_t k = 0; k < n; ++k) item(k);
        return {seg, longest};
    }
    int64_t k = 0;
    for (int64_t r = 0; r < rows; ++r) {
        at = r * capacity;
        int64_t used = 0, count = 0;
        while (k < n && !(count > 0 && (used + lengths[k] > capacity || count == max_per_row))) {
            used += lengths[k];
            ++count;
            item(k++);
        }
        const int64_t tail = capacity - used;
        if (tail > 0) {
            std::fill(ids + at, ids + at + tail, pad);
            std::fill(labels + at, labels + at + tail, ignore);
            segment(tail);
        }
    }
    return {seg, longest};
}

// A padded batch of `rows` rows of `width` (rows past the n items are empty): ids the items'
// tokens then pad, mask 1 on the tokens and 0 after. Lengths are in [0, width], n <= rows.
template <class S, class O>
void padded_fill(const S* src, const int64_t* starts, const int64_t* lengths, int64_t n,
                 int64_t rows, int64_t width, O pad, O* ids, int64_t* mask) {
    prefetch_items(src, starts, lengths, n);
    for (int64_t r = 0; r < rows; ++r) {
        O* o = ids + r * width;
        int64_t* m = mask + r * width;
        const int64_t len = r < n ? lengths[r] : 0;
        if (len > 0) {
            const S* p = src + starts[r];
            for (int64_t t = 0; t < len; ++t) o[t] = static_cast<O>(p[t]);
        }
        std::fill(o + len, o + width, pad);
        std::fill(m, m + len, int64_t{1});
        std::fill(m + len, m + width, int64_t{0});
    }
}

}  // namespace padless
