// The ingest family's bindings: eos_offsets (on up to `threads` threads), gather_tokens and
// segment_positions (see ingest.hpp and padless/_kernels/ingest.py).
//
// The token arrays come as one array argument of any dtype, dispatched on here (one binding, not
// one overload per dtype pair): tokens of uint8, int8, int16, uint16, int32, uint32 or int64,
// gathered into int64 or int32. `out` is written in place, never a converted copy.
#include "ingest.hpp"

#include <limits>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "dtypes.hpp"

namespace padless {
namespace {

// Tokens per thread below which eos_offsets does not split its input further.
constexpr int64_t EOS_SPLIT = int64_t(1) << 20;
constexpr int64_t MAX_THREADS = 64;

// f(p) for p in [0, parts): parts 1.. on threads of their own, part 0 on this one (a thread that
// cannot start runs its part here). f must not throw.
template <class F>
void run_parts(int64_t parts, const F& f) {
    std::vector<std::thread> helpers;
    helpers.reserve(static_cast<size_t>(parts));
    for (int64_t p = 1; p < parts; ++p) {
        try {
            helpers.emplace_back([&f, p] { f(p); });
        } catch (const std::system_error&) {
            f(p);
        }
    }
    f(0);
    for (auto& t : helpers) t.join();
}

// The scans compiled for the baseline and for AVX2, picked at run time (as text.cpp does).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PADLESS_INGEST_X86 1
#endif

template <class T>
int64_t count_base(const T* p, int64_t n, T eos) {
    return count_eos(p, n, eos);
}
template <class T>
int64_t fill_base(const T* p, int64_t lo, int64_t hi, T eos, int64_t* out) {
    return fill_eos(p, lo, hi, eos, out);
}
template <class S, class O>
void gather_base(const S* src, const int64_t* starts, const int64_t* lengths, const int64_t* dest,
                 int64_t n, O* out, int64_t size, O pad) {
    gather_body(src, starts, lengths, dest, n, out, size, pad);
}

#ifdef PADLESS_INGEST_X86
template <class T>
__attribute__((target("avx2"))) int64_t count_avx2(const T* p, int64_t n, T eos) {
    return count_eos(p, n, eos);
}
template <class T>
__attribute__((target("avx2"))) int64_t fill_avx2(const T* p, int64_t lo, int64_t hi, T eos,
                                                  int64_t* out) {
    return fill_eos(p, lo, hi, eos, out);
}
template <class S, class O>
__attribute__((target("avx2"))) void gather_avx2(const S* src, const int64_t* starts,
                                                 const int64_t* lengths, const int64_t* dest,
                                                 int64_t n, O* out, int64_t size, O pad) {
    gather_body(src, starts, lengths, dest, n, out, size, pad);
}
template <class S, class O>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void gather_avx512(
    const S* src, const int64_t* starts, const int64_t* lengths, const int64_t* dest, int64_t n,
    O* out, int64_t size, O pad) {
    gather_body(src, starts, lengths, dest, n, out, size, pad);
}
#endif

bool has_avx2() {
#ifdef PADLESS_INGEST_X86
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

bool has_avx512() {
#ifdef PADLESS_INGEST_X86
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

template <class T>
Buffer<int64_t> eos_offsets(const T* p, int64_t n, T eos, int64_t threads) {
    const bool avx2 = has_avx2();
    const int64_t parts = std::max<int64_t>(1, std::min(threads, n / EOS_SPLIT));
    std::vector<int64_t> cuts(static_cast<size_t>(parts + 1)), found(static_cast<size_t>(parts));
    for (int64_t q = 0; q <= parts; ++q) cuts[q] = (n / parts) * q + std::min(q, n % parts);
    run_parts(parts, [&](int64_t q) {
        const T* at = p + cuts[q];
        const int64_t m = cuts[q + 1] - cuts[q];
#ifdef PADLESS_INGEST_X86
        if (avx2) {
            found[q] = count_avx2(at, m, eos);
            return;
        }
#endif
        found[q] = count_base(at, m, eos);
    });
    // 0, then the end of every document: after each eos, and n if the last document has none
    std::vector<int64_t> first(static_cast<size_t>(parts));
    int64_t total = 1;
    for (int64_t q = 0; q < parts; ++q) {
        first[q] = total;
        total += found[q];
    }
    const bool tail = n > 0 && p[n - 1] != eos;
    Buffer<int64_t> out(total + (tail ? 1 : 0));
    out[0] = 0;
    if (tail) out[total] = n;
    run_parts(parts, [&](int64_t q) {
#ifdef PADLESS_INGEST_X86
        if (avx2) {
            fill_avx2(p, cuts[q], cuts[q + 1], eos, out.get() + first[q]);
            return;
        }
#endif
        fill_base(p, cuts[q], cuts[q + 1], eos, out.get() + first[q]);
    });
    return out;
}

Out<int64_t> eos_offsets_py(AnyIn tokens, int64_t eos, int64_t threads) {
    if (threads < 1)
        throw nb::value_error(
            ("eos_offsets: threads must be >= 1, got " + std::to_string(threads)).c_str());
    threads = std::min(threads, MAX_THREADS);
    const int64_t n = static_cast<int64_t>(tokens.shape(0));
    Buffer<int64_t> out;
    on_token_type(tokens.dtype(), "eos_offsets: tokens", [&](auto t) {
        using T = decltype(t);
        if (!fits<T>(eos))
            throw nb::value_error(("eos_offsets: eos must be a token of the tokens' dtype " +
                                   dtype_name(tokens.dtype()) + ", in " + range_of<T>() +
                                   ", got " + std::to_string(eos))
                                      .c_str());
        const T* p = static_cast<const T*>(tokens.data());
        nb::gil_scoped_release nogil;
        out = eos_offsets(p, n, static_cast<T>(eos), threads);
    });
    return to_numpy(std::move(out));
}

std::string item_rule(const GatherCheck& c, const int64_t* starts, const int64_t* lengths,
                      const int64_t* dest, int64_t tokens, int64_t out) {
    const int64_t k = c.item;
    const std::string at = "[" + std::to_string(k) + "]";
    const std::string item = "gather_tokens: item " + std::to_string(k) + ": ";
    switch (c.rule) {
        case GATHER_NEGATIVE_LENGTH:
            return item + "lengths" + at + " must be >= 0, got " + std::to_string(lengths[k]);
        case GATHER_NEGATIVE_START:
            return item + "starts" + at + " must be >= 0, got " + std::to_string(starts[k]);
        case GATHER_PAST_TOKENS:
            return item + "starts" + at + " + lengths" + at + " = " + std::to_string(starts[k]) +
                   " + " + std::to_string(lengths[k]) + " must be <= the " +
                   std::to_string(tokens) + " tokens";
        case GATHER_NEGATIVE_DEST:
            return item + "dest" + at + " must be >= 0, got " + std::to_string(dest[k]);
        case GATHER_OVERLAP:
            return item + "dest" + at + " = " + std::to_string(dest[k]) +
                   " must be >= the end of item " + std::to_string(k - 1) + ", " +
                   std::to_string(dest[k - 1] + lengths[k - 1]) +
                   " (dest must ascend without overlap)";
        case GATHER_PAST_OUT:
            return item + "dest" + at + " + lengths" + at + " = " + std::to_string(dest[k]) +
                   " + " + std::to_string(lengths[k]) + " must be <= out's " +
                   std::to_string(out) + " entries";
        case GATHER_OK:
            break;
    }
    return "";
}

template <class S, class O>
void gather_typed(const S* src, const int64_t* starts, const int64_t* lengths,
                  const int64_t* dest, int64_t n, O* out, int64_t size, O pad) {
#ifdef PADLESS_INGEST_X86
    if (has_avx512()) return gather_avx512(src, starts, lengths, dest, n, out, size, pad);
    if (has_avx2()) return gather_avx2(src, starts, lengths, dest, n, out, size, pad);
#endif
    gather_base(src, starts, lengths, dest, n, out, size, pad);
}

void gather_tokens_py(AnyIn tokens, In<int64_t> starts, In<int64_t> lengths, In<int64_t> dest,
                      AnyOut out, int64_t pad) {
    const int64_t n = static_cast<int64_t>(starts.shape(0));
    if (static_cast<int64_t>(lengths.shape(0)) != n || static_cast<int64_t>(dest.shape(0)) != n)
        throw nb::value_error(("gather_tokens: starts, lengths and dest must have the same "
                               "size, got " +
                               std::to_string(n) + ", " + std::to_string(lengths.shape(0)) +
                               " and " + std::to_string(dest.shape(0)))
                                  .c_str());
    const bool wide = out.dtype() == nb::dtype<int64_t>();
    if (!wide && out.dtype() != nb::dtype<int32_t>())
        throw nb::type_error(
            ("gather_tokens: out must be an int64 or int32 array, got " + dtype_name(out.dtype()))
                .c_str());
    if (!wide && !fits<int32_t>(pad))
        throw nb::value_error(
            ("gather_tokens: pad must fit out's dtype int32, in " + range_of<int32_t>() + ", got " +
             std::to_string(pad))
                .c_str());
    const int64_t size = static_cast<int64_t>(out.shape(0));
    const int64_t count = static_cast<int64_t>(tokens.shape(0));
    GatherCheck c;
    {
        nb::gil_scoped_release nogil;
        c = check_gather(starts.data(), lengths.data(), dest.data(), n, count, size);
    }
    if (c.rule != GATHER_OK)
        throw nb::value_error(
            item_rule(c, starts.data(), lengths.data(), dest.data(), count, size).c_str());
    on_token_type(tokens.dtype(), "gather_tokens: tokens", [&](auto s) {
        using S = decltype(s);
        const S* src = static_cast<const S*>(tokens.data());
        if (wide) {
            int64_t* o = static_cast<int64_t*>(out.data());
            nb::gil_scoped_release nogil;
            gather_typed<S, int64_t>(src, starts.data(), lengths.data(), dest.data(), n, o, size,
                                     pad);
            return;
        }
        if constexpr (std::is_same<S, int64_t>::value || std::is_same<S, uint32_t>::value) {
            int64_t bad;
            {
                nb::gil_scoped_release nogil;
                bad = first_out_of_range(src, starts.data(), lengths.data(), n,
                                         std::numeric_limits<int32_t>::lowest(),
                                         std::numeric_limits<int32_t>::max());
            }
            if (bad >= 0)
                throw nb::value_error(("gather_tokens: item " + std::to_string(bad) +
                                       " holds a token outside int32's range " +
                                       range_of<int32_t>() + ": gather " +
                                       dtype_name(tokens.dtype()) + " tokens into int64")
                                          .c_str());
        }
        int32_t* o = static_cast<int32_t*>(out.data());
        nb::gil_scoped_release nogil;
        gather_typed<S, int32_t>(src, starts.data(), lengths.data(), dest.data(), n, o, size,
                                 static_cast<int32_t>(pad));
    });
}

template <class L>
void segment_positions_py(In<L> lengths, InOut<int64_t> out, int64_t start) {
    const int64_t n = static_cast<int64_t>(lengths.shape(0));
    const L* lens = lengths.data();
    const int64_t limit = std::numeric_limits<int64_t>::max();
    int64_t total = 0, bad = -1, longest = 0;
    {
        nb::gil_scoped_release nogil;
        for (int64_t k = 0; k < n; ++k) {
            const int64_t len = static_cast<int64_t>(lens[k]);
            if (len < 0 || len > limit - total) {
                bad = k;
                break;
            }
            total += len;
            longest = std::max(longest, len);
        }
    }
    if (bad >= 0) {
        const int64_t len = static_cast<int64_t>(lens[bad]);
        throw nb::value_error((len < 0 ? "segment_positions: lengths[" + std::to_string(bad) +
                                             "] must be >= 0, got " + std::to_string(len)
                                       : std::string("segment_positions: the lengths' sum "
                                                     "exceeds int64"))
                                  .c_str());
    }
    if (total != static_cast<int64_t>(out.shape(0)))
        throw nb::value_error(("segment_positions: out must have sum(lengths) = " +
                               std::to_string(total) + " entries, got " +
                               std::to_string(out.shape(0)))
                                  .c_str());
    if (longest > 0 && start > limit - (longest - 1))
        throw nb::value_error(("segment_positions: start + the longest length - 1 = " +
                               std::to_string(start) +
                               " + " + std::to_string(longest - 1) + " exceeds int64")
                                  .c_str());
    nb::gil_scoped_release nogil;
    segment_positions(lens, n, start, out.data());
}

}  // namespace

void bind_ingest(nb::module_& m) {
    m.def("eos_offsets", &eos_offsets_py, nb::arg("tokens"), nb::arg("eos"), nb::arg("threads"));
    m.def("gather_tokens", &gather_tokens_py, nb::arg("tokens"), nb::arg("starts"),
          nb::arg("lengths"), nb::arg("dest"), nb::arg("out").noconvert(), nb::arg("pad"));
#define DEF(L)                                                                                 \
    m.def("segment_positions", &segment_positions_py<L>, nb::arg("lengths"),                   \
          nb::arg("out").noconvert(), nb::arg("start"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
}

}  // namespace padless
