// The collate family's bindings: next_fit_count, packed_batch and padded_batch (see collate.hpp
// and padless/_kernels/collate.py). Every rule is checked before anything is written; the
// outputs are the caller's buffers (torch tensors' numpy views), written in place.
#include "collate.hpp"

#include <limits>
#include <string>
#include <type_traits>

#include "checks_b.hpp"
#include "common.hpp"
#include "dtypes.hpp"
#include "ingest.hpp"

namespace padless {
namespace {

constexpr int64_t INT64_TOP = std::numeric_limits<int64_t>::max();

// The first rule an item breaks: a length outside [0, limit], a start before 0, or a span past
// the tokens; "" when none does.
std::string item_error(const int64_t* starts, const int64_t* lengths, int64_t n, int64_t tokens,
                       int64_t limit, const char* limit_name) {
    for (int64_t k = 0; k < n; ++k) {
        const int64_t len = lengths[k], s = starts[k];
        const std::string at = "item " + std::to_string(k) + ": ";
        if (len < 0 || len > limit)
            return at + "lengths[" + std::to_string(k) + "] must be in [0, " + limit_name +
                   "=" + std::to_string(limit) + "], got " + std::to_string(len);
        if (s < 0) return at + "starts[" + std::to_string(k) + "] must be >= 0, got " +
                          std::to_string(s);
        if (s > tokens - len)
            return at + "starts + lengths = " + std::to_string(s) + " + " + std::to_string(len) +
                   " must be <= the " + std::to_string(tokens) + " tokens";
    }
    return "";
}

void check_sizes(const char* k, int64_t n, int64_t lengths) {
    if (lengths != n)
        checks::refuse(k, "starts and lengths must have the same size, got " +
                              std::to_string(n) + " and " + std::to_string(lengths));
}

// Whether the outputs are int64 (else int32, checked), and that pad values fit.
bool wide_output(const char* k, AnyOut out, const char* name,
                 std::initializer_list<int64_t> values) {
    const bool wide = out.dtype() == nb::dtype<int64_t>();
    if (!wide && out.dtype() != nb::dtype<int32_t>())
        throw nb::type_error((std::string(k) + ": " + name +
                              " must be an int64 or int32 array, got " + dtype_name(out.dtype()))
                                 .c_str());
    if (!wide)
        for (int64_t v : values)
            if (!fits<int32_t>(v))
                checks::refuse(k, "pad and ignore_index must fit the int32 output, in " +
                     range_of<int32_t>() + ", got " + std::to_string(v));
    return wide;
}

// For int32 outputs of uint32/int64 tokens: every token copied must fit int32.
template <class S>
void check_narrow(const char* k, const S* src, const int64_t* starts, const int64_t* lengths,
                  int64_t n, nb::dlpack::dtype d) {
    if constexpr (std::is_same<S, int64_t>::value || std::is_same<S, uint32_t>::value) {
        int64_t bad;
        {
            nb::gil_scoped_release nogil;
            bad = first_out_of_range(src, starts, lengths, n, std::numeric_limits<int32_t>::lowest(),
                                     std::numeric_limits<int32_t>::max());
        }
        if (bad >= 0)
            checks::refuse(k, "item " + std::to_string(bad) +
                                  " holds a token outside int32's range " + range_of<int32_t>() +
                                  ": serve " + dtype_name(d) + " tokens as int64");
    } else {
        (void)k, (void)src, (void)starts, (void)lengths, (void)n, (void)d;
    }
}

int64_t next_fit_count_py(In<int64_t> lengths, int64_t capacity, int64_t max_per_row) {
    const char* k = "next_fit_count";
    if (capacity < 1) checks::refuse(k, "capacity must be >= 1, got " + std::to_string(capacity));
    if (max_per_row < 0) checks::refuse(k, "max_per_row must be >= 0 (0: no cap), got " +
                              std::to_string(max_per_row));
    const int64_t n = static_cast<int64_t>(lengths.shape(0));
    const int64_t* lens = lengths.data();
    const int64_t bad = checks::first_outside(lens, n, 0, capacity);
    if (bad >= 0)
        checks::refuse(k, "item " + std::to_string(bad) + " has " + std::to_string(lens[bad]) +
                              " tokens; items must hold between 0 and capacity=" +
                              std::to_string(capacity));
    nb::gil_scoped_release nogil;
    return next_fit_count(lens, n, capacity, max_per_row);
}

nb::tuple packed_batch_py(AnyIn tokens, In<int64_t> starts,
                          In<int64_t> lengths, int64_t capacity, int64_t max_per_row,
                          int64_t rows, bool flatten, int64_t pad, int64_t ignore,
                          int64_t position_start, AnyOut ids, AnyOut labels,
                          InOut<int64_t> positions, InOut<int32_t> seq_idx, InOut<int32_t> cu) {
    const char* k = "packed_batch";
    const int64_t n = static_cast<int64_t>(starts.shape(0));
    check_sizes(k, n, static_cast<int64_t>(lengths.shape(0)));
    if (capacity < 1) checks::refuse(k, "capacity must be >= 1, got " + std::to_string(capacity));
    if (max_per_row < 0) checks::refuse(k, "max_per_row must be >= 0 (0: no cap), got " +
                              std::to_string(max_per_row));
    if (rows < 0) checks::refuse(k, "rows must be >= 0, got " + std::to_string(rows));
    if (position_start < 0 || position_start > INT64_TOP - capacity + 1)
        checks::refuse(k, "position_start must be in [0, 2**63 - capacity], got " +
             std::to_string(position_start));
    const int64_t* st = starts.data();
    const int64_t* lens = lengths.data();
    const std::string bad = item_error(st, lens, n, static_cast<int64_t>(tokens.shape(0)),
                                       capacity, "capacity");
    if (!bad.empty()) checks::refuse(k, bad);
    const int64_t needed = next_fit_count(lens, n, capacity, max_per_row);
    int64_t total = 0;
    if (flatten) {
        for (int64_t i = 0; i < n; ++i) total += lens[i];  // each <= capacity: no overflow
    } else {
        if (needed > rows)
            checks::refuse(k, "the batch needs " + std::to_string(needed) + " rows of capacity=" +
                 std::to_string(capacity) + ", more than rows=" + std::to_string(rows));
        if (rows > INT64_TOP / capacity)
            checks::refuse(k, "rows * capacity exceeds int64: rows=" + std::to_string(rows));
        total = rows * capacity;
    }
    if (total > std::numeric_limits<int32_t>::max())
        checks::refuse(k, "the batch holds " + std::to_string(total) +
             " tokens, more than cu_seqlens' int32 can index (2**31 - 1)");
    const int64_t segments = flatten ? n : n + rows;
    if (segments > checks::I32_MAX)
        checks::refuse(k, "the batch holds " + std::to_string(segments) +
                              " segments, more than seq_idx's int32 can number");
    for (const auto& [size, name] :
         {std::pair<int64_t, const char*>{static_cast<int64_t>(ids.shape(0)), "ids"},
          {static_cast<int64_t>(labels.shape(0)), "labels"},
          {static_cast<int64_t>(positions.shape(0)), "positions"},
          {static_cast<int64_t>(seq_idx.shape(0)), "seq_idx"}})
        if (size != total)
            checks::refuse(k, std::string(name) + " must have " + std::to_string(total) +
                                  " entries, got " + std::to_string(size));
    if (static_cast<int64_t>(cu.shape(0)) < segments + 1)
        checks::refuse(k, "cu must have at least " + std::to_string(segments + 1) +
                              " entries, got " + std::to_string(cu.shape(0)));
    const bool wide = wide_output(k, ids, "ids", {pad, ignore});
    if (labels.dtype() != ids.dtype())
        throw nb::type_error("packed_batch: labels must have the dtype of ids");
    PackedCounts counts{0, 0};
    on_token_type(tokens.dtype(), "packed_batch: tokens", [&](auto s) {
        using S = decltype(s);
        const S* src = static_cast<const S*>(tokens.data());
        if (wide) {
            nb::gil_scoped_release nogil;
            counts = packed_fill<S, int64_t>(
                src, st, lens, n, rows, capacity, max_per_row, flatten, pad, ignore,
                position_start, static_cast<int64_t*>(ids.data()),
                static_cast<int64_t*>(labels.data()), positions.data(), seq_idx.data(), cu.data());
            return;
        }
        check_narrow(k, src, st, lens, n, tokens.dtype());
        nb::gil_scoped_release nogil;
        counts = packed_fill<S, int32_t>(
            src, st, lens, n, rows, capacity, max_per_row, flatten, static_cast<int32_t>(pad),
            static_cast<int32_t>(ignore), position_start, static_cast<int32_t*>(ids.data()),
            static_cast<int32_t*>(labels.data()), positions.data(), seq_idx.data(), cu.data());
    });
    return nb::make_tuple(counts.segments, counts.longest);
}

void padded_batch_py(AnyIn tokens, In<int64_t> starts, In<int64_t> lengths, int64_t rows,
                     int64_t width, int64_t pad, AnyOut ids, InOut<int64_t> mask) {
    const char* k = "padded_batch";
    const int64_t n = static_cast<int64_t>(starts.shape(0));
    check_sizes(k, n, static_cast<int64_t>(lengths.shape(0)));
    if (width < 0) checks::refuse(k, "width must be >= 0, got " + std::to_string(width));
    if (rows < 0) checks::refuse(k, "rows must be >= 0, got " + std::to_string(rows));
    if (rows < n)
        checks::refuse(k, "rows must hold the " + std::to_string(n) + " items, got rows=" +
             std::to_string(rows));
    const int64_t* st = starts.data();
    const int64_t* lens = lengths.data();
    const std::string bad =
        item_error(st, lens, n, static_cast<int64_t>(tokens.shape(0)), width, "width");
    if (!bad.empty()) checks::refuse(k, bad);
    if (width > 0 && rows > INT64_TOP / width)
        checks::refuse(k, "rows * width exceeds int64: rows=" + std::to_string(rows));
    const int64_t total = rows * width;
    if (static_cast<int64_t>(ids.shape(0)) != total || static_cast<int64_t>(mask.shape(0)) != total)
        checks::refuse(k, "ids and mask must have rows * width = " + std::to_string(total) +
             " entries, got " + std::to_string(ids.shape(0)) + " and " +
             std::to_string(mask.shape(0)));
    const bool wide = wide_output(k, ids, "ids", {pad});
    on_token_type(tokens.dtype(), "padded_batch: tokens", [&](auto s) {
        using S = decltype(s);
        const S* src = static_cast<const S*>(tokens.data());
        if (wide) {
            nb::gil_scoped_release nogil;
            padded_fill<S, int64_t>(src, st, lens, n, rows, width, pad,
                                    static_cast<int64_t*>(ids.data()), mask.data());
            return;
        }
        check_narrow(k, src, st, lens, n, tokens.dtype());
        nb::gil_scoped_release nogil;
        padded_fill<S, int32_t>(src, st, lens, n, rows, width, static_cast<int32_t>(pad),
                                static_cast<int32_t*>(ids.data()), mask.data());
    });
}

}  // namespace

void bind_collate(nb::module_& m) {
    m.def("next_fit_count", &next_fit_count_py, nb::arg("lengths"), nb::arg("capacity"),
          nb::arg("max_per_row"));
    m.def("packed_batch", &packed_batch_py, nb::arg("tokens"), nb::arg("starts"),
          nb::arg("lengths"), nb::arg("capacity"), nb::arg("max_per_row"), nb::arg("rows"),
          nb::arg("flatten"), nb::arg("pad"), nb::arg("ignore"), nb::arg("position_start"),
          nb::arg("ids").noconvert(), nb::arg("labels").noconvert(),
          nb::arg("positions").noconvert(), nb::arg("seq_idx").noconvert(),
          nb::arg("cu").noconvert());
    m.def("padded_batch", &padded_batch_py, nb::arg("tokens"), nb::arg("starts"),
          nb::arg("lengths"), nb::arg("rows"), nb::arg("width"), nb::arg("pad"),
          nb::arg("ids").noconvert(), nb::arg("mask").noconvert());
}

}  // namespace padless
