// The ingest family: document offsets of a raw token file, batch gathers from a token store, and
// per-segment positions (the twin of padless/_kernels/ingest.py). Plain C++ over pointers and
// sizes; the parts, the checks and the messages are in ingest.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace padless {

// Tokens scanned per block: the compare loop over a block adds into a 32-bit counter, which the
// compiler vectorises at the tokens' own width (no widening to int64 per token).
inline constexpr int64_t EOS_BLOCK = 1 << 12;
// Tokens per probe when filling: a vectorised test of the probe first, the scalar walk only over
// a probe that holds an eos (documents are hundreds of tokens or more).
inline constexpr int64_t EOS_PROBE = 64;

// How many of p[0:n] equal eos.
template <class T>
__attribute__((always_inline)) inline int64_t count_eos(const T* p, int64_t n, T eos) {
    int64_t total = 0;
    for (int64_t lo = 0; lo < n; lo += EOS_BLOCK) {
        const int64_t hi = std::min(lo + EOS_BLOCK, n);
        uint32_t c = 0;
        for (int64_t i = lo; i < hi; ++i) c += static_cast<uint32_t>(p[i] == eos);
        total += c;
    }
    return total;
}

// Write i + 1 for every i in [lo, hi) with p[i] == eos to out, in order; returns how many.
template <class T>
__attribute__((always_inline)) inline int64_t fill_eos(const T* p, int64_t lo, int64_t hi, T eos,
                                                       int64_t* out) {
    int64_t k = 0;
    for (int64_t b = lo; b < hi; b += EOS_PROBE) {
        const int64_t e = std::min(b + EOS_PROBE, hi);
        uint8_t any = 0;
        for (int64_t i = b; i < e; ++i) any |= static_cast<uint8_t>(p[i] == eos);
        if (any == 0) continue;
        for (int64_t i = b; i < e; ++i)
            if (p[i] == eos) out[k++] = i + 1;
    }
    return k;
}

// The first item of a gather that breaks a rule, and which rule (GATHER_OK when none does).
enum GatherRule {
    GATHER_OK = 0,
    GATHER_NEGATIVE_LENGTH,
    GATHER_NEGATIVE_START,
    GATHER_PAST_TOKENS,   // starts[k] + lengths[k] > tokens
    GATHER_NEGATIVE_DEST,
    GATHER_OVERLAP,       // dest[k] < dest[k - 1] + lengths[k - 1]
    GATHER_PAST_OUT,      // dest[k] + lengths[k] > out
};

struct GatherCheck {
    int64_t item;
    GatherRule rule;
};

// Every rule of gather_tokens over the n items, in item order, before anything is written.
inline GatherCheck check_gather(const int64_t* starts, const int64_t* lengths,
                                const int64_t* dest, int64_t n, int64_t tokens, int64_t out) {
    int64_t end = 0;  // where the previous item's copy ends in out
    for (int64_t k = 0; k < n; ++k) {
        const int64_t len = lengths[k], s = starts[k], d = dest[k];
        if (len < 0) return {k, GATHER_NEGATIVE_LENGTH};
        if (s < 0) return {k, GATHER_NEGATIVE_START};
        if (s > tokens - len) return {k, GATHER_PAST_TOKENS};  // tokens - len >= -max: no wrap
        if (d < 0) return {k, GATHER_NEGATIVE_DEST};
        if (d < end) return {k, GATHER_OVERLAP};
        if (d > out - len) return {k, GATHER_PAST_OUT};
        end = d + len;
    }
    return {-1, GATHER_OK};
}

// The first item (in order) holding a token outside [lo, hi], or -1 (S: a type int64 holds).
// Per item a min/max reduction the compiler vectorises.
template <class S>
int64_t first_out_of_range(const S* src, const int64_t* starts, const int64_t* lengths, int64_t n,
                           int64_t lo, int64_t hi) {
    for (int64_t k = 0; k < n; ++k) {
        const S* p = src + starts[k];
        S mn = std::numeric_limits<S>::max(), mx = std::numeric_limits<S>::lowest();
        for (int64_t t = 0; t < lengths[k]; ++t) {
            mn = std::min(mn, p[t]);
            mx = std::max(mx, p[t]);
        }
        if (lengths[k] > 0 && (static_cast<int64_t>(mn) < lo || static_cast<int64_t>(mx) > hi))
            return k;
    }
    return -1;
}

// out[dest[k] : dest[k] + lengths[k]] = src[starts[k] : ...] converted to O, and pad in every
// entry of out[0:size] no item covers. The items are checked (check_gather, and their values fit
// O); the copy loops have no branch per token, the gaps are filled apart from them.
template <class S, class O>
__attribute__((always_inline)) inline void gather_body(const S* src, const int64_t* starts,
                                                       const int64_t* lengths,
                                                       const int64_t* dest, int64_t n, O* out,
                                                       int64_t size, O pad) {
    // ask for the first lines of every item first: independent misses, kept in flight together
    for (int64_t k = 0; k < n; ++k) {
        const int64_t step = std::max<int64_t>(64 / static_cast<int64_t>(sizeof(S)), 1);
        const int64_t ahead = std::min<int64_t>(lengths[k], 64 * step);
        for (int64_t t = 0; t < ahead; t += step) __builtin_prefetch(src + starts[k] + t);
    }
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t d = dest[k], len = lengths[k];
        std::fill(out + at, out + d, pad);
        const S* p = src + starts[k];
        O* o = out + d;
        for (int64_t t = 0; t < len; ++t) o[t] = static_cast<O>(p[t]);
        at = d + len;
    }
    std::fill(out + at, out + size, pad);
}

// out[0:total] = arange(start, start + lengths[0]), arange(start, start + lengths[1]), ...
// (the lengths checked: non-negative, summing to total, start + length - 1 within int64).
template <class L>
void segment_positions(const L* lengths, int64_t n, int64_t start, int64_t* out) {
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t len = static_cast<int64_t>(lengths[k]);
        int64_t* o = out + at;
        for (int64_t t = 0; t < len; ++t) o[t] = start + t;
        at += len;
    }
}

}  // namespace padless
