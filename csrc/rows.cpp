// The rows family's binding: padless.ray's packed-row gather (needs nothing of Ray).
#include "rows.hpp"

#include <string>

#include "checks_b.hpp"
#include "common.hpp"

namespace padless {
namespace {

// Refuses entries that are not within values and rows that are not runs of entries from 0 to
// n (the kernel's writes would leave its arrays, or leave outputs unwritten), and rows whose
// cu_seqlens or seq_idx would not fit int32; returns the output tokens, the sum of seg.
int64_t check_entries(int64_t num_values, const int64_t* src, const int64_t* seg, int64_t n,
                      const int64_t* bounds, int64_t num_bounds) {
    const char* k = "row_columns";
    using checks::str;
    checks::all_in_range(k, "seg", seg, n, 0, num_values, "an entry lies within values");
    for (int64_t e = 0; e < n; ++e) {
        if (src[e] < 0 || src[e] > num_values - seg[e])
            checks::refuse_index(k, "entry " + str(e) + " is not within values: src[" + str(e) +
                                        "] + seg[" + str(e) + "] = " + str(src[e]) + " + " +
                                        str(seg[e]) + " must be in [0, " + str(num_values) +
                                        "] with src >= 0");
    }
    if (num_bounds < 1) checks::refuse(k, "bounds must hold at least one entry (0)");
    if (bounds[0] != 0 || bounds[num_bounds - 1] != n)
        checks::refuse(k, "bounds must run from 0 to n=" + str(n) + ", got " + str(bounds[0]) +
                              " ... " + str(bounds[num_bounds - 1]));
    checks::non_decreasing(k, "bounds", bounds, num_bounds);
    int64_t total = 0;
    for (int64_t r = 0; r + 1 < num_bounds; ++r) {
        int64_t row = 0;  // seg <= num_values each: a row's sum stays far from int64's top
        for (int64_t e = bounds[r]; e < bounds[r + 1]; ++e) row += seg[e];
        if (row > checks::I32_MAX || bounds[r + 1] - bounds[r] > checks::I32_MAX)
            checks::refuse(k, "row " + str(r) + " holds " + str(row) + " tokens in " +
                                  str(bounds[r + 1] - bounds[r]) +
                                  " entries; cu_seqlens and seq_idx are int32");
        total += row;
    }
    return total;
}

template <class T>
nb::tuple row_columns_py(In<T> values, In<int64_t> src, In<int64_t> seg, In<int64_t> bounds) {
    const int64_t n = static_cast<int64_t>(src.shape(0));
    const int64_t num_bounds = static_cast<int64_t>(bounds.shape(0));
    checks::same_size("row_columns", "src", n, "seg", static_cast<int64_t>(seg.shape(0)));
    const int64_t total = check_entries(static_cast<int64_t>(values.shape(0)), src.data(),
                                        seg.data(), n, bounds.data(), num_bounds);
    Buffer<T> tokens;
    Buffer<int32_t> position, seq_idx, cu;
    {
        nb::gil_scoped_release nogil;
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
