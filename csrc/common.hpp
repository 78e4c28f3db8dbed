// Shared by every kernel family: the array types the bindings take and give, and how a buffer
// filled with the GIL released becomes a numpy array.
//
// A family is `<family>.hpp` (the kernels: plain C++ over pointers and sizes, no Python) plus
// `<family>.cpp` (the kernels too long for a header, and `bind_<family>`, which exposes them).
// A binding releases the GIL around the work and touches Python objects only outside it.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>

#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <sys/resource.h>
#include <unistd.h>

namespace nb = nanobind;

namespace padless {

// A 1-D array a kernel reads: any numpy array of that dtype, read-only or memory-mapped ones
// included (converted to C order first when it is not contiguous).
template <class T>
using In = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A 1-D array a kernel writes in place: the caller's own buffer. Bind such an argument with
// `.noconvert()`, so that a wrong dtype is a TypeError rather than writes into a copy.
template <class T>
using InOut = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A new numpy array handed back to Python.
template <class T>
using Out = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

// Ask for transparent huge pages over a large allocation, as numpy does for its arrays (4 MiB and
// up): a kernel's first pass over a new output then takes one page fault per 2 MiB, not per
// 4 KiB (a 1e6-item int64 output: 2,048 faults otherwise, a few milliseconds).
inline void advise_huge_pages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < (size_t(1) << 22)) return;
    const uintptr_t page = 4096, at = reinterpret_cast<uintptr_t>(data);
    const uintptr_t first = (at + page - 1) & ~(page - 1), last = (at + bytes) & ~(page - 1);
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}

// Working memory a kernel sizes from a scalar argument (a key span, a row capacity, an index
// count), refused up front when it is more than a kernel may take: half the machine's physical
// memory (the plan's own inputs and outputs need the rest), or less where an address-space or
// data limit (ulimit -v / -d) says so. Past that, new[] would throw std::bad_alloc (a MemoryError
// from a tiny input; under AddressSanitizer a crash report), or an overcommitted allocation would
// get the process killed when its pages are touched. "<kernel>: <name> = v needs B bytes of
// working memory (b per unit), more than the L bytes a kernel may take here (...)". Call with
// the GIL held.
inline void check_memory(const char* kernel, const char* name, int64_t value, double bytes_each) {
    if (value <= 0) return;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double limit = pages > 0 && page > 0
                       ? static_cast<double>(pages) * static_cast<double>(page) / 2
                       : 1e300;  // unknown: new[] is the only judge
    for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
        struct rlimit bound;
        if (getrlimit(resource, &bound) == 0 && bound.rlim_cur != RLIM_INFINITY) {
            limit = std::min(limit, static_cast<double>(bound.rlim_cur));
        }
    }
    const double needed = static_cast<double>(value) * bytes_each;
    if (needed <= limit) return;
    char what[200];
    std::snprintf(what, sizeof what,
                  " needs %.0f bytes of working memory (%g per unit), more than the %.0f bytes "
                  "a kernel may take here (half the machine's memory, or the process's ulimit)",
                  needed, bytes_each, limit);
    throw nb::value_error(
        (std::string(kernel) + ": " + name + " = " + std::to_string(value) + what).c_str());
}

// What a kernel fills: `size` entries, uninitialised unless made by `zeros` (as numpy's empty
// and zeros), of which the first `used` become the array handed back.
template <class T>
struct Buffer {
    std::unique_ptr<T[]> data;
    int64_t used = 0;
    int64_t capacity = 0;

    Buffer() = default;
    explicit Buffer(int64_t size)
        : data(new T[size > 0 ? size : 1]), used(size), capacity(size) {
        advise_huge_pages(data.get(), static_cast<size_t>(size > 0 ? size : 0) * sizeof(T));
    }
    T& operator[](int64_t i) { return data[i]; }
    const T& operator[](int64_t i) const { return data[i]; }
    T* get() { return data.get(); }
};

template <class T>
Buffer<T> zeros(int64_t size) {
    Buffer<T> out(size);
    std::fill(out.get(), out.get() + (size > 0 ? size : 0), T(0));
    return out;
}

// The buffer as a numpy array of `shape` (ndim entries, `used` in all) that owns it (call with the
// GIL held). A buffer used to less than half of its size is copied to one of the right size
// first (an over-allocated result, such as batch ends sized for one batch per item, should not
// hold its unused pages).
template <class Array, class T>
Array owned_array(Buffer<T>&& buffer, size_t ndim, const size_t* shape) {
    if (buffer.used < buffer.capacity / 2 && buffer.capacity > 4096) {
        Buffer<T> fitted(buffer.used);
        std::copy(buffer.get(), buffer.get() + buffer.used, fitted.get());
        buffer = std::move(fitted);
    }
    T* raw = buffer.data.release();
    nb::capsule owner(raw, [](void* p) noexcept { delete[] static_cast<T*>(p); });
    return Array(raw, ndim, shape, owner);
}

// The buffer's `used` entries as a 1-D numpy array that owns them (call with the GIL held).
template <class T>
Out<T> to_numpy(Buffer<T>&& buffer) {
    size_t shape[1] = {static_cast<size_t>(buffer.used)};
    return owned_array<Out<T>>(std::move(buffer), 1, shape);
}

// A read-only view of an array's elements (for kernels written against index access).
template <class T>
struct View {
    const T* data;
    int64_t size;
    const T& operator[](int64_t i) const { return data[i]; }
};

template <class T>
View<T> view(const In<T>& a) {
    return {a.data(), static_cast<int64_t>(a.shape(0))};
}

template <class T>
View<T> view(const InOut<T>& a) {
    return {a.data(), static_cast<int64_t>(a.shape(0))};
}

}  // namespace padless

// The dtypes sizes and lengths come in, the widest first: nanobind tries overloads in order and,
// on a second pass, converts an argument of another dtype (a Python list...) to the first that
// takes it. `PADLESS_FOR_SIZES(DEF)` expands `DEF(T)` once per type.
#define PADLESS_FOR_SIZES(M) M(int64_t) M(int32_t) M(uint32_t) M(uint16_t)
