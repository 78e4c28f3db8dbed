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

// numpy's SeedSequence(entropy).generate_state(1, np.uint64) for entropy given as its uint32 words
// (numpy/random/bit_generator.pyx: a pool of four words, hashmix and mix, then one draw of two
// words, little-endian): the key of a stream without importing numpy.random (16 ms of start-up).
inline uint64_t seed_sequence_key(const uint32_t* entropy, int64_t n) {
    constexpr uint32_t INIT_A = 0x43b0d7e5, MULT_A = 0x931e8875, INIT_B = 0x8b51f9dd,
                       MULT_B = 0x58f38ded, MIX_L = 0xca01f9dd, MIX_R = 0x4973f715;
    constexpr int POOL = 4;
    uint32_t hash_const = INIT_A;
    auto hashmix = [&hash_const](uint32_t value) {
        value ^= hash_const;
        hash_const *= MULT_A;
        value *= hash_const;
        return value ^ (value >> 16);
    };
    auto mix = [](uint32_t x, uint32_t y) {
        uint32_t result = MIX_L * x - MIX_R * y;
        return result ^ (result >> 16);
    };
    uint32_t pool[POOL];
    for (int i = 0; i < POOL; ++i) pool[i] = hashmix(i < n ? entropy[i] : 0);
    for (int src = 0; src < POOL; ++src)
        for (int dst = 0; dst < POOL; ++dst)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
    for (int64_t src = POOL; src < n; ++src)
        for (int dst = 0; dst < POOL; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
    uint32_t out[2];
    hash_const = INIT_B;
    for (int i = 0; i < 2; ++i) {
        uint32_t value = pool[i % POOL] ^ hash_const;
        hash_const *= MULT_B;
        value *= hash_const;
        out[i] = value ^ (value >> 16);
    }
    return static_cast<uint64_t>(out[0]) | (static_cast<uint64_t>(out[1]) << 32);
}

// The key of stream (seed, epoch, stream): SeedSequence([seed, epoch, stream]), each value taken
// as numpy takes an int (its 32-bit words, least significant first; 0 is one word).
inline uint64_t stream_key(uint64_t seed, uint64_t epoch, uint64_t stream) {
    const uint64_t values[3] = {seed, epoch, stream};
    uint32_t words[6];
    int64_t n = 0;
    for (uint64_t value : values) {
        do {
            words[n++] = static_cast<uint32_t>(value & MASK32);
            value >>= 32;
        } while (value != 0);
    }
    return seed_sequence_key(words, n);
}

}  // namespace padless
