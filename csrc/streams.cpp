// The streams family's bindings: one token-budget round over a stream buffer (streams.hpp).
#include "streams.hpp"

#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

template <class K, class T>
nb::tuple budget_round_py(In<K> keys, int64_t span, In<T> sizes, In<bool> late,
                          int64_t max_tokens, int64_t max_sentences, int64_t multiple, bool final,
                          double target) {
    const char* kernel = "budget_round";
    int64_t n = static_cast<int64_t>(keys.shape(0));
    if (static_cast<int64_t>(sizes.shape(0)) != n || static_cast<int64_t>(late.shape(0)) != n)
        throw nb::index_error("budget_round: sizes and late need one entry per key");
    check_scalar(kernel, "span", span, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_memory(kernel, "span", span, 16);  // a counting sort's start and fill per key
    check_limit(kernel, "max_tokens", max_tokens);
    check_limit(kernel, "max_sentences", max_sentences);
    check_scalar(kernel, "multiple", multiple, 1, INT64_MAX_, "must be >= 1");
    if (!(target >= 0.0)) refuse(kernel, named("target", target) + " must be >= 0");
    BudgetRound r;
    {
        nb::gil_scoped_release nogil;
        r = budget_round(keys.data(), n, span, sizes.data(), late.data(), max_tokens,
                         max_sentences, multiple, final, target);
    }
    if (!r.keys_ok) throw nb::value_error("budget_round: keys must be in [0, span)");
    return nb::make_tuple(to_numpy(std::move(r.order)), to_numpy(std::move(r.ends)),
                          to_numpy(std::move(r.real)), to_numpy(std::move(r.padded)),
                          to_numpy(std::move(r.leave)));
}

}  // namespace

void bind_streams(nb::module_& m) {
    // keys are the lengths themselves (the sizes' dtype) or int64 ranks / composite keys
#define DEF_ROUND(K, T)                                                                          \
    m.def("budget_round", &budget_round_py<K, T>, nb::arg("keys"), nb::arg("span"),              \
          nb::arg("sizes"), nb::arg("late"), nb::arg("max_tokens"), nb::arg("max_sentences"),     \
          nb::arg("multiple"), nb::arg("final"), nb::arg("target"));
#define DEF(T) DEF_ROUND(int64_t, T)
    PADLESS_FOR_SIZES(DEF)
#undef DEF
    DEF_ROUND(int32_t, int32_t)
    DEF_ROUND(uint32_t, uint32_t)
    DEF_ROUND(uint16_t, uint16_t)
#undef DEF_ROUND
}

}  // namespace padless
