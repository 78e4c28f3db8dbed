// Bindings of the small shared families: rng, order, segments, and the greedy budget rule.
#include <string>

#include "budget.hpp"
#include "common.hpp"
#include "order.hpp"
#include "rng.hpp"
#include "segments.hpp"

namespace padless {
namespace {

Out<int64_t> random_below_py(uint64_t key, In<int64_t> bounds) {
    Buffer<int64_t> out(static_cast<int64_t>(bounds.shape(0)));
    {
        nb::gil_scoped_release nogil;
        uint64_t state = key;
        for (int64_t i = 0; i < out.used; ++i) {
            out[i] = below(state, static_cast<uint64_t>(bounds(i)));
        }
    }
    return to_numpy(std::move(out));
}

template <class T>
uint64_t hash_ints_py(In<T> values, uint64_t seed) {
    nb::gil_scoped_release nogil;
    return hash_ints(values.data(), static_cast<int64_t>(values.shape(0)), seed);
}

template <class K>
nb::tuple counting_order_py(In<K> keys, int64_t num_keys) {
    CountingOrder out;
    {
        nb::gil_scoped_release nogil;
        out = counting_order(keys.data(), static_cast<int64_t>(keys.shape(0)), num_keys);
    }
    return nb::make_tuple(to_numpy(std::move(out.order)), to_numpy(std::move(out.starts)));
}

template <class K>
nb::tuple counting_order_named_py(In<K> keys, int64_t num_keys, In<int64_t> names) {
    if (names.shape(0) != keys.shape(0)) {
        throw nb::value_error("counting_order_named: names must have one entry per key");
    }
    CountingOrder out;
    {
        nb::gil_scoped_release nogil;
        out = counting_order(keys.data(), static_cast<int64_t>(keys.shape(0)), num_keys,
                             names.data());
    }
    return nb::make_tuple(to_numpy(std::move(out.order)), to_numpy(std::move(out.starts)));
}

template <class V>
void shuffle_runs_py(InOut<V> values, In<int64_t> starts, uint64_t key) {
    nb::gil_scoped_release nogil;
    shuffle_runs(values.data(), starts.data(), static_cast<int64_t>(starts.shape(0)), key);
}

template <class T>
Out<T> segment_max_py(In<T> values, In<int64_t> offsets) {
    Buffer<T> out;
    {
        nb::gil_scoped_release nogil;
        out = segment_max(values.data(), offsets.data(), static_cast<int64_t>(offsets.shape(0)));
    }
    return to_numpy(std::move(out));
}

// Every picked segment in range, its bounds ordered within the values (an IndexError naming
// the first that is not).
void check_picked(const char* name, const In<int64_t>& values, const In<int64_t>& offsets,
                  const In<int64_t>& picked) {
    int64_t num_offsets = static_cast<int64_t>(offsets.shape(0));
    int64_t size = static_cast<int64_t>(values.shape(0));
    for (int64_t k = 0; k < static_cast<int64_t>(picked.shape(0)); ++k) {
        int64_t b = picked(k);
        if (b < 0 || b + 1 >= num_offsets || offsets(b) < 0 || offsets(b) > offsets(b + 1) ||
            offsets(b + 1) > size) {
            throw nb::index_error((std::string(name) + ": picked segment at position " +
                                   std::to_string(k) + " is out of range")
                                      .c_str());
        }
    }
}

// values[lo:hi] + offset as a Python list of ints: numpy's tolist() of the shifted slice in
// one pass, with no array in between (a batch a sampler yields in its step's form).
nb::list offset_list_py(In<int64_t> values, int64_t lo, int64_t hi, int64_t offset) {
    if (lo < 0 || hi < lo || hi > static_cast<int64_t>(values.shape(0))) {
        throw nb::index_error("offset_list: lo:hi out of range");
    }
    const int64_t* v = values.data();
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(hi - lo));
    if (out == nullptr) throw nb::python_error();
    nb::list list = nb::steal<nb::list>(out);
    for (int64_t i = lo; i < hi; ++i) {
        int64_t x;
        if (__builtin_add_overflow(v[i], offset, &x)) {
            throw nb::value_error("offset_list: a value plus offset passes int64");
        }
        PyObject* item = PyLong_FromLongLong(static_cast<long long>(x));
        if (item == nullptr) throw nb::python_error();
        PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i - lo), item);
    }
    return list;
}

Out<int64_t> take_segments_py(In<int64_t> values, In<int64_t> offsets, In<int64_t> picked) {
    check_picked("take_segments", values, offsets, picked);
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = take_segments(values.data(), offsets.data(), picked.data(),
                            static_cast<int64_t>(picked.shape(0)));
    }
    return to_numpy(std::move(out));
}

Out<int64_t> unnamed_segments_py(In<int64_t> values, In<int64_t> offsets, In<int64_t> picked,
                                 int64_t n) {
    if (n < 1) throw nb::value_error("unnamed_segments: n must be positive");
    check_picked("unnamed_segments", values, offsets, picked);
    int64_t count = static_cast<int64_t>(picked.shape(0));
    Buffer<int64_t> out;
    bool negative = false;
    {
        nb::gil_scoped_release nogil;
        out = unnamed_segments(values.data(), offsets.data(), picked.data(), count, n, negative);
    }
    if (negative) throw nb::value_error("unnamed_segments: values must be non-negative");
    return to_numpy(std::move(out));
}

template <class T>
Out<int64_t> budget_ends_runs_py(In<T> values, In<int64_t> starts, int64_t max_tokens,
                                 int64_t max_sentences, int64_t multiple) {
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = budget_ends_runs(values.data(), static_cast<int64_t>(values.shape(0)), starts.data(),
                               static_cast<int64_t>(starts.shape(0)), max_tokens, max_sentences,
                               multiple);
    }
    return to_numpy(std::move(out));
}

}  // namespace

void bind_base(nb::module_& m) {
    // the saturating helpers themselves, for the tests at the int64 limits
    m.def("mul_exceeds", &mul_exceeds, nb::arg("count"), nb::arg("size"), nb::arg("limit"));
    m.def("sat_add", &sat_add, nb::arg("a"), nb::arg("b"));
    m.def("sat_mul", &sat_mul, nb::arg("a"), nb::arg("b"));
    m.def("random_below", &random_below_py, nb::arg("key"), nb::arg("bounds"));
    m.def("stream_key", &stream_key, nb::arg("seed"), nb::arg("epoch"), nb::arg("stream"));
#define DEF(T)                                                                                 \
    m.def("hash_ints", &hash_ints_py<T>, nb::arg("values"), nb::arg("seed"));                  \
    m.def("counting_order", &counting_order_py<T>, nb::arg("keys"), nb::arg("num_keys"));      \
    m.def("counting_order_named", &counting_order_named_py<T>, nb::arg("keys"),                \
          nb::arg("num_keys"), nb::arg("names"));                                              \
    m.def("shuffle_runs", &shuffle_runs_py<T>, nb::arg("values").noconvert(), nb::arg("starts"), \
          nb::arg("key"));                                                                     \
    m.def("segment_max", &segment_max_py<T>, nb::arg("values"), nb::arg("offsets"));           \
    m.def("budget_ends_runs", &budget_ends_runs_py<T>, nb::arg("values"), nb::arg("starts"),   \
          nb::arg("max_tokens"), nb::arg("max_sentences"), nb::arg("multiple"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
    m.def("segment_max", &segment_max_py<double>, nb::arg("values"), nb::arg("offsets"));
    m.def("take_segments", &take_segments_py, nb::arg("values"), nb::arg("offsets"),
          nb::arg("picked"));
    m.def("offset_list", &offset_list_py, nb::arg("values"), nb::arg("lo"), nb::arg("hi"),
          nb::arg("offset"));
    m.def("unnamed_segments", &unnamed_segments_py, nb::arg("values"), nb::arg("offsets"),
          nb::arg("picked"), nb::arg("n"));
}

}  // namespace padless
