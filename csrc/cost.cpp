// The cost family's bindings: budget_cost_ends, packed_batch_costs, best_fit_rows_cost (see
// cost.hpp).
#include "cost.hpp"

#include <stdexcept>

#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

// The limits of the greedy rule (0: no limit) and its `multiple`.
void check_greedy_limits(const char* kernel, int64_t max_tokens, int64_t max_sentences,
                         int64_t multiple, double max_cost) {
    check_limit(kernel, "max_tokens", max_tokens);
    check_limit(kernel, "max_sentences", max_sentences);
    check_scalar(kernel, "multiple", multiple, 1, INT64_MAX_, "must be >= 1");
    check_float_limit(kernel, "max_cost", max_cost);
}

// The item the walk stopped at: its size over max_tokens, or its own cost over max_cost.
template <class T>
[[noreturn]] void refuse_item(const char* kernel, const In<T>& sizes, int64_t at, bool cost,
                              int64_t max_tokens, double max_cost) {
    if (cost) {
        refuse(kernel, "item " + text(at) + " costs more than max_cost = " + text(max_cost) +
                           " on its own (every item must fit the budget)");
    }
    refuse(kernel, entry("sizes", at, sizes(at)) + " exceeds max_tokens = " + text(max_tokens) +
                       " (every item must fit the budget)");
}

template <class T>
Out<int64_t> budget_cost_ends_py(In<T> sizes, In<double> units, int64_t max_tokens,
                                 int64_t max_sentences, int64_t multiple, double max_cost) {
    const char* kernel = "budget_cost_ends";
    check_same_size(kernel, "sizes", static_cast<int64_t>(sizes.shape(0)), "units",
                    static_cast<int64_t>(units.shape(0)));
    check_greedy_limits(kernel, max_tokens, max_sentences, multiple, max_cost);
    Buffer<int64_t> ends;
    int64_t over_at;
    bool over_cost;
    {
        nb::gil_scoped_release nogil;
        ends = budget_cost_ends(sizes.data(), units.data(), static_cast<int64_t>(sizes.shape(0)),
                                max_tokens, max_sentences, multiple, max_cost, over_at, over_cost);
    }
    if (over_at >= 0) refuse_item(kernel, sizes, over_at, over_cost, max_tokens, max_cost);
    return to_numpy(std::move(ends));
}

// each item's cost in each field, row-major (n, fields)
using Units2 = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <class T>
Out<int64_t> budget_field_cost_ends_py(In<T> sizes, Units2 units, int64_t max_tokens,
                                       int64_t max_sentences, int64_t multiple, double max_cost) {
    const char* kernel = "budget_field_cost_ends";
    if (units.shape(1) < 1) {
        throw std::invalid_argument(
            "budget_field_cost_ends: units must be (n, fields) with fields >= 1");
    }
    check_same_size(kernel, "sizes", static_cast<int64_t>(sizes.shape(0)), "units",
                    static_cast<int64_t>(units.shape(0)));
    check_greedy_limits(kernel, max_tokens, max_sentences, multiple, max_cost);
    Buffer<int64_t> ends;
    int64_t over_at;
    bool over_cost;
    {
        nb::gil_scoped_release nogil;
        ends = budget_field_cost_ends(sizes.data(), units.data(),
                                      static_cast<int64_t>(sizes.shape(0)),
                                      static_cast<int64_t>(units.shape(1)), max_tokens,
                                      max_sentences, multiple, max_cost, over_at, over_cost);
    }
    if (over_at >= 0) refuse_item(kernel, sizes, over_at, over_cost, max_tokens, max_cost);
    return to_numpy(std::move(ends));
}

Out<double> packed_batch_costs_py(In<double> extras, In<int64_t> row_bounds,
                                  In<int64_t> row_offsets, double base) {
    const char* kernel = "packed_batch_costs";
    if (row_offsets.shape(0) == 0) {
        throw std::invalid_argument("packed_batch_costs: row_offsets is empty");
    }
    // rows into the extras, batches into the rows (an array of bounds holds rows + 1 of them)
    const int64_t num_bounds = static_cast<int64_t>(row_bounds.shape(0));
    check_bounds(kernel, "row_bounds", row_bounds.data(), num_bounds, "extras",
                 static_cast<int64_t>(extras.shape(0)));
    check_bounds(kernel, "row_offsets", row_offsets.data(),
                 static_cast<int64_t>(row_offsets.shape(0)), "the rows (row_bounds' gaps)",
                 num_bounds > 0 ? num_bounds - 1 : 0);
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
    const char* kernel = "best_fit_rows_cost";
    check_same_size(kernel, "sizes", static_cast<int64_t>(sizes.shape(0)), "extras",
                    static_cast<int64_t>(extras.shape(0)));
    check_scalar(kernel, "capacity", capacity, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_memory(kernel, "capacity", capacity, 9);  // a stack head and a bit per space
    check_limit(kernel, "max_per_row", max_per_row);
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
