// The exact family's kernels and their bindings (the kernels are in exact.hpp).
#include "exact.hpp"

#include <stdexcept>
#include <string>

#include "common.hpp"

namespace padless {
namespace {

nb::tuple exact_split_py(InOut<int64_t> order, In<int64_t> starts, In<int64_t> run_size,
                         int64_t mode) {
    int64_t runs = static_cast<int64_t>(starts.shape(0)) - 1;
    // the kernel indexes run_size by run and order up to the last start
    if (static_cast<int64_t>(run_size.shape(0)) < runs ||
        (runs >= 0 && starts(runs) > static_cast<int64_t>(order.shape(0)))) {
        throw std::invalid_argument("exact_split: starts and run_size do not fit order");
    }
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
    if (caps.shape(0) < sizes.shape(0)) {
        throw std::invalid_argument(std::string(name) + ": caps must have one entry per size");
    }
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
