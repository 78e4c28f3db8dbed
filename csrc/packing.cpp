// The packing family's bindings: best_fit_rows, best_fit_pairs and scatter_rows (see
// packing.hpp). Each checks its arguments before it places or writes anything (checks_b.hpp).
#include "packing.hpp"

#include <string>

#include "checks_b.hpp"
#include "common.hpp"

namespace padless {
namespace {

using checks::I32_MAX;
using checks::str;

// A best fit keeps one stack per remaining space in [0, capacity] (memory O(capacity)); lengths
// are below 2**31, so a row never needs more.
constexpr int64_t MAX_CAPACITY = I32_MAX;

template <class T>
nb::tuple best_fit_rows_py(In<T> sizes, int64_t capacity, int64_t max_per_row) {
    const char* k = "best_fit_rows";
    checks::in_range(k, "capacity", capacity, 1, MAX_CAPACITY);
    check_memory(k, "capacity", capacity, 9);  // a stack head and a bit per space
    checks::at_least(k, "max_per_row", max_per_row, 0);
    const int64_t n = static_cast<int64_t>(sizes.shape(0));
    // out of range was an IndexError from the kernel's own check: it stays one
    checks::all_in_range(k, "sizes", sizes.data(), n, 0, capacity, "an item fits one row",
                         true);
    RowFit fit;
    {
        nb::gil_scoped_release nogil;
        fit = best_fit_rows(sizes.data(), n, capacity, max_per_row);
    }
    return nb::make_tuple(to_numpy(std::move(fit.row_of)), fit.rows);
}

template <class T>
nb::tuple best_fit_pairs_py(In<T> first, In<T> second, int64_t capacity0, int64_t capacity1,
                            int64_t max_per_row) {
    const char* k = "best_fit_pairs";
    const int64_t n = static_cast<int64_t>(first.shape(0));
    if (static_cast<int64_t>(second.shape(0)) != n)
        checks::refuse(k, "first and second must have one size per item, got " + str(n) +
                              " and " + str(static_cast<int64_t>(second.shape(0))));
    checks::in_range(k, "capacity0", capacity0, 1, MAX_CAPACITY);
    checks::in_range(k, "capacity1", capacity1, 1, MAX_CAPACITY);
    check_memory(k, "capacity0", capacity0, 13);  // a bucket and a tree entry per space
    checks::at_least(k, "max_per_row", max_per_row, 0);
    checks::all_in_range(k, "first", first.data(), n, 0, capacity0, "an item fits one row",
                         true);
    checks::all_in_range(k, "second", second.data(), n, 0, capacity1, "an item fits one row",
                         true);
    RowFit fit;
    {
        nb::gil_scoped_release nogil;
        fit = best_fit_pairs(first.data(), second.data(), n, capacity0, capacity1, max_per_row);
    }
    return nb::make_tuple(to_numpy(std::move(fit.row_of)), fit.rows);
}

template <class T>
nb::tuple scatter_rows_py(In<int64_t> row_of, In<int64_t> row_rank, In<int64_t> values,
                          In<T> sizes) {
    const char* k = "scatter_rows";
    const int64_t n = static_cast<int64_t>(row_of.shape(0));
    const int64_t rows = static_cast<int64_t>(row_rank.shape(0));
    checks::same_size(k, "row_of", n, "values", static_cast<int64_t>(values.shape(0)));
    checks::same_size(k, "row_of", n, "sizes", static_cast<int64_t>(sizes.shape(0)));
    checks::all_in_range(k, "row_of", row_of.data(), n, 0, rows - 1,
                         "a row of row_rank's " + str(rows));
    checks::all_in_range(k, "row_rank", row_rank.data(), rows, 0, rows - 1,
                         "a rank among the " + str(rows) + " rows");
    Scattered out;
    {
        nb::gil_scoped_release nogil;
        out = scatter_rows(row_of.data(), n, row_rank.data(), rows, values.data(), sizes.data());
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
