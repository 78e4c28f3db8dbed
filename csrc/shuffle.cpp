// The shuffle family's kernels (the lines ones; the others are templates in shuffle.hpp) and
// their bindings. Each binding takes the arrays of padless/shuffle/_kernels.py's functions: a
// lines kernel's `b64` is the uint64 view of b8's first whole words, of which only the length is
// used (the words are read from b8 itself).
#include "shuffle.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checks_b.hpp"
#include "common.hpp"

namespace padless {
namespace shuffle {

int64_t scatter_window_lines(const uint8_t* b8, int64_t size, int64_t words, int64_t lo,
                             int64_t hi, int64_t num_buckets, uint64_t& state, uint32_t* lengths,
                             int64_t room, uint8_t* dst, int64_t dst_lo, int64_t* bounds,
                             int64_t* counts) {
    const uint64_t first = state;
    const uint64_t bound = static_cast<uint64_t>(num_buckets);
    uint64_t rng = first;
    for (int64_t k = 0; k <= num_buckets; ++k) bounds[k] = 0;
    // this call's line counts, added to `counts` once every line is known to be sound
    std::vector<int64_t> added(static_cast<size_t>(num_buckets), 0);
    int64_t n = 0;
    int64_t pos = lo;
    // One scan: each line's length is kept, its label drawn, its bucket's size counted.
    while (pos < hi && n < room) {
        const int64_t nl = find_newline(b8, size, words, pos);
        if (nl < 0 || nl - pos >= int64_t{UINT32_MAX}) return -1;  // (no newline: checked)
        const int64_t end = nl + 1;
        lengths[n] = static_cast<uint32_t>(end - pos);
        int64_t b = below(rng, bound);
        bounds[b + 1] += end - pos;
        added[static_cast<size_t>(b)] += 1;
        ++n;
        pos = end;
    }
    for (int64_t k = 0; k < num_buckets; ++k) counts[k] += added[static_cast<size_t>(k)];
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

int64_t order_lines(const uint8_t* b8, int64_t size, int64_t words, const int64_t* bounds,
                    int64_t rows, int64_t stride, int64_t s, uint64_t& state, uint64_t* items,
                    int64_t capacity) {
    int64_t m = 0;
    for (int64_t r = 0; r < rows; ++r) {
        int64_t pos = bounds[r * stride + s];
        const int64_t hi = bounds[r * stride + s + 1];
        while (pos < hi) {
            const int64_t nl = find_newline(b8, size, words, pos);
            if (nl < 0 || m == capacity) return -1;  // (no newline: checked)
            const int64_t end = nl + 1;
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

bool gather_lines(const uint8_t* b8, int64_t size, int64_t words, const uint64_t* items,
                  int64_t& i, int64_t m, uint8_t* dst, int64_t& at, int64_t limit) {
    while (i < m) {
        if (i + AHEAD < m) {
            const uint8_t* ahead = b8 + (items[i + AHEAD] & START_MASK);
            prefetch(ahead);
            prefetch(ahead + 64);
        }
        const int64_t a = static_cast<int64_t>(items[i] & START_MASK);
        int64_t n = static_cast<int64_t>(items[i] >> START_BITS);
        if (n == LONG) {
            const int64_t nl = find_newline(b8, size, words, a);
            if (nl < 0) return false;
            n = nl + 1 - a;
        }
        if (at + n > limit) break;
        std::memcpy(dst + at, b8 + a, static_cast<size_t>(n));
        at += n;
        ++i;
    }
    return true;
}

}  // namespace shuffle

namespace {

using Bounds = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using checks::str;

int64_t size_of(const In<uint64_t>& a) { return static_cast<int64_t>(a.shape(0)); }
template <class A>
int64_t len(const A& a) {
    return static_cast<int64_t>(a.shape(0));
}

// The rules every shuffle kernel shares: a one-entry state, a bound for Lemire's draw.
template <class A>
void check_state(const char* k, const A& state) {
    if (state.shape(0) < 1)
        checks::refuse(k, "state must be a one-element uint64 array, got 0 entries");
}

void check_buckets(const char* k, int64_t num_buckets) {
    checks::in_range(k, "num_buckets", num_buckets, 1, checks::U32_MAX);
}

// A lines kernel's b64 is the uint64 view of b8's first whole words: only its length is used.
int64_t check_words(const char* k, const In<uint8_t>& b8, const In<uint64_t>& b64) {
    const int64_t words = size_of(b64);
    if (words > len(b8) / 8)
        checks::refuse(k, "b64 has " + str(words) + " words, more than the " + str(len(b8) / 8) +
                              " whole words of b8's " + str(len(b8)) + " bytes");
    return words;
}

// Records src[lo:hi] (words) of `width` words each.
template <class W>
void check_records(const char* k, const In<W>& src, int64_t lo, int64_t hi, int64_t width) {
    checks::at_least(k, "width", width, 1);
    checks::in_range(k, "lo", lo, 0, len(src));
    checks::in_range(k, "hi", hi, lo, len(src));
    if ((hi - lo) % width != 0)
        checks::refuse(k, "hi - lo = " + str(hi - lo) + " words must be whole records of width=" +
                              str(width));
}

// A piece b8[lo:hi] of lines: inside b8 and ending with a newline.
void check_piece(const char* k, const std::string& what, const In<uint8_t>& b8, int64_t lo,
                 int64_t hi) {
    if (lo < 0 || hi < lo || hi > len(b8))
        checks::refuse(k, what + " = [" + str(lo) + ", " + str(hi) + ") must be a range of b8's " +
                              str(len(b8)) + " bytes");
    if (hi > lo && b8.data()[hi - 1] != 10)
        checks::refuse(k, what + " = [" + str(lo) + ", " + str(hi) +
                              ") must end with a newline (lines are whole), got byte " +
                              str(b8.data()[hi - 1]) + " at " + str(hi - 1));
}

int64_t draw_below_py(InOut<uint64_t> state, int64_t bound) {
    const char* k = "draw_below";
    check_state(k, state);
    checks::in_range(k, "bound", bound, 1, checks::U32_MAX);
    nb::gil_scoped_release nogil;
    return below(state.data()[0], static_cast<uint64_t>(bound));
}

void shuffle_indices_py(int64_t m, InOut<uint64_t> state, InOut<int32_t> perm) {
    const char* k = "shuffle_indices";
    check_state(k, state);
    checks::in_range(k, "m", m, 0, std::min(len(perm), checks::I32_MAX));
    nb::gil_scoped_release nogil;
    shuffle::shuffle_indices(m, state.data()[0], perm.data());
}

template <class W>
void scatter_records_py(In<W> src, int64_t lo, int64_t hi, int64_t width, int64_t num_buckets,
                        uint64_t key, InOut<W> dst, int64_t dst_lo, InOut<int64_t> starts,
                        InOut<int64_t> counts) {
    const char* k = "scatter_records";
    check_records(k, src, lo, hi, width);
    check_buckets(k, num_buckets);
    checks::holds(k, "starts", len(starts), num_buckets + 1, "num_buckets + 1 bounds");
    checks::holds(k, "counts", len(counts), num_buckets, "one per bucket");
    checks::room(k, "dst", len(dst), "dst_lo", dst_lo, hi - lo);  // room for every record
    nb::gil_scoped_release nogil;
    shuffle::scatter_records(src.data(), lo, hi, width, num_buckets, key, dst.data(), dst_lo,
                             starts.data(), counts.data());
}

void count_labels_py(int64_t n, int64_t num_buckets, uint64_t key, InOut<int64_t> counts) {
    const char* k = "count_labels";
    checks::at_least(k, "n", n, 0);
    check_buckets(k, num_buckets);
    checks::holds(k, "counts", len(counts), num_buckets, "one per bucket");
    nb::gil_scoped_release nogil;
    shuffle::count_labels(n, num_buckets, key, counts.data());
}

template <class W>
void place_records_py(In<W> src, int64_t lo, int64_t hi, int64_t width, int64_t num_buckets,
                      InOut<uint64_t> state, InOut<W> dst, InOut<int64_t> fill) {
    const char* k = "place_records";
    check_records(k, src, lo, hi, width);
    check_buckets(k, num_buckets);
    check_state(k, state);
    checks::holds(k, "fill", len(fill), num_buckets, "one per bucket");
    // Where each bucket's records go depends on the labels: when the window could overrun a
    // bucket's room in dst, the labels are drawn once more (from a copy of the state) to count
    // what each bucket gets.
    const int64_t* at = fill.data();
    const int64_t size = len(dst), words = hi - lo;
    int64_t lowest = 0, highest = 0;
    for (int64_t b = 0; b < num_buckets; ++b) {
        lowest = std::min(lowest, at[b]);
        highest = std::max(highest, at[b]);
    }
    if (lowest < 0 || highest > size - words) {
        std::vector<int64_t> got(static_cast<size_t>(num_buckets), 0);
        {
            nb::gil_scoped_release nogil;
            shuffle::count_labels(words / width, num_buckets, state.data()[0], got.data());
        }
        for (int64_t b = 0; b < num_buckets; ++b) {
            const int64_t need = got[static_cast<size_t>(b)] * width;  // <= hi - lo
            if (need > 0 && (at[b] < 0 || at[b] > size - need))
                checks::refuse(k, "fill[" + str(b) + "] = " + str(at[b]) + ": bucket " + str(b) +
                                      " gets " + str(need) + " words of this window, which do not "
                                      "fit dst's " + str(size) + " words from there");
        }
    }
    nb::gil_scoped_release nogil;
    shuffle::place_records(src.data(), lo, hi, width, num_buckets, state.data()[0], dst.data(),
                           fill.data());
}

int64_t scatter_window_lines_py(In<uint8_t> b8, In<uint64_t> b64, int64_t lo, int64_t hi,
                                int64_t num_buckets, InOut<uint64_t> state,
                                InOut<uint32_t> lengths, InOut<uint8_t> dst, int64_t dst_lo,
                                InOut<int64_t> bounds, InOut<int64_t> counts) {
    const char* k = "scatter_window_lines";
    const int64_t words = check_words(k, b8, b64);
    check_piece(k, "[lo, hi)", b8, lo, hi);
    check_buckets(k, num_buckets);
    check_state(k, state);
    checks::holds(k, "lengths", len(lengths), 1, "room for the lengths of a scan's lines");
    checks::holds(k, "bounds", len(bounds), num_buckets + 1, "num_buckets + 1 bounds");
    checks::holds(k, "counts", len(counts), num_buckets, "one per bucket");
    checks::room(k, "dst", len(dst), "dst_lo", dst_lo, hi - lo);  // room for every line
    int64_t done;
    {
        nb::gil_scoped_release nogil;
        done = shuffle::scatter_window_lines(b8.data(), len(b8), words, lo, hi, num_buckets,
                                             state.data()[0], lengths.data(), len(lengths),
                                             dst.data(), dst_lo, bounds.data(), counts.data());
    }
    if (done < 0)
        checks::refuse(k, "a line of [lo, hi) holds 2**32 bytes or more (lengths are uint32)");
    return done;
}

int64_t order_lines_py(In<uint8_t> b8, In<uint64_t> b64, Bounds bounds, int64_t s,
                       InOut<uint64_t> state, InOut<uint64_t> items) {
    const char* k = "order_lines";
    const int64_t words = check_words(k, b8, b64);
    check_state(k, state);
    const int64_t rows = static_cast<int64_t>(bounds.shape(0));
    const int64_t stride = static_cast<int64_t>(bounds.shape(1));
    checks::in_range(k, "s", s, 0, stride - 2);  // bucket s is columns s and s + 1
    if (len(b8) > int64_t{1} << shuffle::START_BITS)
        checks::refuse(k, "b8 holds " + str(len(b8)) + " bytes; a line's start has 40 bits");
    const int64_t* bd = bounds.data();
    for (int64_t r = 0; r < rows; ++r)
        check_piece(k, "bounds[" + str(r) + ", s:s+2]", b8, bd[r * stride + s],
                    bd[r * stride + s + 1]);
    int64_t m;
    {
        nb::gil_scoped_release nogil;
        m = shuffle::order_lines(b8.data(), len(b8), words, bd, rows, stride, s, state.data()[0],
                                 items.data(), len(items));
    }
    if (m < 0)
        checks::refuse(k, "bucket " + str(s) + " has more lines than the " + str(len(items)) +
                              " entries of items");
    return m;
}

nb::tuple gather_lines_py(In<uint8_t> b8, In<uint64_t> b64, In<uint64_t> items, int64_t i,
                          int64_t m, InOut<uint8_t> dst, int64_t at, int64_t limit) {
    const char* k = "gather_lines";
    const int64_t words = check_words(k, b8, b64);
    const int64_t size = len(b8);
    checks::in_range(k, "m", m, 0, len(items));
    checks::in_range(k, "i", i, 0, m);
    checks::in_range(k, "limit", limit, 0, len(dst));
    checks::in_range(k, "at", at, 0, limit);
    // every line items[i:m] names lies in b8 (one pass over the items, not the bytes)
    const uint64_t* it = items.data();
    for (int64_t j = i; j < m; ++j) {
        const int64_t a = static_cast<int64_t>(it[j] & shuffle::START_MASK);
        const int64_t n = static_cast<int64_t>(it[j] >> shuffle::START_BITS);
        if (a >= size || n > size - a)
            checks::refuse(k, "items[" + str(j) + "] names a line of " +
                                  (n == shuffle::LONG ? "at least " : "") + str(n) +
                                  " bytes at " + str(a) + ", not within b8's " + str(size) +
                                  " bytes");
    }
    bool ok;
    {
        nb::gil_scoped_release nogil;
        ok = shuffle::gather_lines(b8.data(), size, words, it, i, m, dst.data(), at, limit);
    }
    if (!ok)
        checks::refuse(k, "items[" + str(i) + "]'s line (16 MiB or more, from " +
                              str(static_cast<int64_t>(it[i] & shuffle::START_MASK)) +
                              ") has no newline before b8 ends");
    return nb::make_tuple(i, at);
}

template <class W>
nb::tuple gather_records_py(In<W> src, int64_t width, int64_t lo, In<int32_t> perm, int64_t i,
                            int64_t m, InOut<W> dst, int64_t at, int64_t limit) {
    const char* k = "gather_records";
    checks::at_least(k, "width", width, 1);
    checks::in_range(k, "lo", lo, 0, len(src));
    checks::in_range(k, "m", m, 0, len(perm));
    checks::in_range(k, "i", i, 0, m);
    checks::in_range(k, "limit", limit, 0, len(dst));
    checks::in_range(k, "at", at, 0, limit);
    // the records this call can reach: those that fit dst[at:limit], and the few asked for ahead
    const int64_t reach = std::min(m - i, (limit - at) / width + shuffle::AHEAD + 1);
    const int64_t records = (len(src) - lo) / width;
    const int64_t bad = checks::first_outside(perm.data() + i, reach, 0, records - 1);
    if (bad >= 0)
        checks::refuse(k, "perm[" + str(i + bad) + "] = " + str(perm.data()[i + bad]) +
                              " must be in [0, " + str(records) + ") (a record of src[lo:], of " +
                              "width=" + str(width) + ")");
    {
        nb::gil_scoped_release nogil;
        shuffle::gather_records(src.data(), width, lo, perm.data(), i, m, dst.data(), at, limit);
    }
    return nb::make_tuple(i, at);
}

}  // namespace

void bind_shuffle(nb::module_& m) {
    // Arrays of bytes, words, positions and records are taken as they are (noconvert): a copy
    // converted to another dtype would wrap values silently (int64 positions into int32...).
    m.def("draw_below", &draw_below_py, nb::arg("state").noconvert(), nb::arg("bound"));
    m.def("shuffle_indices", &shuffle_indices_py, nb::arg("m"), nb::arg("state").noconvert(),
          nb::arg("perm").noconvert());
    m.def("count_labels", &count_labels_py, nb::arg("n"), nb::arg("num_buckets"), nb::arg("key"),
          nb::arg("counts").noconvert());
    m.def("scatter_window_lines", &scatter_window_lines_py, nb::arg("b8").noconvert(),
          nb::arg("b64").noconvert(), nb::arg("lo"), nb::arg("hi"), nb::arg("num_buckets"),
          nb::arg("state").noconvert(), nb::arg("lengths").noconvert(),
          nb::arg("dst").noconvert(), nb::arg("dst_lo"), nb::arg("bounds").noconvert(),
          nb::arg("counts").noconvert());
    m.def("order_lines", &order_lines_py, nb::arg("b8").noconvert(), nb::arg("b64").noconvert(),
          nb::arg("bounds"), nb::arg("s"), nb::arg("state").noconvert(),
          nb::arg("items").noconvert());
    m.def("gather_lines", &gather_lines_py, nb::arg("b8").noconvert(), nb::arg("b64").noconvert(),
          nb::arg("items").noconvert(), nb::arg("i"), nb::arg("m"), nb::arg("dst").noconvert(),
          nb::arg("at"), nb::arg("limit"));
#define DEF(W)                                                                                 \
    m.def("scatter_records", &scatter_records_py<W>, nb::arg("src").noconvert(), nb::arg("lo"), \
          nb::arg("hi"), nb::arg("width"), nb::arg("num_buckets"), nb::arg("key"),             \
          nb::arg("dst").noconvert(), nb::arg("dst_lo"), nb::arg("starts").noconvert(),        \
          nb::arg("counts").noconvert());                                                      \
    m.def("place_records", &place_records_py<W>, nb::arg("src").noconvert(), nb::arg("lo"),     \
          nb::arg("hi"), nb::arg("width"), nb::arg("num_buckets"), nb::arg("state").noconvert(), \
          nb::arg("dst").noconvert(), nb::arg("fill").noconvert());                            \
    m.def("gather_records", &gather_records_py<W>, nb::arg("src").noconvert(),                 \
          nb::arg("width"), nb::arg("lo"), nb::arg("perm").noconvert(), nb::arg("i"),          \
          nb::arg("m"), nb::arg("dst").noconvert(), nb::arg("at"), nb::arg("limit"));
    DEF(uint64_t) DEF(uint32_t) DEF(uint16_t) DEF(uint8_t)
#undef DEF
}

}  // namespace padless
