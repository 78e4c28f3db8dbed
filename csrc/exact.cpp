// The exact family's kernels and their bindings (the kernels are in exact.hpp).
#include "exact.hpp"

#include <stdexcept>
#include <string>

#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

nb::tuple exact_split_py(InOut<int64_t> order, In<int64_t> starts, In<int64_t> run_size,
                         int64_t mode) {
    const char* kernel = "exact_split";
    const int64_t runs = static_cast<int64_t>(starts.shape(0)) - 1;
    // the runs cover order exactly (an item outside every run would be left unwritten in rest)
    if (runs < 0) refuse(kernel, "starts is empty (it holds runs + 1 bounds)");
    check_bounds(kernel, "starts", starts.data(), runs + 1, "order",
                 static_cast<int64_t>(order.shape(0)), true, true);
    if (static_cast<int64_t>(run_size.shape(0)) != runs) {
        refuse(kernel, "run_size holds " + text(static_cast<int64_t>(run_size.shape(0))) +
                           " sizes for " + text(runs) + " runs (one per run)");
    }
    for (int64_t r = 0; r < runs; ++r) {
        if (run_size(r) < 0) refuse(kernel, entry("run_size", r, run_size(r)) + " is negative");
    }
    check_scalar(kernel, "mode", mode, 0, 2, "must be 0, 1 or 2");
    ExactSplit out;
    {
        nb::gil_scoped_release nogil;
        out = exact_split(order.data(), static_cast<int64_t>(order.shape(0)), starts.data(),
                          runs, run_size.data(), mode);
    }
    return nb::make_tuple(out.kept, to_numpy(std::move(out.ends)), to_numpy(std::move(out.rest)),
                          to_numpy(std::move(out.rest_run)));
}

// Batch ends of sorted sizes under per-size caps, by `kernel` (capped_ends or
// least_padding_ends), after checking caps has one entry per size.
template <class T, class Kernel>
Out<int64_t> capped_kernel_py(const char* name, In<T> sizes, In<int64_t> caps, Kernel kernel) {
    check_same_size(name, "sizes", static_cast<int64_t>(sizes.shape(0)), "caps",
                    static_cast<int64_t>(caps.shape(0)));
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = kernel(sizes.data(), caps.data(), static_cast<int64_t>(sizes.shape(0)));
    }
    return to_numpy(std::move(out));
}

template <class T>
Out<int64_t> capped_ends_py(In<T> sizes, In<int64_t> caps) {
    return capped_kernel_py("capped_ends", sizes, caps, capped_ends<T>);
}

template <class T>
Out<int64_t> least_padding_ends_py(In<T> sizes, In<int64_t> caps) {
    // sorted, non-negative sizes (paddings are differences of them: no wrap) and caps of at
    // least one item (a batch start j - cap never wraps either); a pass under an O(n · cap) DP
    const char* kernel = "least_padding_ends";
    const int64_t n = static_cast<int64_t>(sizes.shape(0));
    check_same_size(kernel, "sizes", n, "caps", static_cast<int64_t>(caps.shape(0)));
    for (int64_t i = 0; i < n; ++i) {
        if (static_cast<int64_t>(sizes(i)) < 0) {
            refuse(kernel, entry("sizes", i, sizes(i)) + " is negative");
        }
        if (i > 0 && sizes(i) < sizes(i - 1)) {
            refuse(kernel, entry("sizes", i, sizes(i)) + " is below " +
                               entry("sizes", i - 1, sizes(i - 1)) + " (sizes must be sorted)");
        }
        if (caps(i) < 1) refuse(kernel, entry("caps", i, caps(i)) + " must be >= 1");
    }
    return capped_kernel_py("least_padding_ends", sizes, caps, least_padding_ends<T>);
}

}  // namespace

void bind_exact(nb::module_& m) {
    m.def("exact_split", &exact_split_py, nb::arg("order").noconvert(), nb::arg("starts"),
          nb::arg("run_size"), nb::arg("mode"));
#define DEF(T)                                                                              \
    m.def("capped_ends", &capped_ends_py<T>, nb::arg("sizes"), nb::arg("caps"));            \
    m.def("least_padding_ends", &least_padding_ends_py<T>, nb::arg("sizes"), nb::arg("caps"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
}

}  // namespace padless
