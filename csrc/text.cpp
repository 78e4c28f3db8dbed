// The text family: the per-line counter and its binding.
#include "text.hpp"

#include <cstring>

#include "checks_b.hpp"
#include "common.hpp"

namespace padless {

namespace {

// The body of count_lines, compiled once per instruction set below.
__attribute__((always_inline)) inline LineCount count_lines_body(
    const uint8_t* buf, int64_t n, int64_t mode, int64_t* out, int64_t out_size, int64_t n_out,
    int64_t* state, uint8_t* flags, int64_t step) {
    int64_t count = state[0];
    int64_t prev = state[1];
    if (n == 0) return {0, n_out, -1};
    const bool words = mode == TEXT_WHITESPACE;
    if (!words && prev == 1 && buf[0] == 10) count -= 1;  // the last piece ended with a \r\n's \r
    if (!words) prev = 0;
    const uint64_t ones = 0x0101010101010101ULL;
    const int64_t room = out_size - step - 8;
    int64_t lo = 0;
    while (lo < n) {
        if (n_out > room) break;
        const int64_t hi = std::min(lo + step, n);
        const int64_t m = hi - lo;
        const uint8_t* block = buf + lo;
        bool nul = words ? flag_words(block, m, flags, prev == 1)
                         : flag_units(block, m, flags, mode == TEXT_CHARS,
                                      hi < n ? static_cast<int64_t>(buf[hi]) : -1);
        if (nul) {
            // the state is left as it was: the caller refuses the text
            for (int64_t j = lo; j < hi; ++j)
                if (buf[j] == 0) return {j, n_out, j};
        }
        const int64_t used = (m + 7) / 8;
        for (int64_t j = m; j < used * 8; ++j) flags[j] = 0;  // pad bytes count nothing
        for (int64_t w = 0; w < used; ++w) {
            uint64_t v;
            std::memcpy(&v, flags + 8 * w, sizeof v);
            uint64_t counted = v & ones;  // bit 0 of a byte: it counts (a newline never does)
            uint64_t line_ends = (v >> 1) & ones;
            if (line_ends == 0) {
                count += static_cast<int64_t>((counted * ones) >> 56);
                continue;
            }
            // each line end closes the open line with the bytes that count before it
            while (line_ends != 0) {
                const uint64_t below = (line_ends & (0 - line_ends)) - 1;
                count += static_cast<int64_t>(((counted & below) * ones) >> 56);
                out[n_out++] = count;
                count = 0;
                counted &= ~below;
                line_ends &= line_ends - 1;
            }
            count += static_cast<int64_t>((counted * ones) >> 56);
        }
        if (words) prev = text_space(buf[hi - 1]);
        lo = hi;
    }
    // a \r ending the piece counted; undone if the next piece starts with \n
    if (!words && lo == n) prev = buf[n - 1] == 13;
    state[0] = count;
    state[1] = prev;
    return {lo, n_out, -1};
}

LineCount count_lines_base(const uint8_t* buf, int64_t n, int64_t mode, int64_t* out,
                           int64_t out_size, int64_t n_out, int64_t* state, uint8_t* flags,
                           int64_t step) {
    return count_lines_body(buf, n, mode, out, out_size, n_out, state, flags, step);
}

// x86-64 builds target the baseline (SSE2); the flag pass runs faster with AVX2, as numba
// compiled it for the host.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PADLESS_TEXT_X86 1
__attribute__((target("avx2"))) LineCount count_lines_avx2(const uint8_t* buf, int64_t n,
                                                           int64_t mode, int64_t* out,
                                                           int64_t out_size, int64_t n_out,
                                                           int64_t* state, uint8_t* flags,
                                                           int64_t step) {
    return count_lines_body(buf, n, mode, out, out_size, n_out, state, flags, step);
}
#endif

}  // namespace

LineCount count_lines(const uint8_t* buf, int64_t n, int64_t mode, int64_t* out,
                      int64_t out_size, int64_t n_out, int64_t* state, uint8_t* flags,
                      int64_t step) {
#ifdef PADLESS_TEXT_X86
    if (__builtin_cpu_supports("avx2"))
        return count_lines_avx2(buf, n, mode, out, out_size, n_out, state, flags, step);
#endif
    return count_lines_base(buf, n, mode, out, out_size, n_out, state, flags, step);
}

namespace {

nb::tuple count_lines_py(In<uint8_t> buf, int64_t mode, InOut<int64_t> out, int64_t n_out,
                         InOut<int64_t> state, InOut<uint8_t> flags) {
    const char* k = "count_lines";
    const int64_t step = static_cast<int64_t>(flags.shape(0));
    if (step == 0 || step % 8 != 0)
        checks::refuse(k, "flags must be a scratch array of a positive multiple of 8 bytes, got " +
                              checks::str(step));
    if (state.shape(0) < 2)
        checks::refuse(k, "state must hold 2 entries (see new_state), got " +
                              checks::str(static_cast<int64_t>(state.shape(0))));
    checks::in_range(k, "mode", mode, TEXT_WHITESPACE, TEXT_BYTES);
    // the open line's count grows by at most one per byte of buf
    const int64_t bytes = static_cast<int64_t>(buf.shape(0));
    checks::in_range(k, "state[0] (the open line's count)", state.data()[0], 0,
                     checks::I64_MAX - bytes);
    checks::in_range(k, "state[1] (the last byte was whitespace / a \\r)", state.data()[1], 0, 1);
    const int64_t size = static_cast<int64_t>(out.shape(0));
    checks::in_range(k, "n_out", n_out, 0, size);
    LineCount r;
    {
        nb::gil_scoped_release nogil;
        r = count_lines(buf.data(), bytes, mode, out.data(), size,
                        n_out, state.data(), flags.data(), step);
    }
    return nb::make_tuple(r.done, r.n_out, r.nul);
}

}  // namespace

void bind_text(nb::module_& m) {
    m.def("count_lines", &count_lines_py, nb::arg("buf"), nb::arg("mode"),
          nb::arg("out").noconvert(), nb::arg("n_out"), nb::arg("state").noconvert(),
          nb::arg("flags").noconvert());
}

}  // namespace padless
