// The shuffle family's kernels (the lines ones; the others are templates in shuffle.hpp) and
// their bindings. Each binding takes the arrays of padless/shuffle/_kernels.py's functions: a
// lines kernel's `b64` is the uint64 view of b8's first whole words, of which only the length is
// used (the words are read from b8 itself).
#include "shuffle.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "common.hpp"

namespace padless {
namespace shuffle {

int64_t scatter_window_lines(const uint8_t* b8, int64_t words, int64_t lo, int64_t hi,
                             int64_t num_buckets, uint64_t& state, uint32_t* lengths, int64_t room,
                             uint8_t* dst, int64_t dst_lo, int64_t* bounds, int64_t* counts) {
    const uint64_t first = state;
    const uint64_t bound = static_cast<uint64_t>(num_buckets);
    uint64_t rng = first;
    for (int64_t k = 0; k <= num_buckets; ++k) bounds[k] = 0;
    int64_t n = 0;
    int64_t pos = lo;
    // One scan: each line's length is kept, its label drawn, its bucket's size counted.
    while (pos < hi && n < room) {
        int64_t end = find_newline(b8, words, pos) + 1;
        lengths[n] = static_cast<uint32_t>(end - pos);
        int64_t b = below(rng, bound);
        bounds[b + 1] += end - pos;
        counts[b] += 1;
        ++n;
        pos = end;
    }
    bounds[0] = dst_lo;
    for (int64_t k = 0; k < num_buckets; ++k) bounds[k + 1] += bounds[k];
    std::unique_ptr<int64_t[]> fill(new int64_t[num_buckets > 0 ? num_buckets : 1]);
    std::memcpy(fill.get(), bounds, static_cast<size_t>(num_buckets) * sizeof(int64_t));
    // The same labels again, now to copy each line to its bucket.
    rng = first;
    int64_t at = lo;
    for (int64_t i = 0; i < n; ++i) {
        int64_t b = below(rng, bound);
        int64_t length = lengths[i];
        std::memcpy(dst + fill[b], b8 + at, static_cast<size_t>(length));
        fill[b] += length;
        at += length;
    }
    state = rng;
    return pos;
}

int64_t order_lines(const uint8_t* b8, int64_t words, const int64_t* bounds, int64_t rows,
                    int64_t stride, int64_t s, uint64_t& state, uint64_t* items) {
    int64_t m = 0;
    for (int64_t r = 0; r < rows; ++r) {
        int64_t pos = bounds[r * stride + s];
        const int64_t hi = bounds[r * stride + s + 1];
        while (pos < hi) {
            int64_t end = find_newline(b8, words, pos) + 1;
            items[m++] = static_cast<uint64_t>(pos) |
                         (static_cast<uint64_t>(std::min(end - pos, LONG)) << START_BITS);
            pos = end;
        }
    }
    uint64_t rng = state;
    for (int64_t i = 0; i < m; ++i) {
        int64_t j = below(rng, static_cast<uint64_t>(i + 1));
        std::swap(items[i], items[j]);
    }
    state = rng;
    return m;
}

void gather_lines(const uint8_t* b8, int64_t words, const uint64_t* items, int64_t& i, int64_t m,
                  uint8_t* dst, int64_t& at, int64_t limit) {
    while (i < m) {
        if (i + AHEAD < m) {
            const uint8_t* ahead = b8 + (items[i + AHEAD] & START_MASK);
            prefetch(ahead);
            prefetch(ahead + 64);
        }
        const int64_t a = static_cast<int64_t>(items[i] & START_MASK);
        int64_t n = static_cast<int64_t>(items[i] >> START_BITS);
        if (n == LONG) n = find_newline(b8, words, a) + 1 - a;
        if (at + n > limit) break;
        std::memcpy(dst + at, b8 + a, static_cast<size_t>(n));
        at += n;
        ++i;
    }
}

}  // namespace shuffle

namespace {

using Bounds = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

int64_t size_of(const In<uint64_t>& a) { return static_cast<int64_t>(a.shape(0)); }

int64_t draw_below_py(InOut<uint64_t> state, int64_t bound) {
    nb::gil_scoped_release nogil;
    return below(state.data()[0], static_cast<uint64_t>(bound));
}

void shuffle_indices_py(int64_t m, InOut<uint64_t> state, InOut<int32_t> perm) {
    nb::gil_scoped_release nogil;
    shuffle::shuffle_indices(m, state.data()[0], perm.data());
}

template <class W>
void scatter_records_py(In<W> src, int64_t lo, int64_t hi, int64_t width, int64_t num_buckets,
                        uint64_t key, InOut<W> dst, int64_t dst_lo, InOut<int64_t> starts,
                        InOut<int64_t> counts) {
    nb::gil_scoped_release nogil;
    shuffle::scatter_records(src.data(), lo, hi, width, num_buckets, key, dst.data(), dst_lo,
                             starts.data(), counts.data());
}

void count_labels_py(int64_t n, int64_t num_buckets, uint64_t key, InOut<int64_t> counts) {
    nb::gil_scoped_release nogil;
    shuffle::count_labels(n, num_buckets, key, counts.data());
}

template <class W>
void place_records_py(In<W> src, int64_t lo, int64_t hi, int64_t width, int64_t num_buckets,
                      InOut<uint64_t> state, InOut<W> dst, InOut<int64_t> fill) {
    nb::gil_scoped_release nogil;
    shuffle::place_records(src.data(), lo, hi, width, num_buckets, state.data()[0], dst.data(),
                           fill.data());
}

int64_t scatter_window_lines_py(In<uint8_t> b8, In<uint64_t> b64, int64_t lo, int64_t hi,
                                int64_t num_buckets, InOut<uint64_t> state,
                                InOut<uint32_t> lengths, InOut<uint8_t> dst, int64_t dst_lo,
                                InOut<int64_t> bounds, InOut<int64_t> counts) {
    nb::gil_scoped_release nogil;
    return shuffle::scatter_window_lines(b8.data(), size_of(b64), lo, hi, num_buckets,
                                         state.data()[0], lengths.data(),
                                         static_cast<int64_t>(lengths.shape(0)), dst.data(),
                                         dst_lo, bounds.data(), counts.data());
}

int64_t order_lines_py(In<uint8_t> b8, In<uint64_t> b64, Bounds bounds, int64_t s,
                       InOut<uint64_t> state, InOut<uint64_t> items) {
    nb::gil_scoped_release nogil;
    return shuffle::order_lines(b8.data(), size_of(b64), bounds.data(),
                                static_cast<int64_t>(bounds.shape(0)),
                                static_cast<int64_t>(bounds.shape(1)), s, state.data()[0],
                                items.data());
}

nb::tuple gather_lines_py(In<uint8_t> b8, In<uint64_t> b64, In<uint64_t> items, int64_t i,
                          int64_t m, InOut<uint8_t> dst, int64_t at, int64_t limit) {
    {
        nb::gil_scoped_release nogil;
        shuffle::gather_lines(b8.data(), size_of(b64), items.data(), i, m, dst.data(), at, limit);
    }
    return nb::make_tuple(i, at);
}

template <class W>
nb::tuple gather_records_py(In<W> src, int64_t width, int64_t lo, In<int32_t> perm, int64_t i,
                            int64_t m, InOut<W> dst, int64_t at, int64_t limit) {
    {
        nb::gil_scoped_release nogil;
        shuffle::gather_records(src.data(), width, lo, perm.data(), i, m, dst.data(), at, limit);
    }
    return nb::make_tuple(i, at);
}

}  // namespace

void bind_shuffle(nb::module_& m) {
    m.def("draw_below", &draw_below_py, nb::arg("state").noconvert(), nb::arg("bound"));
    m.def("shuffle_indices", &shuffle_indices_py, nb::arg("m"), nb::arg("state").noconvert(),
          nb::arg("perm").noconvert());
    m.def("count_labels", &count_labels_py, nb::arg("n"), nb::arg("num_buckets"), nb::arg("key"),
          nb::arg("counts").noconvert());
    m.def("scatter_window_lines", &scatter_window_lines_py, nb::arg("b8"), nb::arg("b64"),
          nb::arg("lo"), nb::arg("hi"), nb::arg("num_buckets"), nb::arg("state").noconvert(),
          nb::arg("lengths").noconvert(), nb::arg("dst").noconvert(), nb::arg("dst_lo"),
          nb::arg("bounds").noconvert(), nb::arg("counts").noconvert());
    m.def("order_lines", &order_lines_py, nb::arg("b8"), nb::arg("b64"), nb::arg("bounds"),
          nb::arg("s"), nb::arg("state").noconvert(), nb::arg("items").noconvert());
    m.def("gather_lines", &gather_lines_py, nb::arg("b8"), nb::arg("b64"), nb::arg("items"),
          nb::arg("i"), nb::arg("m"), nb::arg("dst").noconvert(), nb::arg("at"),
          nb::arg("limit"));
#define DEF(W)                                                                                  \
    m.def("scatter_records", &scatter_records_py<W>, nb::arg("src"), nb::arg("lo"),             \
          nb::arg("hi"), nb::arg("width"), nb::arg("num_buckets"), nb::arg("key"),              \
          nb::arg("dst").noconvert(), nb::arg("dst_lo"), nb::arg("starts").noconvert(),         \
          nb::arg("counts").noconvert());                                                       \
    m.def("place_records", &place_records_py<W>, nb::arg("src"), nb::arg("lo"), nb::arg("hi"),  \
          nb::arg("width"), nb::arg("num_buckets"), nb::arg("state").noconvert(),               \
          nb::arg("dst").noconvert(), nb::arg("fill").noconvert());                             \
    m.def("gather_records", &gather_records_py<W>, nb::arg("src"), nb::arg("width"),            \
          nb::arg("lo"), nb::arg("perm"), nb::arg("i"), nb::arg("m"), nb::arg("dst").noconvert(), \
          nb::arg("at"), nb::arg("limit"));
    DEF(uint64_t) DEF(uint32_t) DEF(uint16_t) DEF(uint8_t)
#undef DEF
}

}  // namespace padless
