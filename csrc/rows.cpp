// The rows family's binding: padless.ray's packed-row gather (needs nothing of Ray).
#include "rows.hpp"

#include <string>

#include "common.hpp"

namespace padless {
namespace {

// Refuses entries that are not within values and rows that are not runs of entries (the
// kernel's writes would leave its arrays); returns the output tokens, the sum of seg.
int64_t check_entries(int64_t num_values, const int64_t* src, const int64_t* seg, int64_t n,
                      const int64_t* bounds, int64_t num_bounds) {
    int64_t total = 0;
    for (int64_t e = 0; e < n; ++e) {
        if (seg[e] < 0) throw nb::value_error("seg must be non-negative");
        if (src[e] < 0 || src[e] > num_values - seg[e])
            throw nb::index_error(("entry " + std::to_string(e) + " is not within values").c_str());
        total += seg[e];  // at most n × num_values: the values are in memory
    }
    for (int64_t r = 0; r < num_bounds; ++r) {
        if (bounds[r] < 0 || bounds[r] > n || (r > 0 && bounds[r] < bounds[r - 1]))
            throw nb::value_error("bounds must be non-decreasing entry numbers in [0, n]");
    }
    return total;
}

template <class T>
nb::tuple row_columns_py(In<T> values, In<int64_t> src, In<int64_t> seg, In<int64_t> bounds) {
    const int64_t n = static_cast<int64_t>(src.shape(0));
    const int64_t num_bounds = static_cast<int64_t>(bounds.shape(0));
    if (static_cast<int64_t>(seg.shape(0)) != n)
        throw nb::value_error("src and seg must have the same size");
    if (n + num_bounds - 1 < 0) throw nb::value_error("negative dimensions are not allowed");
    Buffer<T> tokens;
    Buffer<int32_t> position, seq_idx, cu;
    {
        nb::gil_scoped_release nogil;
        int64_t total = check_entries(static_cast<int64_t>(values.shape(0)), src.data(),
                                      seg.data(), n, bounds.data(), num_bounds);
        tokens = Buffer<T>(total);
        position = Buffer<int32_t>(total);
        seq_idx = Buffer<int32_t>(total);
        cu = Buffer<int32_t>(n + num_bounds - 1);
        row_columns(values.data(), src.data(), seg.data(), bounds.data(), num_bounds,
                    tokens.get(), position.get(), seq_idx.get(), cu.get());
    }
    return nb::make_tuple(to_numpy(std::move(tokens)), to_numpy(std::move(position)),
                          to_numpy(std::move(seq_idx)), to_numpy(std::move(cu)));
}

}  // namespace

void bind_rows(nb::module_& m) {
    // every integer dtype an Arrow list column gives, int64 first (see PADLESS_FOR_SIZES)
#define DEF(T)                                                                             \
    m.def("row_columns", &row_columns_py<T>, nb::arg("values"), nb::arg("src"), nb::arg("seg"), \
          nb::arg("bounds"));
    PADLESS_FOR_SIZES(DEF) DEF(int16_t) DEF(uint8_t) DEF(int8_t) DEF(uint64_t)
#undef DEF
}

}  // namespace padless
