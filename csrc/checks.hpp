// What a binding checks before it trusts its arguments, and how it says no.
//
// A binding is the boundary between Python and a kernel that reads and writes through raw
// pointers: it checks sizes against each other, offsets against the arrays they point into,
// keys against their span and items against their budgets, then calls the kernel. A refusal is
// a ValueError "<kernel>: <the parameter, its value or position, and the rule>", raised before
// the GIL is released and before anything is written. The checks are one pass over an input at
// most, and only where the kernel itself is at least that much work; a check that needs a
// position inside the kernel's own loop is made there, once the rule is broken, never per item.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common.hpp"
#include "sat.hpp"

namespace padless {

// The largest count, size, span or capacity a binding takes: a few of them added up never wrap
// an int64 (and an array of that many entries could not be allocated anyway).
inline constexpr int64_t MAX_COUNT = int64_t(1) << 62;

// A ValueError naming the kernel: "<kernel>: <what>".
[[noreturn]] inline void refuse(const char* kernel, const std::string& what) {
    throw nb::value_error((std::string(kernel) + ": " + what).c_str());
}

// A value as text (integers exactly, floats as Python's repr would round them).
inline std::string text(int64_t v) { return std::to_string(v); }
inline std::string text(uint64_t v) { return std::to_string(v); }
inline std::string text(int32_t v) { return std::to_string(v); }
inline std::string text(uint32_t v) { return std::to_string(v); }
inline std::string text(int16_t v) { return std::to_string(v); }
inline std::string text(uint16_t v) { return std::to_string(v); }
inline std::string text(int8_t v) { return std::to_string(v); }
inline std::string text(uint8_t v) { return std::to_string(v); }
inline std::string text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// "name[i] = v"
template <class T>
std::string entry(const char* name, int64_t i, T v) {
    return std::string(name) + "[" + std::to_string(i) + "] = " + text(v);
}

// "name = v"
template <class T>
std::string named(const char* name, T v) {
    return std::string(name) + " = " + text(v);
}

// A scalar argument in [lo, hi]; `rule` says what it must be ("must be >= 0 (0: no limit)").
inline void check_scalar(const char* kernel, const char* name, int64_t v, int64_t lo, int64_t hi,
                         const char* rule) {
    if (v < lo || v > hi) refuse(kernel, named(name, v) + " " + rule);
}

// A limit where 0 means "none" (a budget, a cap on items): >= 0 (it is only compared with).
inline void check_limit(const char* kernel, const char* name, int64_t v) {
    check_scalar(kernel, name, v, 0, INT64_MAX_, "must be >= 0 (0: no limit)");
}

// A float budget where 0 means "no limit": >= 0 and not NaN.
inline void check_float_limit(const char* kernel, const char* name, double v) {
    if (!(v >= 0.0)) refuse(kernel, named(name, v) + " must be >= 0 (0: no limit)");
}

// Two arrays that pair entry for entry.
inline void check_same_size(const char* kernel, const char* a, int64_t a_size, const char* b,
                            int64_t b_size) {
    if (a_size != b_size) {
        refuse(kernel, std::string(b) + " holds " + text(b_size) + " entries, " + a + " " +
                           text(a_size) + " (they pair entry for entry)");
    }
}

// Bounds into an array of `size` entries (`target` names it): every entry at least 0 (exactly
// 0 for the first when `from_zero`), none below the one before, none past `size` (the last
// exactly `size` when `to_end`). One pass over the bounds, the first fault named.
inline void check_bounds(const char* kernel, const char* name, const int64_t* b, int64_t count,
                         const char* target, int64_t size, bool from_zero = false,
                         bool to_end = false) {
    if (count == 0) return;
    if (from_zero && b[0] != 0) refuse(kernel, entry(name, 0, b[0]) + " must be 0");
    if (b[0] < 0) refuse(kernel, entry(name, 0, b[0]) + " is negative (bounds must be >= 0)");
    for (int64_t i = 1; i < count; ++i) {
        if (b[i] < b[i - 1]) {
            refuse(kernel, entry(name, i, b[i]) + " is below " + entry(name, i - 1, b[i - 1]) +
                               " (bounds must not decrease)");
        }
    }
    if (b[count - 1] > size) {
        refuse(kernel, entry(name, count - 1, b[count - 1]) + " is past the end of " + target +
                           " (" + text(size) + " entries)");
    }
    if (to_end && b[count - 1] != size) {
        refuse(kernel, entry(name, count - 1, b[count - 1]) + " must be the size of " + target +
                           " (" + text(size) + ")");
    }
}

}  // namespace padless
