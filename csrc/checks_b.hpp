// Precondition checks for the bindings of the packing, feistel, text, rows, shuffle, collate and
// ingest families. A binding calls them with the GIL held, before it releases it and before it
// writes anything; each refusal is a ValueError (or an IndexError where the binding always gave
// one) whose message starts with the kernel's name and says which argument broke which rule,
// with the value and its position.
//
// The array scans are one pass of a min/max reduction (vectorised by the compiler) over the
// index arrays, never over the tokens or bytes a kernel copies; the first offending position is
// looked for only once the reduction has found that there is one.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "common.hpp"

namespace padless {
namespace checks {

inline constexpr int64_t I64_MAX = std::numeric_limits<int64_t>::max();
inline constexpr int64_t I32_MAX = std::numeric_limits<int32_t>::max();
inline constexpr int64_t U32_MAX = std::numeric_limits<uint32_t>::max();

inline std::string str(int64_t v) { return std::to_string(v); }

// A ValueError "kernel: rule".
[[noreturn]] inline void refuse(const char* kernel, const std::string& rule) {
    throw nb::value_error((std::string(kernel) + ": " + rule).c_str());
}

// An IndexError "kernel: rule" (for the bindings whose range errors were IndexErrors already).
[[noreturn]] inline void refuse_index(const char* kernel, const std::string& rule) {
    throw nb::index_error((std::string(kernel) + ": " + rule).c_str());
}

// A scalar argument within [lo, hi].
inline void in_range(const char* kernel, const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        refuse(kernel, std::string(name) + " = " + str(v) + " must be in [" + str(lo) + ", " +
                           str(hi) + "]");
}

// A scalar argument of at least lo.
inline void at_least(const char* kernel, const char* name, int64_t v, int64_t lo) {
    if (v < lo) refuse(kernel, std::string(name) + " = " + str(v) + " must be >= " + str(lo));
}

// Room in an output of `size` entries for `need` entries written from `from` (the argument
// `from_name`): 0 <= from and from + need <= size, without overflow.
inline void room(const char* kernel, const char* out, int64_t size, const char* from_name,
                 int64_t from, int64_t need) {
    if (from < 0)
        refuse(kernel, std::string(from_name) + " = " + str(from) + " must be >= 0");
    if (from > size - need)
        refuse(kernel, std::string(out) + " has " + str(size) + " entries: no room for " +
                           str(need) + " from " + from_name + " = " + str(from));
}

// An array of at least `needed` entries (`why` says what they are for).
inline void holds(const char* kernel, const char* name, int64_t size, int64_t needed,
                  const std::string& why) {
    if (size < needed)
        refuse(kernel, std::string(name) + " has " + str(size) + " entries, needs at least " +
                           str(needed) + " (" + why + ")");
}

// Two arrays that must have one entry each per item.
inline void same_size(const char* kernel, const char* a, int64_t na, const char* b, int64_t nb_) {
    if (na != nb_)
        refuse(kernel, std::string(a) + " and " + b + " must have the same size, got " + str(na) +
                           " and " + str(nb_));
}

// The value of a[i] as an int64 for messages (a uint64 above int64's range reads as its top).
template <class T>
int64_t as_i64(T v) {
    if constexpr (std::is_unsigned<T>::value && sizeof(T) == 8)
        return v > static_cast<uint64_t>(I64_MAX) ? I64_MAX : static_cast<int64_t>(v);
    else
        return static_cast<int64_t>(v);
}

// The first i of a[0:n] with a[i] outside [lo, hi] (lo <= hi), or -1. One min/max pass; the
// position is looked for only when there is one.
template <class T>
int64_t first_outside(const T* a, int64_t n, int64_t lo, int64_t hi) {
    if (n <= 0) return -1;
    T mn = a[0], mx = a[0];
    for (int64_t i = 1; i < n; ++i) {
        mn = a[i] < mn ? a[i] : mn;
        mx = a[i] > mx ? a[i] : mx;
    }
    auto outside = [lo, hi](T v) {
        if constexpr (std::is_unsigned<T>::value) {
            return (lo > 0 && v < static_cast<uint64_t>(lo)) || hi < 0 ||
                   static_cast<uint64_t>(v) > static_cast<uint64_t>(hi);
        } else {
            return static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi;
        }
    };
    if (!outside(mn) && !outside(mx)) return -1;
    for (int64_t i = 0; i < n; ++i)
        if (outside(a[i])) return i;
    return -1;
}

// Every a[i] of a[0:n] within [lo, hi]; else "kernel: name[i] = v must be in [lo, hi] (why)".
template <class T>
void all_in_range(const char* kernel, const char* name, const T* a, int64_t n, int64_t lo,
                  int64_t hi, const std::string& why, bool index_error = false) {
    const int64_t i = first_outside(a, n, lo, hi);
    if (i < 0) return;
    const std::string rule = std::string(name) + "[" + str(i) + "] = " + str(as_i64(a[i])) +
                             " must be in [" + str(lo) + ", " + str(hi) + "] (" + why + ")";
    if (index_error) refuse_index(kernel, rule);
    refuse(kernel, rule);
}

// a[0:n] non-decreasing; else "kernel: name[i] = v is below name[i-1] = u".
inline void non_decreasing(const char* kernel, const char* name, const int64_t* a, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 1; i < n; ++i) bad |= static_cast<int64_t>(a[i] < a[i - 1]);
    if (bad == 0) return;
    for (int64_t i = 1; i < n; ++i)
        if (a[i] < a[i - 1])
            refuse(kernel, std::string(name) + " must be non-decreasing: " + name + "[" +
                               str(i) + "] = " + str(a[i]) + " < " + name + "[" + str(i - 1) +
                               "] = " + str(a[i - 1]));
}

}  // namespace checks
}  // namespace padless
