// Bindings of the small shared families: rng, order, segments, and the greedy budget rule.
#include <string>

#include "budget.hpp"
#include "checks.hpp"
#include "common.hpp"
#include "order.hpp"
#include "rng.hpp"
#include "segments.hpp"

namespace padless {
namespace {

// The saturating helpers take non-negative operands (sizes, counts, budgets).
void check_operands(const char* kernel, int64_t a, const char* a_name, int64_t b,
                    const char* b_name) {
    check_scalar(kernel, a_name, a, 0, INT64_MAX_, "must be >= 0");
    check_scalar(kernel, b_name, b, 0, INT64_MAX_, "must be >= 0");
}

bool mul_exceeds_py(int64_t count, int64_t size, int64_t limit) {
    check_operands("mul_exceeds", count, "count", size, "size");
    check_scalar("mul_exceeds", "limit", limit, 0, INT64_MAX_, "must be >= 0");
    return mul_exceeds(count, size, limit);
}

int64_t sat_add_py(int64_t a, int64_t b) {
    check_operands("sat_add", a, "a", b, "b");
    return sat_add(a, b);
}

int64_t sat_mul_py(int64_t a, int64_t b) {
    check_operands("sat_mul", a, "a", b, "b");
    return sat_mul(a, b);
}

Out<int64_t> random_below_py(uint64_t key, In<int64_t> bounds) {
    // Lemire's draw is exact for bounds in [1, 2**32); past that its rejection loop never ends
    for (int64_t i = 0; i < static_cast<int64_t>(bounds.shape(0)); ++i) {
        if (bounds(i) < 1 || bounds(i) > int64_t(MASK32)) {
            refuse("random_below", entry("bounds", i, bounds(i)) + " must be in [1, 2**32)");
        }
    }
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

// The sort of `keys` (with `names` when not null), a key outside [0, num_keys) refused by its
// position (the kernel finds it in its histogram pass: no pass of its own).
template <class K>
nb::tuple counting_order_checked(const char* kernel, const In<K>& keys, int64_t num_keys,
                                 const int64_t* names) {
    check_scalar(kernel, "num_keys", num_keys, 0, MAX_COUNT, "must be in [0, 2**62]");
    check_memory(kernel, "num_keys", num_keys, 16);  // a start and a fill position per key
    CountingOrder out;
    {
        nb::gil_scoped_release nogil;
        out = counting_order(keys.data(), static_cast<int64_t>(keys.shape(0)), num_keys, names);
    }
    if (out.bad >= 0) {
        refuse(kernel, entry("keys", out.bad, keys(out.bad)) + " is outside [0, num_keys = " +
                           text(num_keys) + ")");
    }
    return nb::make_tuple(to_numpy(std::move(out.order)), to_numpy(std::move(out.starts)));
}

template <class K>
nb::tuple counting_order_py(In<K> keys, int64_t num_keys) {
    return counting_order_checked("counting_order", keys, num_keys, nullptr);
}

template <class K>
nb::tuple counting_order_named_py(In<K> keys, int64_t num_keys, In<int64_t> names) {
    if (names.shape(0) != keys.shape(0)) {
        throw nb::value_error("counting_order_named: names must have one entry per key");
    }
    return counting_order_checked("counting_order_named", keys, num_keys, names.data());
}

template <class V>
void shuffle_runs_py(InOut<V> values, In<int64_t> starts, uint64_t key) {
    const int64_t num_starts = static_cast<int64_t>(starts.shape(0));
    check_bounds("shuffle_runs", "starts", starts.data(), num_starts, "values",
                 static_cast<int64_t>(values.shape(0)));
    // a run's draws are bounded by its length, which must stay below 2**32
    for (int64_t r = 0; r + 1 < num_starts; ++r) {
        if (starts(r + 1) - starts(r) > int64_t(MASK32)) {
            refuse("shuffle_runs", "run " + text(r) + " holds " + text(starts(r + 1) - starts(r)) +
                                       " values, more than 2**32 - 1");
        }
    }
    nb::gil_scoped_release nogil;
    shuffle_runs(values.data(), starts.data(), num_starts, key);
}

template <class T>
Out<T> segment_max_py(In<T> values, In<int64_t> offsets) {
    check_bounds("segment_max", "offsets", offsets.data(), static_cast<int64_t>(offsets.shape(0)),
                 "values", static_cast<int64_t>(values.shape(0)));
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
    check_scalar("unnamed_segments", "n", n, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_memory("unnamed_segments", "n", n, 9);  // a bit per index, up to n indices back
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

// Every item of a budget walk within max_tokens (0: no limit).
std::string over_budget(const std::string& item, int64_t max_tokens) {
    return item + " exceeds max_tokens = " + text(max_tokens) + " (every item must fit the budget)";
}

template <class T>
Out<int64_t> budget_ends_runs_py(In<T> values, In<int64_t> starts, int64_t max_tokens,
                                 int64_t max_sentences, int64_t multiple) {
    const char* kernel = "budget_ends_runs";
    check_limit(kernel, "max_tokens", max_tokens);
    check_limit(kernel, "max_sentences", max_sentences);
    check_scalar(kernel, "multiple", multiple, 1, INT64_MAX_, "must be >= 1");
    const int64_t num_values = static_cast<int64_t>(values.shape(0));
    const int64_t num_starts = static_cast<int64_t>(starts.shape(0));
    if (num_starts > 0) {  // runs: positions starts[r]:starts[r+1] have size values[r]
        check_bounds(kernel, "starts", starts.data(), num_starts, "the positions (2**62 at most)",
                     MAX_COUNT, true);
        if (num_values != num_starts - 1) {
            refuse(kernel, "values holds " + text(num_values) + " sizes for " +
                               text(num_starts - 1) + " runs (starts holds runs + 1 bounds)");
        }
        for (int64_t r = 0; max_tokens > 0 && r < num_values; ++r) {
            if (starts(r + 1) > starts(r) && static_cast<int64_t>(values(r)) > max_tokens) {
                refuse(kernel, over_budget(entry("values", r, values(r)), max_tokens));
            }
        }
    }
    Buffer<int64_t> out;
    int64_t over_at = -1;
    {
        nb::gil_scoped_release nogil;
        out = budget_ends_runs(values.data(), num_values, starts.data(), num_starts, max_tokens,
                               max_sentences, multiple, &over_at);
    }
    if (over_at >= 0) {
        refuse(kernel, over_budget(entry("values", over_at, values(over_at)), max_tokens));
    }
    return to_numpy(std::move(out));
}

}  // namespace

void bind_base(nb::module_& m) {
    // the saturating helpers themselves, for the tests at the int64 limits
    m.def("mul_exceeds", &mul_exceeds_py, nb::arg("count"), nb::arg("size"), nb::arg("limit"));
    m.def("sat_add", &sat_add_py, nb::arg("a"), nb::arg("b"));
    m.def("sat_mul", &sat_mul_py, nb::arg("a"), nb::arg("b"));
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
