// The windows family's bindings (the kernels are in windows.hpp). They run on Python threads,
// one window each: every one releases the GIL around its work.
#include "windows.hpp"

namespace padless {
namespace {

// Lengths as the caller holds them: read in place whatever their strides (a mapped file's
// column), so no call copies a 1e9-item file.
template <class T>
using Lengths1 = nb::ndarray<const T, nb::ndim<1>, nb::device::cpu>;
template <class T>
using Lengths2 = nb::ndarray<const T, nb::ndim<2>, nb::device::cpu>;

// Row visits, (nv, 4) int64: as this module hands them out.
using VisitsIn = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Out2 = nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>;

template <class T>
Column<T> column(const Lengths1<T>& a) {
    return {a.data(), static_cast<int64_t>(a.stride(0))};
}

template <class T>
Matrix<T> matrix(const Lengths2<T>& a) {
    return {a.data(), static_cast<int64_t>(a.shape(0)), static_cast<int64_t>(a.shape(1)),
            static_cast<int64_t>(a.stride(0)), static_cast<int64_t>(a.stride(1))};
}

int64_t size_of(const In<int64_t>& a) { return static_cast<int64_t>(a.shape(0)); }

WindowBlocks window(int64_t n, int64_t block, int64_t rotation, const In<int64_t>& blocks) {
    return {n, block, rotation, blocks.data(), size_of(blocks)};
}

// A (rows, cols) numpy array that owns `buffer` (call with the GIL held). A buffer used to less
// than half of its size is fitted first, as to_numpy does.
Out2 to_numpy2(Buffer<int64_t>&& buffer, int64_t rows, int64_t cols) {
    buffer.used = rows * cols;
    if (buffer.used < buffer.capacity / 2 && buffer.capacity > 4096) {
        Buffer<int64_t> fitted(buffer.used);
        std::copy(buffer.get(), buffer.get() + buffer.used, fitted.get());
        buffer = std::move(fitted);
    }
    int64_t* raw = buffer.data.release();
    nb::capsule owner(raw, [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
    size_t shape[2] = {static_cast<size_t>(rows), static_cast<size_t>(cols)};
    return Out2(raw, 2, shape, owner);
}

Out<int64_t> window_items_py(int64_t n, int64_t block, int64_t rotation, In<int64_t> blocks) {
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = window_items(window(n, block, rotation, blocks));
    }
    return to_numpy(std::move(out));
}

template <class T>
Out2 gather_rows_py(Lengths2<T> src, In<int64_t> items) {
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = gather_rows(matrix(src), items.data(), size_of(items));
    }
    return to_numpy2(std::move(out), size_of(items), static_cast<int64_t>(src.shape(1)));
}

template <class T>
nb::tuple scan_lengths_py(Lengths2<T> src) {
    LengthScan s;
    {
        nb::gil_scoped_release nogil;
        s = scan_lengths(matrix(src));
    }
    return nb::make_tuple(s.lowest, s.highest, s.size_lo, s.arg_lo, s.size_hi, s.arg_hi);
}

template <class T>
nb::tuple window_order_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                          In<int64_t> blocks, int64_t span, uint64_t key) {
    CountingOrder out;
    {
        nb::gil_scoped_release nogil;
        out = window_order(column(sizes), window(n, block, rotation, blocks), span, key);
    }
    return nb::make_tuple(to_numpy(std::move(out.order)), to_numpy(std::move(out.starts)));
}

Out<int64_t> budget_ends_runs1_py(In<int64_t> starts, int64_t runs, int64_t max_tokens,
                                  int64_t max_sentences) {
    Buffer<int64_t> ends;
    {
        nb::gil_scoped_release nogil;
        ends = Buffer<int64_t>(std::max(starts(runs), int64_t(1)));
        ends.used = budget_ends_runs1(starts.data(), runs, max_tokens, max_sentences, ends.get());
    }
    return to_numpy(std::move(ends));
}

template <class T>
nb::tuple budget_window_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                           In<int64_t> blocks, int64_t span, uint64_t key, int64_t limit,
                           int64_t max_tokens, int64_t max_sentences, int64_t multiple) {
    CountingOrder order;
    Buffer<int64_t> ends;
    int64_t kept;
    {
        nb::gil_scoped_release nogil;
        order = window_order(column(sizes), window(n, block, rotation, blocks), span, key);
        int64_t runs = std::min(span, limit + 1);
        kept = order.starts[runs];
        ends = budget_ends(order.starts.get(), runs, max_tokens, max_sentences, multiple);
        order.starts = Buffer<int64_t>();
    }
    return nb::make_tuple(to_numpy(std::move(order.order)), kept, to_numpy(std::move(ends)));
}

template <class T>
int64_t budget_window_count_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                               In<int64_t> blocks, int64_t span, int64_t limit,
                               int64_t max_tokens, int64_t max_sentences, int64_t multiple) {
    nb::gil_scoped_release nogil;
    Buffer<int64_t> starts = window_histogram(column(sizes), window(n, block, rotation, blocks),
                                              span);
    int64_t runs = std::min(span, limit + 1);
    return budget_ends_count(starts.get(), runs, max_tokens, max_sentences, multiple);
}

// Room for one visit per item, as numpy's empty gave it: the pages past the visits made are
// never touched, and a window's visits (often about one per item) are handed out in place.
Buffer<int64_t> visit_room(int64_t items) {
    return Buffer<int64_t>(VISIT * std::max(items, int64_t(1)));
}

nb::tuple best_fit_runs_py(In<int64_t> starts, int64_t capacity, int64_t max_per_row) {
    Buffer<int64_t> row_of;
    FitRuns fit;
    {
        nb::gil_scoped_release nogil;
        int64_t num_starts = size_of(starts);
        int64_t n = starts(num_starts - 1);
        Buffer<int64_t> room = visit_room(n);
        fit = best_fit_runs(starts.data(), num_starts, capacity, max_per_row, room.get());
        row_of = Buffer<int64_t>(n);
        for (const int64_t* v = room.get(); v < room.get() + VISIT * fit.visits; v += VISIT)
            for (int64_t p = v[FIRST]; p < v[FIRST] + v[ITEMS]; ++p) row_of[p] = v[ROW];
    }
    return nb::make_tuple(to_numpy(std::move(row_of)), fit.rows);
}

nb::tuple best_fit_visits_py(In<int64_t> starts, int64_t capacity, int64_t max_per_row) {
    Buffer<int64_t> room;
    FitRuns fit;
    {
        nb::gil_scoped_release nogil;
        int64_t num_starts = size_of(starts);
        room = visit_room(starts(num_starts - 1));
        fit = best_fit_runs(starts.data(), num_starts, capacity, max_per_row, room.get());
    }
    return nb::make_tuple(to_numpy2(std::move(room), fit.visits, VISIT), fit.rows);
}

template <class T>
nb::tuple pack_window_rows_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                              In<int64_t> blocks, int64_t span, uint64_t key, int64_t capacity,
                              int64_t max_per_row) {
    CountingOrder order;
    Buffer<int64_t> room;
    FitRuns fit;
    {
        nb::gil_scoped_release nogil;
        order = window_order(column(sizes), window(n, block, rotation, blocks), span, key);
        room = visit_room(order.order.used);
        fit = best_fit_runs(order.starts.get(), span + 1, capacity, max_per_row, room.get());
        order.starts = Buffer<int64_t>();
    }
    return nb::make_tuple(to_numpy(std::move(order.order)),
                          to_numpy2(std::move(room), fit.visits, VISIT), fit.rows);
}

template <class T>
int64_t pack_window_count_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                             In<int64_t> blocks, int64_t span, int64_t capacity,
                             int64_t max_per_row) {
    nb::gil_scoped_release nogil;
    Buffer<int64_t> starts = window_histogram(column(sizes), window(n, block, rotation, blocks),
                                              span);
    return best_fit_runs(starts.get(), span + 1, capacity, max_per_row, nullptr).rows;
}

nb::tuple scatter_visits_py(In<int64_t> order, VisitsIn visits, In<int64_t> row_rank) {
    int64_t n = size_of(order), num_rows = size_of(row_rank);
    Buffer<int64_t> out(n);
    Buffer<int64_t> bounds = zeros<int64_t>(num_rows + 1);
    {
        nb::gil_scoped_release nogil;
        scatter_visits(order.data(), n, visits.data(), static_cast<int64_t>(visits.shape(0)),
                       row_rank.data(), num_rows, out.get(), bounds.get());
    }
    return nb::make_tuple(to_numpy(std::move(out)), to_numpy(std::move(bounds)));
}

Out<int64_t> visit_lengths_py(VisitsIn visits, In<int64_t> row_rank, In<int64_t> bounds) {
    int64_t num_rows = size_of(row_rank);
    Buffer<int64_t> lens(bounds(num_rows));
    {
        nb::gil_scoped_release nogil;
        visit_lengths(visits.data(), static_cast<int64_t>(visits.shape(0)), row_rank.data(),
                      num_rows, bounds.data(), lens.get());
    }
    return to_numpy(std::move(lens));
}

}  // namespace

void bind_windows(nb::module_& m) {
    m.def("window_items", &window_items_py, nb::arg("n"), nb::arg("block"), nb::arg("rotation"),
          nb::arg("blocks"));
    m.def("budget_ends_runs1", &budget_ends_runs1_py, nb::arg("starts"), nb::arg("runs"),
          nb::arg("max_tokens"), nb::arg("max_sentences"));
    m.def("best_fit_runs", &best_fit_runs_py, nb::arg("starts"), nb::arg("capacity"),
          nb::arg("max_per_row"));
    m.def("best_fit_visits", &best_fit_visits_py, nb::arg("starts"), nb::arg("capacity"),
          nb::arg("max_per_row"));
    m.def("scatter_visits", &scatter_visits_py, nb::arg("order"), nb::arg("visits"),
          nb::arg("row_rank"));
    m.def("visit_lengths", &visit_lengths_py, nb::arg("visits"), nb::arg("row_rank"),
          nb::arg("bounds"));
    // The lengths come in every dtype padless.windows reads in place (source_lengths): int64
    // first, then the narrower ones.
#define DEF(T)                                                                                 \
    m.def("gather_rows", &gather_rows_py<T>, nb::arg("src"), nb::arg("items"));                \
    m.def("scan_lengths", &scan_lengths_py<T>, nb::arg("src"));                                \
    m.def("window_order", &window_order_py<T>, nb::arg("sizes"), nb::arg("n"), nb::arg("block"), \
          nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"), nb::arg("key"));            \
    m.def("budget_window", &budget_window_py<T>, nb::arg("sizes"), nb::arg("n"),               \
          nb::arg("block"), nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"),           \
          nb::arg("key"), nb::arg("limit"), nb::arg("max_tokens"), nb::arg("max_sentences"),   \
          nb::arg("multiple"));                                                                \
    m.def("budget_window_count", &budget_window_count_py<T>, nb::arg("sizes"), nb::arg("n"),   \
          nb::arg("block"), nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"),           \
          nb::arg("limit"), nb::arg("max_tokens"), nb::arg("max_sentences"),                   \
          nb::arg("multiple"));                                                                \
    m.def("pack_window_rows", &pack_window_rows_py<T>, nb::arg("sizes"), nb::arg("n"),         \
          nb::arg("block"), nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"),           \
          nb::arg("key"), nb::arg("capacity"), nb::arg("max_per_row"));                        \
    m.def("pack_window_count", &pack_window_count_py<T>, nb::arg("sizes"), nb::arg("n"),       \
          nb::arg("block"), nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"),           \
          nb::arg("capacity"), nb::arg("max_per_row"));
    PADLESS_FOR_SIZES(DEF)
    DEF(int16_t)
    DEF(int8_t)
    DEF(uint8_t)
#undef DEF
}

}  // namespace padless
