// The feistel family's bindings: the LM-stream permutation and row gathers.
//
// The gathers run once per batch, so their calls are kept cheap: the corpus and the batch come
// as buffers of any integer dtype, dispatched on here (one binding instead of one overload per
// (corpus, output) pair), and a corpus of another dtype is a TypeError, never a converted copy
// of a memory map; x and y are written in place, never converted either.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "checks_b.hpp"
#include "common.hpp"
#include "feistel.hpp"

namespace padless {
namespace {

// An integer array argument read through the buffer protocol. nanobind's ndarray import goes
// through __dlpack__ and costs about 0.2 us an array; a gather of an 8 x 2048 batch takes a few
// microseconds, so its arrays are taken this way (a view held until the call returns).
class IntArray {
public:
    // `ndim` dimensions of integers in native byte order, else a TypeError (`name` says which).
    IntArray(nb::handle obj, const char* name, int ndim, bool writable) {
        open(obj, name, ndim, writable);
    }
    // No error: ok() says whether obj is such an array.
    IntArray(nb::handle obj, int ndim) { try_open(obj, ndim, false); }
    IntArray(const IntArray&) = delete;
    IntArray& operator=(const IntArray&) = delete;
    ~IntArray() { release(); }

    void open(nb::handle obj, const char* name, int ndim, bool writable) {
        release();
        if (!try_open(obj, ndim, writable))
            throw nb::type_error((std::string(name) + " must be a " + std::to_string(ndim) +
                                  "-D" + (writable ? " writable" : "") +
                                  " numpy array of integers in native byte order")
                                     .c_str());
    }
    void release() {
        if (held_) PyBuffer_Release(&view_);
        held_ = ok_ = false;
    }

    bool ok() const { return ok_; }
    int64_t shape(int i) const { return static_cast<int64_t>(view_.shape[i]); }
    int64_t stride(int i) const { return static_cast<int64_t>(view_.strides[i]); }
    int64_t itemsize() const { return static_cast<int64_t>(view_.itemsize); }
    bool is_signed() const { return signed_; }
    void* data() const { return view_.buf; }
    bool c_contiguous() const { return PyBuffer_IsContiguous(&view_, 'C') != 0; }
    std::string dtype() const {  // for messages
        return (signed_ ? "int" : "uint") + std::to_string(8 * view_.itemsize);
    }
    template <class T>
    bool is() const {
        return view_.itemsize == static_cast<Py_ssize_t>(sizeof(T)) &&
               signed_ == std::is_signed<T>::value;
    }

private:
    bool try_open(nb::handle obj, int ndim, bool writable) {
        int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
            PyErr_Clear();
            return false;
        }
        held_ = true;
        // struct-module codes; '@' and '=' are native order, as is '<' on a little-endian host
        const char* f = view_.format;
        const uint16_t probe = 1;
        uint8_t low;
        std::memcpy(&low, &probe, 1);
        if (*f == '@' || *f == '=' || (*f == '<' && low == 1)) ++f;
        const char* codes = "bBhHiIlLqQ";
        const char* at = (f[0] != 0 && f[1] == 0) ? std::strchr(codes, f[0]) : nullptr;
        if (at == nullptr || view_.ndim != ndim || view_.strides[0] % view_.itemsize != 0)
            return false;
        signed_ = ((at - codes) % 2) == 0;
        ok_ = true;
        return true;
    }

    Py_buffer view_{};
    bool held_ = false;
    bool ok_ = false;
    bool signed_ = false;
};

// A 1-D array of T (starts, round keys): the argument's own buffer when it is one, else a
// contiguous copy of T made by numpy (a list, a strided array, another integer dtype).
template <class T>
class Exact {
public:
    Exact(nb::handle obj, const char* name) : view_(obj, 1) {
        if (view_.ok() && view_.is<T>() && view_.c_contiguous()) return;
        view_.release();
        nb::module_ np = nb::module_::import_("numpy");
        copy_ = np.attr("ascontiguousarray")(obj);
        view_.open(copy_, name, 1, false);  // integers, else a TypeError
        if (!view_.is<T>()) {
            view_.release();
            copy_ = copy_.attr("astype")(std::is_same<T, int64_t>::value ? "int64" : "uint64");
            view_.open(copy_, name, 1, false);
        }
    }
    const T* data() const { return static_cast<const T*>(view_.data()); }
    int64_t size() const { return view_.shape(0); }

private:
    nb::object copy_;  // declared first: released after the view of it
    IntArray view_;
};

// f(S{}) for the integer type S of the array's dtype.
template <class F>
void on_token_type(const IntArray& a, F&& f) {
    if (a.is<int64_t>()) return f(int64_t{});
    if (a.is<int32_t>()) return f(int32_t{});
    if (a.is<uint32_t>()) return f(uint32_t{});
    if (a.is<uint16_t>()) return f(uint16_t{});
    if (a.is<int16_t>()) return f(int16_t{});
    if (a.is<uint8_t>()) return f(uint8_t{});
    if (a.is<int8_t>()) return f(int8_t{});
    if (a.is<uint64_t>()) return f(uint64_t{});
    throw nb::type_error(("tokens must be an integer array, got " + a.dtype()).c_str());
}

// f(O{}) for the output type O of the array's dtype (padless.lm.OUT_DTYPES).
template <class F>
void on_out_type(const IntArray& a, F&& f) {
    if (a.is<int64_t>()) return f(int64_t{});
    if (a.is<int32_t>()) return f(int32_t{});
    if (a.is<uint16_t>()) return f(uint16_t{});
    throw nb::type_error(
        ("x and y must be int64, int32 or uint16 arrays, got " + a.dtype()).c_str());
}

// Row b of x and y reads src[starts[b] : starts[b] + w + 1]: refused (as numpy's indexing of
// the reference would) unless every such row lies in src; x and y must match.
void check_rows(const char* kernel, const IntArray& src, const int64_t* starts, int64_t rows,
                const IntArray& x, const IntArray& y) {
    if (x.shape(0) != y.shape(0) || x.shape(1) != y.shape(1) || x.itemsize() != y.itemsize() ||
        x.is_signed() != y.is_signed())
        checks::refuse(kernel, "x and y must have the same shape and dtype");
    if (!x.c_contiguous() || !y.c_contiguous())
        checks::refuse(kernel, "x and y must be C-contiguous");
    if (rows > x.shape(0))
        checks::refuse(kernel, "more starts than rows of x: " + checks::str(rows) + " > " +
                                   checks::str(x.shape(0)));
    const int64_t w = x.shape(1);
    const int64_t size = src.shape(0);
    if (w == 0) return;  // rows of nothing read nothing
    for (int64_t b = 0; b < rows; ++b) {
        if (starts[b] < 0 || starts[b] > size - w - 1)
            checks::refuse_index(kernel, "row " + std::to_string(b) + " starts at " +
                                             std::to_string(starts[b]) + ": its " +
                                             std::to_string(w + 1) +
                                             " tokens are not all within the " +
                                             std::to_string(size) + " tokens");
    }
}

void gather(const IntArray& src, const int64_t* starts, int64_t rows, const IntArray& x,
            const IntArray& y) {
    const int64_t w = x.shape(1);
    const int64_t stride = src.stride(0) / src.itemsize();
    on_token_type(src, [&](auto s) {
        using S = decltype(s);
        const S* tokens = static_cast<const S*>(src.data());
        on_out_type(x, [&](auto o) {
            using O = decltype(o);
            O* xs = static_cast<O*>(x.data());
            O* ys = static_cast<O*>(y.data());
            nb::gil_scoped_release nogil;
            gather_rows(tokens, stride, starts, rows, w, xs, ys);
        });
    });
}

Out<int64_t> feistel_permute_py(In<int64_t> ids, int64_t n, In<uint64_t> round_keys) {
    const char* k = "feistel_permute";
    const int64_t count = static_cast<int64_t>(ids.shape(0));
    // an id outside [0, n) would walk cycles that never come back below n
    checks::at_least(k, "n", n, count > 0 ? 1 : 0);
    checks::all_in_range(k, "ids", ids.data(), count, 0, n - 1,
                         "a position of the permuted [0, n=" + checks::str(n) + ")");
    Buffer<int64_t> out(count);
    {
        nb::gil_scoped_release nogil;
        feistel_permute(ids.data(), count, n, round_keys.data(),
                        static_cast<int64_t>(round_keys.shape(0)), out.get());
    }
    return to_numpy(std::move(out));
}

void lm_gather_py(nb::handle src, nb::handle starts, nb::handle x, nb::handle y) {
    IntArray tokens(src, "src", 1, false), xs(x, "x", 2, true), ys(y, "y", 2, true);
    Exact<int64_t> first(starts, "starts");
    check_rows("lm_gather", tokens, first.data(), first.size(), xs, ys);
    gather(tokens, first.data(), first.size(), xs, ys);
}

void lm_random_batch_py(nb::handle src, int64_t first, int64_t n, int64_t offset,
                        nb::handle round_keys, nb::handle x, nb::handle y) {
    const char* k = "lm_random_batch";
    IntArray tokens(src, "src", 1, false), xs(x, "x", 2, true), ys(y, "y", 2, true);
    Exact<uint64_t> keys(round_keys, "round_keys");
    const int64_t rows = xs.shape(0), w = xs.shape(1), size = tokens.shape(0);
    checks::at_least(k, "n", n, 1);
    if (rows > 0 && first > checks::I64_MAX - (rows - 1))
        checks::refuse(k, "first + rows - 1 = " + checks::str(first) + " + " +
                              checks::str(rows - 1) + " exceeds int64");
    // every one of the n subsequences (w + 1 tokens from offset + p * w) lies in src, so no
    // start can wrap past int64 either
    if (w > 0) {
        checks::in_range(k, "offset", offset, 0, std::max<int64_t>(size - w - 1, 0));
        if (size - w - 1 < 0 || n - 1 > (size - w - 1 - offset) / w)
            checks::refuse(k, "the n=" + checks::str(n) + " subsequences of " + checks::str(w) +
                                  " + 1 tokens from offset=" + checks::str(offset) +
                                  " do not all lie in the " + checks::str(size) + " tokens");
    }
    Buffer<int64_t> starts(rows);
    {
        nb::gil_scoped_release nogil;
        random_starts(first, n, offset, keys.data(), keys.size(), w, rows, starts.get());
    }
    check_rows(k, tokens, starts.get(), rows, xs, ys);
    gather(tokens, starts.get(), rows, xs, ys);
}

}  // namespace

void bind_feistel(nb::module_& m) {
    m.def("feistel_permute", &feistel_permute_py, nb::arg("ids"), nb::arg("n"),
          nb::arg("round_keys"));
    m.def("lm_gather", &lm_gather_py, nb::arg("src"), nb::arg("starts"), nb::arg("x"),
          nb::arg("y"));
    m.def("lm_random_batch", &lm_random_batch_py, nb::arg("src"), nb::arg("first"),
          nb::arg("n"), nb::arg("offset"), nb::arg("round_keys"), nb::arg("x"), nb::arg("y"));
}

}  // namespace padless
