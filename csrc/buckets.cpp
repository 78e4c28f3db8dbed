// The buckets family's kernels and their bindings (the kernels are in buckets.hpp).
#include "buckets.hpp"

#include "common.hpp"

namespace padless {
namespace {

template <class T>
Out<int64_t> optimal_cuts_py(In<T> values, In<int64_t> counts, int64_t k) {
    int64_t n = static_cast<int64_t>(values.shape(0));
    if (static_cast<int64_t>(counts.shape(0)) < n) {
        throw std::invalid_argument("optimal_cuts: counts must have one entry per value");
    }
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = optimal_cuts(values.data(), counts.data(), n, k);
    }
    return to_numpy(std::move(out));
}

}  // namespace

void bind_buckets(nb::module_& m) {
#define DEF(T) \
    m.def("optimal_cuts", &optimal_cuts_py<T>, nb::arg("values"), nb::arg("counts"), nb::arg("k"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
}

}  // namespace padless
