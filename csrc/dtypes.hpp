// Token arrays of any integer dtype, taken as one array argument and dispatched on at run time
// (one binding, not one overload per dtype pair): the families that read token files share it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "common.hpp"

namespace padless {

using AnyIn = nb::ndarray<nb::ro, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using AnyOut = nb::ndarray<nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// "uint16", "int64", "float32"... for messages.
inline std::string dtype_name(nb::dlpack::dtype d) {
    const auto code = static_cast<nb::dlpack::dtype_code>(d.code);
    const char* kind = code == nb::dlpack::dtype_code::Int     ? "int"
                       : code == nb::dlpack::dtype_code::UInt  ? "uint"
                       : code == nb::dlpack::dtype_code::Float ? "float"
                       : code == nb::dlpack::dtype_code::Bool  ? "bool"
                                                               : "other";
    return kind + std::to_string(d.bits);
}

// f(T{}) for the token type T of the array's dtype, else a TypeError naming `name`.
template <class F>
void on_token_type(nb::dlpack::dtype d, const char* name, F&& f) {
    if (d == nb::dtype<uint16_t>()) return f(uint16_t{});
    if (d == nb::dtype<int32_t>()) return f(int32_t{});
    if (d == nb::dtype<uint32_t>()) return f(uint32_t{});
    if (d == nb::dtype<int64_t>()) return f(int64_t{});
    if (d == nb::dtype<uint8_t>()) return f(uint8_t{});
    if (d == nb::dtype<int8_t>()) return f(int8_t{});
    if (d == nb::dtype<int16_t>()) return f(int16_t{});
    throw nb::type_error((std::string(name) +
                          " must be an array of uint8, int8, int16, uint16, int32, uint32 or "
                          "int64 tokens, got " +
                          dtype_name(d))
                             .c_str());
}

// Whether v is a value of T.
template <class T>
bool fits(int64_t v) {
    if (v < static_cast<int64_t>(std::numeric_limits<T>::lowest())) return false;
    return v < 0 ||
           static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}

// "[lowest, max]" of T, for messages.
template <class T>
std::string range_of() {
    return "[" + std::to_string(static_cast<int64_t>(std::numeric_limits<T>::lowest())) + ", " +
           std::to_string(static_cast<uint64_t>(std::numeric_limits<T>::max())) + "]";
}

}  // namespace padless
