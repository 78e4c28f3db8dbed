// Int64 arithmetic on sizes, counts and budgets (all >= 0) that never wraps around: the twin of
// padless/_kernels/_sat.py. Each is one add or multiply with its overflow flag.
#pragma once

#include <cstdint>
#include <limits>

namespace padless {

inline constexpr int64_t INT64_MAX_ = std::numeric_limits<int64_t>::max();

// count × size > limit, exactly, for non-negative operands (an overflowing product is at least
// 2**63, so it exceeds every limit).
inline bool mul_exceeds(int64_t count, int64_t size, int64_t limit) {
    int64_t product;
    return __builtin_mul_overflow(count, size, &product) || product > limit;
}

// min(a + b, INT64_MAX) for non-negative a, b.
inline int64_t sat_add(int64_t a, int64_t b) {
    int64_t sum;
    return __builtin_add_overflow(a, b, &sum) ? INT64_MAX_ : sum;
}

// min(a × b, INT64_MAX) for non-negative a, b.
inline int64_t sat_mul(int64_t a, int64_t b) {
    int64_t product;
    return __builtin_mul_overflow(a, b, &product) ? INT64_MAX_ : product;
}

}  // namespace padless
