// The out-of-core shuffle's kernels (the twin of padless/shuffle/_kernels.py): plain C++ over
// pointers and sizes.
//
// Random numbers: the splitmix64 counter and Lemire's exact bounded draw of rng.hpp (`below`),
// with the state in a local variable that a kernel loads from and stores back to the caller's
// one-element uint64 array, so one stream continues across calls.
//
// Layout: a records kernel sees a buffer as words of one unsigned type (uint8 up to uint64) and
// a record as `width` consecutive words; a lines kernel sees bytes plus a count of the whole
// eight-byte words at their start (for an eight-bytes-at-a-time newline search) and relies on the
// region it reads ending with a newline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "rng.hpp"

namespace padless {
namespace shuffle {

// How far ahead a gather asks for the next items (in items).
inline constexpr int64_t AHEAD = 8;
// A line in a sub-bucket's order: its start in the low 40 bits, its length in the high 24 (or
// LONG when 16 MiB or more: the gather then finds its end itself).
inline constexpr unsigned START_BITS = 40;
inline constexpr uint64_t START_MASK = (uint64_t{1} << 40) - 1;
inline constexpr int64_t LONG = (int64_t{1} << 24) - 1;

inline constexpr uint64_t NEWLINES = 0x0A0A0A0A0A0A0A0AULL;
inline constexpr uint64_t LOW_BITS = 0x0101010101010101ULL;
inline constexpr uint64_t HIGH_BITS = 0x8080808080808080ULL;

// A hint to load the cache line of `p` (no effect on results; never faults, even past the end).
inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

// Position of the first newline at or after `pos` in b8[0:size], or -1 when there is none. The
// first `words` eight-byte words (words * 8 <= size) are searched eight bytes at a time, bytes
// past them one by one (a mapped window whose length is not a multiple of 8).
inline int64_t find_newline(const uint8_t* b8, int64_t size, int64_t words, int64_t pos) {
    while ((pos & 7) && pos < size) {
        if (b8[pos] == 10) return pos;
        ++pos;
    }
    int64_t w = pos >> 3;
    for (; w < words; ++w) {
        uint64_t x;
        std::memcpy(&x, b8 + (w << 3), 8);
        x ^= NEWLINES;
        uint64_t hits = (x - LOW_BITS) & ~x & HIGH_BITS;
        // The lowest flagged byte is exact (a borrow only flags bytes above a zero byte).
        if (hits != 0) return (w << 3) + (__builtin_ctzll(hits) >> 3);
    }
    for (pos = std::max(pos, w << 3); pos < size; ++pos)
        if (b8[pos] == 10) return pos;
    return -1;
}

// Fill perm[:m] with a uniform permutation (inside-out Fisher-Yates, draws below(i + 1)).
inline void shuffle_indices(int64_t m, uint64_t& state, int32_t* perm) {
    for (int64_t i = 0; i < m; ++i) {
        int64_t j = below(state, static_cast<uint64_t>(i + 1));
        perm[i] = perm[j];
        perm[j] = static_cast<int32_t>(i);
    }
}

// Count how many of the first n labels of stream `key` fall in each of the num_buckets buckets.
inline void count_labels(int64_t n, int64_t num_buckets, uint64_t key, int64_t* counts) {
    for (int64_t k = 0; k < num_buckets; ++k) counts[k] = 0;
    uint64_t state = key;
    const uint64_t bound = static_cast<uint64_t>(num_buckets);
    for (int64_t i = 0; i < n; ++i) counts[below(state, bound)] += 1;
}

// Copy each record of src[lo:hi] (words) to dst[fill[b]:] for its label b drawn from `state`,
// and advance fill[b] by a record.
template <class W>
void place_records(const W* src, int64_t lo, int64_t hi, int64_t width, int64_t num_buckets,
                   uint64_t& state, W* dst, int64_t* fill) {
    const int64_t n = (hi - lo) / width;
    const uint64_t bound = static_cast<uint64_t>(num_buckets);
    uint64_t rng = state;
    if (width == 1) {
        for (int64_t i = 0; i < n; ++i) {
            int64_t b = below(rng, bound);
            dst[fill[b]++] = src[lo + i];
        }
    } else if (width == 2) {
        for (int64_t i = 0; i < n; ++i) {
            int64_t b = below(rng, bound);
            int64_t p = fill[b];
            fill[b] = p + 2;
            int64_t q = lo + 2 * i;
            dst[p] = src[q];
            dst[p + 1] = src[q + 1];
        }
    } else {
        for (int64_t i = 0; i < n; ++i) {
            int64_t b = below(rng, bound);
            int64_t p = fill[b];
            fill[b] = p + width;
            const W* from = src + lo + i * width;
            for (int64_t t = 0; t < width; ++t) dst[p + t] = from[t];
        }
    }
    state = rng;
}

// Send each record of src[lo:hi] to a uniformly random bucket, stably, into dst: bucket k lands
// in dst[starts[k]:starts[k+1]] (absolute word positions from dst_lo); counts[k] is its record
// count. Labels are drawn twice from stream `key` (once to count, once to copy), so no label
// array is kept. O(records) time, O(buckets) memory.
template <class W>
void scatter_records(const W* src, int64_t lo, int64_t hi, int64_t width, int64_t num_buckets,
                     uint64_t key, W* dst, int64_t dst_lo, int64_t* starts, int64_t* counts) {
    const int64_t n = (hi - lo) / width;
    count_labels(n, num_buckets, key, counts);
    starts[0] = dst_lo;
    for (int64_t k = 0; k < num_buckets; ++k) starts[k + 1] = starts[k] + counts[k] * width;
    std::unique_ptr<int64_t[]> fill(new int64_t[num_buckets > 0 ? num_buckets : 1]);
    std::memcpy(fill.get(), starts, static_cast<size_t>(num_buckets) * sizeof(int64_t));
    uint64_t state = key;
    place_records(src, lo, hi, width, num_buckets, state, dst, fill.get());
}

// Send each line of b8[lo:hi] to a uniformly random bucket, grouped, into dst. Labels continue
// `state`; the lines are scanned once (their lengths kept in lengths[:room], at most room lines
// per call). Bucket k of this call lands in dst[bounds[k]:bounds[k+1]] (absolute, from dst_lo),
// and counts[k] grows by its line count. Returns where the lines done end (hi unless `lengths`
// filled up first), or -1 for a line of 2**32 bytes or more (then state and counts are left as
// they were). b8[lo:hi] must end with a newline (b8 holds `size` bytes, the first `words` words
// searched a word at a time), dst must have room for hi - lo bytes from dst_lo.
int64_t scatter_window_lines(const uint8_t* b8, int64_t size, int64_t words, int64_t lo,
                             int64_t hi, int64_t num_buckets, uint64_t& state, uint32_t* lengths,
                             int64_t room, uint8_t* dst, int64_t dst_lo, int64_t* bounds,
                             int64_t* counts);

// Gather the lines of bucket s (the pieces b8[bounds[r, s]:bounds[r, s+1]] of each of the `rows`
// rows of `bounds`, `stride` entries a row, in row order) into items as start | min(length, LONG)
// << 40, then order them by a Fisher-Yates shuffle (draws below(i + 1) for i = 0, 1, ...).
// Returns the line count, or -1 when there are more lines than the `capacity` entries of items
// (state then left as it was). Each non-empty piece must end with a newline, inside b8[0:size].
int64_t order_lines(const uint8_t* b8, int64_t size, int64_t words, const int64_t* bounds,
                    int64_t rows, int64_t stride, int64_t s, uint64_t& state, uint64_t* items,
                    int64_t capacity);

// Copy the lines items[i], items[i+1], ... (from order_lines) to dst[at:], stopping before the
// first line that would end past `limit` (or at m); i and at advance to where it stopped. Asks the
// CPU for the lines a few items ahead (a sub-bucket's lines come from all over it). Each item's
// line must lie in b8[0:size]; a LONG one is measured here, and false is returned (i at it) when
// it has no newline before b8 ends.
bool gather_lines(const uint8_t* b8, int64_t size, int64_t words, const uint64_t* items,
                  int64_t& i, int64_t m, uint8_t* dst, int64_t& at, int64_t limit);

// Copy records lo + perm[i] * width, ... of src to dst[at:] (word positions), stopping before the
// first record that would end past `limit` (or at m); i and at advance to where it stopped.
template <class W>
void gather_records(const W* src, int64_t width, int64_t lo, const int32_t* perm, int64_t& i,
                    int64_t m, W* dst, int64_t& at, int64_t limit) {
    if (width == 2) {
        while (i < m && at + 2 <= limit) {
            if (i + AHEAD < m) prefetch(src + lo + 2 * int64_t{perm[i + AHEAD]});
            int64_t q = lo + 2 * int64_t{perm[i]};
            dst[at] = src[q];
            dst[at + 1] = src[q + 1];
            at += 2;
            ++i;
        }
    } else {
        while (i < m && at + width <= limit) {
            if (i + AHEAD < m) prefetch(src + lo + int64_t{perm[i + AHEAD]} * width);
            const W* from = src + lo + int64_t{perm[i]} * width;
            for (int64_t t = 0; t < width; ++t) dst[at + t] = from[t];
            at += width;
            ++i;
        }
    }
}

}  // namespace shuffle
}  // namespace padless
