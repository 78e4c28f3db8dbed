// The windows family's bindings (the kernels are in windows.hpp). They run on Python threads,
// one window each: every one releases the GIL around its work.
#include <stdexcept>
#include <string>
#include <thread>

#include "checks.hpp"
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

// A window over n items: blocks of `block` positions, a rotation below n, each block number
// starting inside [0, n] (a block starting at n is empty). With `sizes`, the lengths read at
// the items: one per item.
void check_window(const char* kernel, int64_t n, int64_t block, int64_t rotation,
                  const In<int64_t>& blocks, int64_t num_sizes = -1) {
    // a block's end (its start, at most n, plus block) stays below 2**63
    check_scalar(kernel, "n", n, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_scalar(kernel, "block", block, 1, MAX_COUNT / 2, "must be in [1, 2**61]");
    if (rotation < 0 || rotation >= std::max(n, int64_t(1))) {
        refuse(kernel, named("rotation", rotation) + " must be in [0, n = " + text(n) + ")");
    }
    const int64_t last = n / block;  // the last block that starts inside [0, n]
    int64_t positions = 0;
    for (int64_t t = 0; t < size_of(blocks); ++t) {
        if (blocks(t) < 0 || blocks(t) > last) {
            refuse(kernel, entry("blocks", t, blocks(t)) + " must be in [0, " + text(last) +
                               "] (n = " + text(n) + " items in blocks of " + text(block) + ")");
        }
        const int64_t q0 = blocks(t) * block;
        positions = sat_add(positions, std::min(q0 + block, n) - q0);
    }
    if (positions > MAX_COUNT) {  // a block named again is read again
        refuse(kernel, "the blocks hold more than 2**62 positions in all");
    }
    if (num_sizes >= 0 && num_sizes != n) {
        refuse(kernel, "sizes holds " + text(num_sizes) + " lengths for n = " + text(n) +
                           " items (one per item)");
    }
}

// The span of the sizes (each in [0, span)).
void check_span(const char* kernel, int64_t span) {
    check_scalar(kernel, "span", span, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_memory(kernel, "span", span, 16);  // a counting sort's start and fill per size
}

// The item window_histogram stopped at (its size outside [0, span)).
template <class T>
[[noreturn]] void refuse_size(const char* kernel, const Lengths1<T>& sizes, int64_t item,
                              int64_t span) {
    refuse(kernel, entry("sizes", item, sizes(item)) + " is outside [0, span = " + text(span) +
                       ")");
}

// The budget of a window's batches: every planned run (sizes 0 .. runs - 1) that holds an item
// fits max_tokens (0: no limit), or a batch would close at every step, without end.
void check_runs_fit(const char* kernel, const int64_t* starts, int64_t runs, int64_t max_tokens,
                    const char* limit_name) {
    const int64_t first = max_tokens > 0 && max_tokens < runs ? max_tokens + 1 : runs;
    for (int64_t r = first; r < runs; ++r) {
        if (starts[r + 1] > starts[r]) {
            refuse(kernel, "an item of size " + text(r) + " exceeds " +
                               named(limit_name, max_tokens) + " (every item planned must fit)");
        }
    }
}

// The greedy rule's limits (0: none) and its multiple.
void check_budget(const char* kernel, int64_t max_tokens, int64_t max_sentences,
                  int64_t multiple) {
    check_limit(kernel, "max_tokens", max_tokens);
    check_limit(kernel, "max_sentences", max_sentences);
    check_scalar(kernel, "multiple", multiple, 1, INT64_MAX_, "must be >= 1");
}

// A packing's row capacity and its cap on items per row (0: none).
void check_rows(const char* kernel, int64_t capacity, int64_t max_per_row) {
    check_scalar(kernel, "capacity", capacity, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_memory(kernel, "capacity", capacity, 9);  // a stack head and a bit per space
    check_limit(kernel, "max_per_row", max_per_row);
}

// A (rows, cols) numpy array that owns `buffer` (call with the GIL held; see owned_array).
Out2 to_numpy2(Buffer<int64_t>&& buffer, int64_t rows, int64_t cols) {
    buffer.used = rows * cols;
    size_t shape[2] = {static_cast<size_t>(rows), static_cast<size_t>(cols)};
    return owned_array<Out2>(std::move(buffer), 2, shape);
}

Out<int64_t> window_items_py(int64_t n, int64_t block, int64_t rotation, In<int64_t> blocks) {
    check_window("window_items", n, block, rotation, blocks);
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = window_items(window(n, block, rotation, blocks));
    }
    return to_numpy(std::move(out));
}

template <class T>
Out2 gather_rows_py(Lengths2<T> src, In<int64_t> items) {
    const int64_t rows = static_cast<int64_t>(src.shape(0));
    for (int64_t i = 0; i < size_of(items); ++i) {
        if (items(i) < 0 || items(i) >= rows) {
            refuse("gather_rows", entry("items", i, items(i)) + " is outside [0, " + text(rows) +
                                      ") (the rows of src)");
        }
    }
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = gather_rows(matrix(src), items.data(), size_of(items));
    }
    return to_numpy2(std::move(out), size_of(items), static_cast<int64_t>(src.shape(1)));
}

template <class T>
nb::tuple scan_lengths_py(Lengths2<T> src) {
    if (src.shape(0) > 0 && src.shape(1) == 0) {
        refuse("scan_lengths", "src has " + text(static_cast<int64_t>(src.shape(0))) +
                                   " rows of no field (a row needs a length)");
    }
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
    const char* kernel = "window_order";
    check_window(kernel, n, block, rotation, blocks, static_cast<int64_t>(sizes.shape(0)));
    check_span(kernel, span);
    CountingOrder out;
    {
        nb::gil_scoped_release nogil;
        out = window_order(column(sizes), window(n, block, rotation, blocks), span, key);
    }
    if (out.bad >= 0) refuse_size(kernel, sizes, out.bad, span);
    return nb::make_tuple(to_numpy(std::move(out.order)), to_numpy(std::move(out.starts)));
}

Out<int64_t> budget_ends_runs1_py(In<int64_t> starts, int64_t runs, int64_t max_tokens,
                                  int64_t max_sentences) {
    const char* kernel = "budget_ends_runs1";
    check_limit(kernel, "max_tokens", max_tokens);
    check_limit(kernel, "max_sentences", max_sentences);
    // the runs read are the first `runs`: their runs + 1 bounds (starts may hold more)
    if (runs < 0 || size_of(starts) < runs + 1) {
        refuse(kernel, "starts holds " + text(size_of(starts)) + " bounds for runs = " +
                           text(runs) + " (runs + 1 of them at least)");
    }
    check_bounds(kernel, "starts", starts.data(), runs + 1, "the positions (2**62 at most)",
                 MAX_COUNT, true);
    check_runs_fit(kernel, starts.data(), runs, max_tokens, "max_tokens");
    check_memory(kernel, "starts[runs]", starts(runs), 8);  // room for a batch per item
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
    const char* kernel = "budget_window";
    check_window(kernel, n, block, rotation, blocks, static_cast<int64_t>(sizes.shape(0)));
    check_span(kernel, span);
    check_scalar(kernel, "limit", limit, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_budget(kernel, max_tokens, max_sentences, multiple);
    CountingOrder order;
    Buffer<int64_t> ends;
    int64_t kept = 0;
    const int64_t runs = std::min(span, limit + 1);
    bool fits = true;
    {
        nb::gil_scoped_release nogil;
        order = window_order(column(sizes), window(n, block, rotation, blocks), span, key);
        if (order.bad < 0) {
            for (int64_t r = max_tokens > 0 && max_tokens < runs ? max_tokens + 1 : runs;
                 r < runs; ++r)
                fits = fits && order.starts[r + 1] == order.starts[r];
        }
        if (order.bad < 0 && fits) {
            kept = order.starts[runs];
            ends = budget_ends(order.starts.get(), runs, max_tokens, max_sentences, multiple);
            order.starts = Buffer<int64_t>();
        }
    }
    if (order.bad >= 0) refuse_size(kernel, sizes, order.bad, span);
    if (!fits) check_runs_fit(kernel, order.starts.get(), runs, max_tokens, "max_tokens");
    return nb::make_tuple(to_numpy(std::move(order.order)), kept, to_numpy(std::move(ends)));
}

template <class T>
int64_t budget_window_count_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                               In<int64_t> blocks, int64_t span, int64_t limit,
                               int64_t max_tokens, int64_t max_sentences, int64_t multiple) {
    const char* kernel = "budget_window_count";
    check_window(kernel, n, block, rotation, blocks, static_cast<int64_t>(sizes.shape(0)));
    check_span(kernel, span);
    check_scalar(kernel, "limit", limit, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_budget(kernel, max_tokens, max_sentences, multiple);
    const int64_t runs = std::min(span, limit + 1);
    Buffer<int64_t> starts;
    int64_t bad, count = 0;
    bool fits = true;
    {
        nb::gil_scoped_release nogil;
        starts = window_histogram(column(sizes), window(n, block, rotation, blocks), span, bad);
        if (bad < 0) {
            for (int64_t r = max_tokens > 0 && max_tokens < runs ? max_tokens + 1 : runs;
                 r < runs; ++r)
                fits = fits && starts[r + 1] == starts[r];
        }
        if (bad < 0 && fits)
            count = budget_ends_count(starts.get(), runs, max_tokens, max_sentences, multiple);
    }
    if (bad >= 0) refuse_size(kernel, sizes, bad, span);
    if (!fits) check_runs_fit(kernel, starts.get(), runs, max_tokens, "max_tokens");
    return count;
}

// Room for one visit per item, as numpy's empty gave it: the pages past the visits made are
// never touched, and a window's visits (often about one per item) are handed out in place.
Buffer<int64_t> visit_room(int64_t items) {
    return Buffer<int64_t>(VISIT * std::max(items, int64_t(1)));
}

// best_fit_runs' visits themselves: a flat int64 array of (row, first, items, size) per visit.
Out<int64_t> best_fit_visits_py(In<int64_t> starts, int64_t capacity, int64_t max_per_row) {
    const char* kernel = "best_fit_visits";
    check_rows(kernel, capacity, max_per_row);
    const int64_t num_starts = size_of(starts);
    if (num_starts == 0) refuse(kernel, "starts is empty (it holds runs + 1 bounds)");
    check_bounds(kernel, "starts", starts.data(), num_starts, "the positions (2**62 at most)",
                 MAX_COUNT, true);
    check_runs_fit(kernel, starts.data(), num_starts - 1, capacity, "capacity");
    // room for a visit (4 int64) per item
    if (starts(num_starts - 1) > MAX_COUNT / VISIT) {
        refuse(kernel, entry("starts", num_starts - 1, starts(num_starts - 1)) +
                           " items: more than 2**60");
    }
    Buffer<int64_t> room;
    {
        nb::gil_scoped_release nogil;
        int64_t n = starts(num_starts - 1);
        room = visit_room(n);
        FitRuns fit = best_fit_runs(starts.data(), num_starts, capacity, max_per_row, room.get());
        room.used = VISIT * fit.visits;
    }
    return to_numpy(std::move(room));
}

template <class T, class I>
void width_scatter_py(Lengths1<T> widths, int64_t first_id, int64_t low, int64_t runs,
                      InOut<int64_t> cursor, InOut<I> index) {
    const char* kernel = "width_scatter";
    if (static_cast<int64_t>(cursor.shape(0)) < runs) {
        throw std::invalid_argument("width_scatter: cursor holds fewer than runs widths");
    }
    // a width below 0 would index the cursor before its start
    if (low < 0 || low > std::max(runs, int64_t(0))) {
        refuse(kernel, named("low", low) + " must be in [0, runs = " + text(runs) + "]");
    }
    // every id this chunk writes fits the index's type
    const int64_t count = static_cast<int64_t>(widths.shape(0));
    const int64_t top = std::numeric_limits<I>::max();
    if (first_id < 0 || first_id > top || (count > 0 && count - 1 > top - first_id)) {
        refuse(kernel, named("first_id", first_id) + " and " + text(count) +
                           " widths name ids outside [0, " + text(top) + "] (the index's type)");
    }
    bool ok;
    {
        nb::gil_scoped_release nogil;
        ok = width_scatter(column(widths), static_cast<int64_t>(widths.shape(0)), first_id, low,
                           runs, cursor.data(), index.data(), static_cast<int64_t>(index.shape(0)));
    }
    if (!ok) {
        throw std::invalid_argument(
            "width_scatter: a cursor passed the index's end (or is negative)");
    }
}

template <class T>
int64_t pack_window_count_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                             In<int64_t> blocks, int64_t span, int64_t capacity,
                             int64_t max_per_row) {
    const char* kernel = "pack_window_count";
    check_window(kernel, n, block, rotation, blocks, static_cast<int64_t>(sizes.shape(0)));
    check_span(kernel, span);
    check_rows(kernel, capacity, max_per_row);
    Buffer<int64_t> starts;
    int64_t bad, rows = 0;
    bool fits = true;
    {
        nb::gil_scoped_release nogil;
        starts = window_histogram(column(sizes), window(n, block, rotation, blocks), span, bad);
        if (bad < 0) {
            for (int64_t r = capacity + 1; r < span; ++r) fits = fits && starts[r + 1] == starts[r];
        }
        if (bad < 0 && fits) rows = best_fit_runs(starts.get(), span + 1, capacity, max_per_row,
                                                 nullptr).rows;
    }
    if (bad >= 0) refuse_size(kernel, sizes, bad, span);
    if (!fits) check_runs_fit(kernel, starts.get(), span, capacity, "capacity");
    return rows;
}

// Joins a thread when it goes out of scope with the thread still running (an exception on the
// way out), the GIL released meanwhile (it is held there).
struct JoinOnExit {
    std::thread& thread;
    ~JoinOnExit() {
        if (thread.joinable()) {
            nb::gil_scoped_release nogil;
            thread.join();
        }
    }
};

// A thread is worth starting from this many items on (a start costs tens of microseconds).
constexpr int64_t kThreadedItems = int64_t(1) << 20;

template <class T>
nb::tuple pack_rows_py(Lengths1<T> sizes, int64_t n, int64_t block, int64_t rotation,
                       In<int64_t> blocks, int64_t span, uint64_t key, int64_t capacity,
                       int64_t max_per_row, int64_t rows_per_batch, nb::callable row_order,
                       In<int64_t> names) {
    const char* kernel = "pack_rows";
    if (rows_per_batch < 1) throw std::invalid_argument("rows_per_batch must be positive");
    check_window(kernel, n, block, rotation, blocks, static_cast<int64_t>(sizes.shape(0)));
    check_span(kernel, span);
    check_rows(kernel, capacity, max_per_row);
    const int64_t num_names = static_cast<int64_t>(names.shape(0));
    if (num_names != 0 && num_names != static_cast<int64_t>(sizes.shape(0)))
        throw std::invalid_argument("pack_rows: names must be empty or one per size");
    const int64_t* named = num_names != 0 ? names.data() : nullptr;
    const WindowBlocks win = window(n, block, rotation, blocks);
    const Column<T> col = column(sizes);
    Buffer<int64_t> starts, order;
    RowFit fit;
    int64_t items = 0, real = 0, bad;
    bool fits = true;
    {
        nb::gil_scoped_release nogil;
        starts = window_histogram(col, win, span, bad);
        for (int64_t r = capacity + 1; bad < 0 && r < span; ++r)
            fits = fits && starts[r + 1] == starts[r];
        if (bad < 0 && fits) {
            fit = fit_rows(starts.get(), span + 1, capacity, max_per_row);
            items = starts[span];
            // the tokens placed, as numpy's int64 sum of the piece lengths (wrapping)
            uint64_t sum = 0;
            for (int64_t r = 1; r < span; ++r)
                sum += static_cast<uint64_t>(r) * static_cast<uint64_t>(starts[r + 1] - starts[r]);
            real = static_cast<int64_t>(sum);
            order = Buffer<int64_t>(items);
        }
    }
    if (bad >= 0) refuse_size(kernel, sizes, bad, span);
    if (!fits) throw std::invalid_argument("pack_rows: every size must be at most capacity");
    // The rows are known from the sizes alone: while the caller draws their order, a thread
    // makes the item order (counting sort, then the tie shuffle).
    auto sort_items = [&] {
        window_scatter(col, win, starts.get(), span, order.get(), named);
        shuffle_runs(order.get(), starts.get(), span + 1, key);
    };
    std::thread worker;
    JoinOnExit joiner{worker};
    if (items >= kThreadedItems) {
        worker = std::thread(sort_items);
    } else {
        nb::gil_scoped_release nogil;
        sort_items();
    }
    nb::object drawn = row_order(fit.num_rows);
    InOut<int64_t> final;
    if (!nb::try_cast(drawn, final)) {
        throw nb::type_error("pack_rows: row_order must return a writable 1-D int64 array");
    }
    const int64_t num_rows = fit.num_rows;
    if (static_cast<int64_t>(final.shape(0)) != num_rows)
        throw std::invalid_argument("row_order must give one entry per row");
    const int64_t batches = num_rows / rows_per_batch + (num_rows % rows_per_batch != 0);
    Buffer<int64_t> out_items = Buffer<int64_t>(items), lens;
    Buffer<int64_t> bounds = Buffer<int64_t>(num_rows + 1);
    Buffer<int64_t> offsets(batches + 1);
    bool ok;
    {
        nb::gil_scoped_release nogil;
        Buffer<int64_t> place = Buffer<int64_t>(num_rows);
        ok = row_places(final.data(), num_rows, rows_per_batch, fit.counts.get(), bounds.get(),
                        place.get());
        if (worker.joinable()) worker.join();
        if (ok) {
            for (int64_t b = 0; b <= batches; ++b)
                offsets[b] = bounds[std::min(b * rows_per_batch, num_rows)];
            // the items, then (the order freed: a plan's peak is two arrays of n) their sizes;
            // a copy of the places for the first pass, made over the counts, no longer needed
            int64_t* again = fit.counts.get();
            std::copy(place.get(), place.get() + num_rows, again);
            const int64_t* ord = order.get();
            const int64_t last = items - 1;  // walk position p is order[last - p]
            in_halves(num_rows, 1, [&](int64_t lo, int64_t hi) {
                place_visits(fit, starts.get(), span + 1, again, lo, hi, out_items.get(),
                             [ord, last](int64_t p, int64_t) { return ord[last - p]; });
            });
            order = Buffer<int64_t>();
            lens = Buffer<int64_t>(items);
            in_halves(num_rows, 1, [&](int64_t lo, int64_t hi) {
                place_visits(fit, starts.get(), span + 1, place.get(), lo, hi, lens.get(),
                             [](int64_t, int64_t s) { return s; });
            });
        }
    }
    if (!ok) throw std::invalid_argument("row_order must give a permutation of the rows");
    fit = RowFit();
    return nb::make_tuple(to_numpy(std::move(out_items)), to_numpy(std::move(bounds)),
                          to_numpy(std::move(lens)), to_numpy(std::move(offsets)), real);
}

}  // namespace

void bind_windows(nb::module_& m) {
    m.def("window_items", &window_items_py, nb::arg("n"), nb::arg("block"), nb::arg("rotation"),
          nb::arg("blocks"));
    m.def("budget_ends_runs1", &budget_ends_runs1_py, nb::arg("starts"), nb::arg("runs"),
          nb::arg("max_tokens"), nb::arg("max_sentences"));
    m.def("best_fit_visits", &best_fit_visits_py, nb::arg("starts"), nb::arg("capacity"),
          nb::arg("max_per_row"));
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
    m.def("pack_window_count", &pack_window_count_py<T>, nb::arg("sizes"), nb::arg("n"),       \
          nb::arg("block"), nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"),           \
          nb::arg("capacity"), nb::arg("max_per_row"));                                        \
    m.def("pack_rows", &pack_rows_py<T>, nb::arg("sizes"), nb::arg("n"), nb::arg("block"),     \
          nb::arg("rotation"), nb::arg("blocks"), nb::arg("span"), nb::arg("key"),             \
          nb::arg("capacity"), nb::arg("max_per_row"), nb::arg("rows_per_batch"),              \
          nb::arg("row_order"), nb::arg("names"));
    PADLESS_FOR_SIZES(DEF)
    DEF(int16_t)
#define SCATTER(T, I)                                                                          \
    m.def("width_scatter", &width_scatter_py<T, I>, nb::arg("widths"), nb::arg("first_id"),    \
          nb::arg("low"), nb::arg("runs"), nb::arg("cursor").noconvert(),                      \
          nb::arg("index").noconvert());
    SCATTER(int64_t, int32_t)
    SCATTER(int32_t, int32_t)
    SCATTER(int64_t, int64_t)
    SCATTER(int32_t, int64_t)
#undef SCATTER
    DEF(int8_t)
    DEF(uint8_t)
#undef DEF
}

}  // namespace padless
