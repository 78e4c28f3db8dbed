// splitmix64 streams and exact bounded draws (Lemire's multiply-and-reject): the twin of
// padless/_kernels/rng.py and padless/_splitmix.py (same constants, same numbers).
#pragma once

#include <cstdint>

namespace padless {

inline constexpr uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL;
inline constexpr uint64_t MIX1 = 0xBF58476D1CE4E5B9ULL;
inline constexpr uint64_t MIX2 = 0x94D049BB133111EBULL;
inline constexpr uint64_t MASK32 = 0xFFFFFFFFULL;

// splitmix64's output function (a bijection of uint64).
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * MIX1;
    z = (z ^ (z >> 27)) * MIX2;
    return z ^ (z >> 31);
}

// Advance the counter `state` and return the next output.
inline uint64_t next64(uint64_t& state) {
    state += GOLDEN;
    return mix64(state);
}

// Uniform int in [0, bound) for 1 <= bound < 2**32 (Lemire's method).
inline int64_t below(uint64_t& state, uint64_t bound) {
    uint64_t m = (next64(state) >> 32) * bound;
    uint64_t low = m & MASK32;
    if (low < bound) {
        uint64_t limit = ((MASK32 + 1) - bound) % bound;
        while (low < limit) {
            m = (next64(state) >> 32) * bound;
            low = m & MASK32;
        }
    }
    return static_cast<int64_t>(m >> 32);
}

// 64-bit order-sensitive hash of int values, four lanes (lane j chains positions i = j mod 4);
// each value enters as its int64 bit pattern taken as uint64.
template <class T>
uint64_t hash_ints(const T* values, int64_t n, uint64_t seed) {
    uint64_t base = seed ^ static_cast<uint64_t>(n);
    uint64_t h0 = base, h1 = base + GOLDEN, h2 = base + MIX1, h3 = base + MIX2;
    int64_t quads = n / 4;
    for (int64_t q = 0; q < quads; ++q) {
        const T* v = values + 4 * q;
        h0 = mix64(static_cast<uint64_t>(v[0]) + h0 + GOLDEN);
        h1 = mix64(static_cast<uint64_t>(v[1]) + h1 + GOLDEN);
        h2 = mix64(static_cast<uint64_t>(v[2]) + h2 + GOLDEN);
        h3 = mix64(static_cast<uint64_t>(v[3]) + h3 + GOLDEN);
    }
    for (int64_t i = 4 * quads; i < n; ++i) {
        h0 = mix64(static_cast<uint64_t>(values[i]) + h0 + GOLDEN);
    }
    uint64_t h = mix64(h0 + GOLDEN);
    h = mix64(h ^ h1);
    h = mix64(h ^ h2);
    return mix64(h ^ h3);
}

}  // namespace padless
