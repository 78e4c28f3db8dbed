// The cost family's bindings: budget_cost_ends, packed_batch_costs, best_fit_rows_cost (see
// cost.hpp).
#include "cost.hpp"

#include <stdexcept>

#include "common.hpp"

namespace padless {
namespace {

template <class T>
Out<int64_t> budget_cost_ends_py(In<T> sizes, In<double> units, int64_t max_tokens,
                                 int64_t max_sentences, int64_t multiple, double max_cost) {
    if (units.shape(0) < sizes.shape(0)) {
        throw std::invalid_argument("budget_cost_ends: fewer units than sizes");
    }
    Buffer<int64_t> ends;
    {
        nb::gil_scoped_release nogil;
        ends = budget_cost_ends(sizes.data(), units.data(), static_cast<int64_t>(sizes.shape(0)),
                                max_tokens, max_sentences, multiple, max_cost);
    }
    return to_numpy(std::move(ends));
}

// each item's cost in each field, row-major (n, fields)
using Units2 = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <class T>
Out<int64_t> budget_field_cost_ends_py(In<T> sizes, Units2 units, int64_t max_tokens,
                                       int64_t max_sentences, int64_t multiple, double max_cost) {
    if (units.shape(0) < sizes.shape(0) || units.shape(1) < 1) {
        throw std::invalid_argument(
            "budget_field_cost_ends: units must be (n, fields) with fields >= 1");
    }
    Buffer<int64_t> ends;
    {
        nb::gil_scoped_release nogil;
        ends = budget_field_cost_ends(sizes.data(), units.data(), static_cast<int64_t>(sizes.shape(0)),
                                      static_cast<int64_t>(units.shape(1)), max_tokens,
                                      max_sentences, multiple, max_cost);
    }
    return to_numpy(std::move(ends));
}

Out<double> packed_batch_costs_py(In<double> extras, In<int64_t> row_bounds,
                                  In<int64_t> row_offsets, double base) {
    if (row_offsets.shape(0) == 0) {
        throw std::invalid_argument("packed_batch_costs: row_offsets is empty");
    }
    Buffer<double> out;
    {
        nb::gil_scoped_release nogil;
        out = packed_batch_costs(extras.data(), row_bounds.data(), row_offsets.data(),
                                 static_cast<int64_t>(row_offsets.shape(0)) - 1, base);
    }
    return to_numpy(std::move(out));
}

template <class T>
nb::tuple best_fit_rows_cost_py(In<T> sizes, In<double> extras, int64_t capacity,
                                int64_t max_per_row, double base, double max_row_cost) {
    if (extras.shape(0) < sizes.shape(0)) {
        throw std::invalid_argument("best_fit_rows_cost: fewer extras than sizes");
    }
    RowFit fit;
    {
        nb::gil_scoped_release nogil;
        fit = best_fit_rows_cost(sizes.data(), extras.data(),
                                 static_cast<int64_t>(sizes.shape(0)), capacity, max_per_row,
                                 base, max_row_cost);
    }
    return nb::make_tuple(to_numpy(std::move(fit.row_of)), fit.rows);
}

}  // namespace

void bind_cost(nb::module_& m) {
#define DEF(T)                                                                                 \
    m.def("budget_cost_ends", &budget_cost_ends_py<T>, nb::arg("sizes"), nb::arg("units"),     \
          nb::arg("max_tokens"), nb::arg("max_sentences"), nb::arg("multiple"),                \
          nb::arg("max_cost"));                                                                \
    m.def("budget_field_cost_ends", &budget_field_cost_ends_py<T>, nb::arg("sizes"),           \
          nb::arg("units"), nb::arg("max_tokens"), nb::arg("max_sentences"),                   \
          nb::arg("multiple"), nb::arg("max_cost"));                                           \
    m.def("best_fit_rows_cost", &best_fit_rows_cost_py<T>, nb::arg("sizes"), nb::arg("extras"), \
          nb::arg("capacity"), nb::arg("max_per_row"), nb::arg("base"),                        \
          nb::arg("max_row_cost"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
    m.def("packed_batch_costs", &packed_batch_costs_py, nb::arg("extras"), nb::arg("row_bounds"),
          nb::arg("row_offsets"), nb::arg("base"));
}

}  // namespace padless
