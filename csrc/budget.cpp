// The budget family's kernels and their bindings: the check and gather of a given walk, its
// first fault, and the narrowing of sizes (padless/_kernels/budget.py runs the first and the
// last on parts of the range, on Python threads, with the GIL released here). The greedy rule
// itself is in budget.hpp (shared with the stream rounds) and bound in base.cpp.
#include "budget.hpp"
#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

constexpr int64_t GATHER_CHUNK = 4096;  // positions gathered before their repeat flags are set

// Positions lo:hi of a given walk: copy each index to `walk` and its size to `gathered`, and set
// its bit in `seen` (one bit per item). False at the first index out of [0, n_items) or set
// before, else true.
//
// By chunks: the chunk's reads of `sizes` are independent of each other (the memory system
// serves many at once), then its bits are set while its indices are in cache. Threads run
// disjoint lo:hi with a bit set each; bits two sets share are repeats across parts.
template <class O, class T>
bool gather_walk(const O* order, const T* sizes, int64_t n_items, int64_t lo, int64_t hi,
                 int64_t* walk, T* gathered, uint64_t* seen) {
    for (int64_t c0 = lo; c0 < hi; c0 += GATHER_CHUNK) {
        int64_t c1 = std::min(hi, c0 + GATHER_CHUNK);
        for (int64_t k = c0; k < c1; ++k) {
            int64_t i = static_cast<int64_t>(order[k]);
            if (i < 0 || i >= n_items) return false;
            walk[k] = i;
            gathered[k] = sizes[i];
        }
        for (int64_t k = c0; k < c1; ++k) {
            int64_t i = walk[k];
            uint64_t bit = uint64_t(1) << (i & 63);
            uint64_t word = seen[i >> 6];
            if (word & bit) return false;
            seen[i >> 6] = word | bit;
        }
    }
    return true;
}

// The first fault of a walk, one item at a time: -1 - k for an index out of [0, n_items) at
// position k, -1 - n - k for an index seen before at k, else 0.
template <class O>
int64_t walk_first_error(const O* order, int64_t n, int64_t n_items) {
    Buffer<uint64_t> seen = zeros<uint64_t>((n_items >> 6) + 1);
    for (int64_t k = 0; k < n; ++k) {
        int64_t i = static_cast<int64_t>(order[k]);
        if (i < 0 || i >= n_items) return -1 - k;
        uint64_t bit = uint64_t(1) << (i & 63);
        if (seen[i >> 6] & bit) return -1 - n - k;
        seen[i >> 6] |= bit;
    }
    return 0;
}

struct Narrowed {
    int64_t bits = 0;  // OR of every value
    int64_t top = 0;   // the largest value (0 at least)
};

// Copy sizes[lo:hi] into out[lo:hi] (uint16, the low bits); the OR of every value (a value
// outside [0, 2**k) sets a bit at k or above; a negative one, the sign bit) and the largest.
// Neither is tested one value at a time, so the loop has no exit and vectorises.
template <class T>
Narrowed narrow_into(const T* sizes, int64_t lo, int64_t hi, uint16_t* out) {
    int64_t bits = 0, top = 0;
    for (int64_t k = lo; k < hi; ++k) {
        int64_t s = static_cast<int64_t>(sizes[k]);
        bits |= s;
        top = std::max(top, s);
        out[k] = static_cast<uint16_t>(s);
    }
    return {bits, top};
}

template <class O, class T>
bool gather_walk_py(In<O> order, In<T> sizes, int64_t lo, int64_t hi, InOut<int64_t> walk,
                    InOut<T> gathered, InOut<uint64_t> seen) {
    int64_t n = static_cast<int64_t>(order.shape(0));
    int64_t n_items = static_cast<int64_t>(sizes.shape(0));
    if (lo < 0 || hi > n || lo > hi || static_cast<int64_t>(walk.shape(0)) < hi ||
        static_cast<int64_t>(gathered.shape(0)) < hi ||
        static_cast<int64_t>(seen.shape(0)) < (n_items >> 6) + 1)
        throw nb::index_error("gather_walk: lo:hi or an output array out of range");
    nb::gil_scoped_release nogil;
    return gather_walk(order.data(), sizes.data(), n_items, lo, hi, walk.data(), gathered.data(),
                       seen.data());
}

template <class O>
int64_t walk_first_error_py(In<O> order, int64_t n_items) {
    check_scalar("walk_first_error", "n_items", n_items, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_memory("walk_first_error", "n_items", n_items, 0.125);  // a bit per item
    nb::gil_scoped_release nogil;
    return walk_first_error(order.data(), static_cast<int64_t>(order.shape(0)), n_items);
}

template <class T>
nb::tuple narrow_into_py(In<T> sizes, int64_t lo, int64_t hi, InOut<uint16_t> out) {
    int64_t n = static_cast<int64_t>(sizes.shape(0));
    if (lo < 0 || hi > n || lo > hi || static_cast<int64_t>(out.shape(0)) < hi)
        throw nb::index_error("narrow_into: lo:hi out of range");
    Narrowed r;
    {
        nb::gil_scoped_release nogil;
        r = narrow_into(sizes.data(), lo, hi, out.data());
    }
    return nb::make_tuple(r.bits, r.top);
}

}  // namespace

void bind_budget(nb::module_& m) {
#define DEF_GATHER(O, T)                                                                        \
    m.def("gather_walk", &gather_walk_py<O, T>, nb::arg("order"), nb::arg("sizes"),             \
          nb::arg("lo"), nb::arg("hi"), nb::arg("walk").noconvert(),                            \
          nb::arg("gathered").noconvert(), nb::arg("seen").noconvert());
#define DEF(T) DEF_GATHER(int64_t, T) DEF_GATHER(int32_t, T)
    PADLESS_FOR_SIZES(DEF)
#undef DEF
#undef DEF_GATHER
    m.def("walk_first_error", &walk_first_error_py<int64_t>, nb::arg("order"), nb::arg("n_items"));
    m.def("walk_first_error", &walk_first_error_py<int32_t>, nb::arg("order"), nb::arg("n_items"));
    // narrow_sizes passes sizes wider than 2 bytes only
    m.def("narrow_into", &narrow_into_py<int64_t>, nb::arg("sizes"), nb::arg("lo"), nb::arg("hi"),
          nb::arg("out").noconvert());
    m.def("narrow_into", &narrow_into_py<int32_t>, nb::arg("sizes"), nb::arg("lo"), nb::arg("hi"),
          nb::arg("out").noconvert());
    m.def("narrow_into", &narrow_into_py<uint32_t>, nb::arg("sizes"), nb::arg("lo"),
          nb::arg("hi"), nb::arg("out").noconvert());
}

}  // namespace padless
