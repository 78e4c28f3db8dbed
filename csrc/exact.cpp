// The exact family's kernels and their bindings (the kernels are in exact.hpp).
#include "exact.hpp"

#include <stdexcept>

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

template <class T>
Out<int64_t> capped_ends_py(In<T> sizes, In<int64_t> caps) {
    if (caps.shape(0) < sizes.shape(0)) {
        throw std::invalid_argument("capped_ends: caps must have one entry per size");
    }
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = capped_ends(sizes.data(), caps.data(), static_cast<int64_t>(sizes.shape(0)));
    }
    return to_numpy(std::move(out));
}

template <class T>
Out<int64_t> least_padding_ends_py(In<T> sizes, In<int64_t> caps) {
    if (caps.shape(0) < sizes.shape(0)) {
        throw std::invalid_argument("least_padding_ends: caps must have one entry per size");
    }
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = least_padding_ends(sizes.data(), caps.data(), static_cast<int64_t>(sizes.shape(0)));
    }
    return to_numpy(std::move(out));
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
