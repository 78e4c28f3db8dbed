// The packing family's bindings: best_fit_rows, best_fit_pairs and scatter_rows (see
// packing.hpp).
#include "packing.hpp"

#include <limits>
#include <stdexcept>

#include "common.hpp"

namespace padless {
namespace {

template <class T>
nb::tuple best_fit_rows_py(In<T> sizes, int64_t capacity, int64_t max_per_row) {
    RowFit fit;
    {
        nb::gil_scoped_release nogil;
        fit = best_fit_rows(sizes.data(), static_cast<int64_t>(sizes.shape(0)), capacity,
                            max_per_row);
    }
    return nb::make_tuple(to_numpy(std::move(fit.row_of)), fit.rows);
}

template <class T>
nb::tuple best_fit_pairs_py(In<T> first, In<T> second, int64_t capacity0, int64_t capacity1,
                            int64_t max_per_row) {
    if (first.shape(0) != second.shape(0))
        throw std::invalid_argument("best_fit_pairs: first and second must have one size per item");
    if (capacity0 < 0 || capacity1 < 0 || capacity1 > std::numeric_limits<int32_t>::max() ||
        max_per_row < 0)
        throw std::invalid_argument("best_fit_pairs: capacities and max_per_row out of range");
    RowFit fit;
    {
        nb::gil_scoped_release nogil;
        fit = best_fit_pairs(first.data(), second.data(), static_cast<int64_t>(first.shape(0)),
                             capacity0, capacity1, max_per_row);
    }
    return nb::make_tuple(to_numpy(std::move(fit.row_of)), fit.rows);
}

template <class T>
nb::tuple scatter_rows_py(In<int64_t> row_of, In<int64_t> row_rank, In<int64_t> values,
                          In<T> sizes) {
    Scattered out;
    {
        nb::gil_scoped_release nogil;
        out = scatter_rows(row_of.data(), static_cast<int64_t>(row_of.shape(0)), row_rank.data(),
                           static_cast<int64_t>(row_rank.shape(0)), values.data(), sizes.data());
    }
    return nb::make_tuple(to_numpy(std::move(out.values)), to_numpy(std::move(out.sizes)),
                          to_numpy(std::move(out.bounds)));
}

}  // namespace

void bind_packing(nb::module_& m) {
#define DEF(T)                                                                                 \
    m.def("best_fit_rows", &best_fit_rows_py<T>, nb::arg("sizes"), nb::arg("capacity"),        \
          nb::arg("max_per_row"));                                                             \
    m.def("best_fit_pairs", &best_fit_pairs_py<T>, nb::arg("first"), nb::arg("second"),        \
          nb::arg("capacity0"), nb::arg("capacity1"), nb::arg("max_per_row"));                 \
    m.def("scatter_rows", &scatter_rows_py<T>, nb::arg("row_of"), nb::arg("row_rank"),         \
          nb::arg("values"), nb::arg("sizes"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
}

}  // namespace padless
