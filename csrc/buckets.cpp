// The buckets family's kernels and their bindings (the kernels are in buckets.hpp).
#include "buckets.hpp"

#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

template <class T>
Out<int64_t> optimal_cuts_py(In<T> values, In<int64_t> counts, int64_t k) {
    const char* kernel = "optimal_cuts";
    int64_t n = static_cast<int64_t>(values.shape(0));
    if (static_cast<int64_t>(counts.shape(0)) != n) {
        throw std::invalid_argument("optimal_cuts: counts must have one entry per value");
    }
    check_scalar(kernel, "k", k, 1, INT64_MAX_, "must be >= 1");
    // the split table holds value indices as int32
    if (n >= (int64_t(1) << 31)) refuse(kernel, "values holds 2**31 or more sizes");
    // sorted distinct non-negative values (costs are products of them), counts of items
    for (int64_t j = 0; j < n; ++j) {
        if (static_cast<int64_t>(values(j)) < 0) {
            refuse(kernel, entry("values", j, values(j)) + " is negative");
        }
        if (j > 0 && !(values(j - 1) < values(j))) {
            refuse(kernel, entry("values", j, values(j)) + " is not above " +
                               entry("values", j - 1, values(j - 1)) +
                               " (values must be sorted and distinct)");
        }
        if (counts(j) < 0) refuse(kernel, entry("counts", j, counts(j)) + " is negative");
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
