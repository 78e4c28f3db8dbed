// The placement family's binding: place_items, place_rounds, replay_lanes, cost_table (placement.hpp). It checks its arguments
// before it places anything (checks.hpp).
#include "placement.hpp"

#include <cmath>
#include <limits>

#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

// Refuse an `order` that is not a permutation of 0..n-1, naming its first bad entry.
void check_permutation(const char* kernel, In<int64_t> order, int64_t n) {
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < n; ++j) {
        const int64_t i = order(j);
        if (i < 0 || i >= n || seen[static_cast<size_t>(i)]) {
            refuse(kernel, entry("order", j, i) + " (order must be a permutation of 0.." +
                               text(n - 1) + ")");
        }
        seen[static_cast<size_t>(i)] = 1;
    }
}

nb::tuple place_items_py(In<int64_t> order, In<int64_t> widths, In<double> times,
                         In<int64_t> tokens, int64_t lanes, int64_t slots, int64_t max_tokens,
                         bool aligned, double limit) {
    const char* kernel = "place_items";
    const int64_t n = static_cast<int64_t>(widths.shape(0));
    check_same_size(kernel, "widths", n, "order", static_cast<int64_t>(order.shape(0)));
    check_same_size(kernel, "widths", n, "times", static_cast<int64_t>(times.shape(0)));
    check_same_size(kernel, "widths", n, "tokens", static_cast<int64_t>(tokens.shape(0)));
    check_scalar(kernel, "lanes", lanes, 1, int64_t(1) << 20, "must be in [1, 2**20]");
    check_scalar(kernel, "slots", slots, 1, int64_t(1) << 20, "must be in [1, 2**20]");
    check_scalar(kernel, "max_tokens", max_tokens, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_memory(kernel, "slots * lanes", slots * lanes, 24.0);
    if (!(limit >= 0.0)) {
        refuse(kernel, named("limit", limit) + " must be >= 0 (inf: no limit)");
    }
    int64_t wmax = 1;
    check_permutation(kernel, order, n);
    for (int64_t j = 0; j < n; ++j) {
        if (widths(j) < 1 || widths(j) > lanes) {
            refuse(kernel, entry("widths", j, widths(j)) + " must be in [1, lanes = " +
                               text(lanes) + "]");
        }
        if (!(times(j) >= 0.0) || !std::isfinite(times(j))) {
            refuse(kernel, entry("times", j, times(j)) + " must be a finite number >= 0");
        }
        if (tokens(j) < 0 || tokens(j) > MAX_COUNT) {
            refuse(kernel, entry("tokens", j, tokens(j)) + " must be in [0, 2**62]");
        }
        wmax = std::max(wmax, widths(j));
    }
    check_memory(kernel, "len(widths) * max(widths)", n * wmax, 8.0);
    Placed out;
    {
        nb::gil_scoped_release nogil;
        out = place_items(order.data(), widths.data(), times.data(), tokens.data(), n, lanes,
                          slots, max_tokens, wmax, aligned, limit);
    }
    return nb::make_tuple(out.failed, to_numpy(std::move(out.slot)),
                          to_numpy(std::move(out.start)), to_numpy(std::move(out.lanes)), wmax);
}

nb::tuple replay_lanes_py(In<int64_t> lanes_of, int64_t width, In<double> times,
                          In<int64_t> slots, int64_t lanes, bool barrier) {
    const char* kernel = "replay_lanes";
    const int64_t n = static_cast<int64_t>(times.shape(0));
    check_same_size(kernel, "times", n, "slots", static_cast<int64_t>(slots.shape(0)));
    check_scalar(kernel, "width", width, 1, int64_t(1) << 20, "must be in [1, 2**20]");
    check_scalar(kernel, "lanes", lanes, 1, int64_t(1) << 30, "must be in [1, 2**30]");
    if (static_cast<int64_t>(lanes_of.shape(0)) != sat_mul(n, width)) {
        refuse(kernel, "lanes_of holds " + text(static_cast<int64_t>(lanes_of.shape(0))) +
                           " entries, not len(times) * width = " + text(sat_mul(n, width)));
    }
    for (int64_t i = 0; i < n; ++i) {
        if (!(times(i) >= 0.0) || !std::isfinite(times(i))) {
            refuse(kernel, entry("times", i, times(i)) + " must be a finite number >= 0");
        }
        bool ended = false;
        for (int64_t k = 0; k < width; ++k) {
            const int64_t r = lanes_of(i * width + k);
            if (r < -1 || r >= lanes || (ended && r != -1) || (k == 0 && r < 0)) {
                refuse(kernel, entry("lanes_of", i * width + k, r) +
                                   " (each row: lanes in [0, lanes = " + text(lanes) +
                                   "), at least one, then -1 to its end)");
            }
            ended = ended || r < 0;
        }
    }
    check_memory(kernel, "lanes", lanes, 8.0);
    Buffer<double> start(n), free(lanes);
    {
        nb::gil_scoped_release nogil;
        replay_lanes(lanes_of.data(), width, times.data(), slots.data(), n, lanes, barrier,
                     start.get(), free.get());
    }
    return nb::make_tuple(to_numpy(std::move(start)), to_numpy(std::move(free)));
}


nb::tuple place_rounds_py(In<int64_t> order, In<int64_t> sizes, In<double> work,
                          In<int64_t> tokens, In<double> limits, int64_t lanes,
                          int64_t max_tokens) {
    const char* kernel = "place_rounds";
    const int64_t n = static_cast<int64_t>(order.shape(0));
    const int64_t n_sizes = static_cast<int64_t>(sizes.shape(0));
    check_same_size(kernel, "order", n, "limits", static_cast<int64_t>(limits.shape(0)));
    check_scalar(kernel, "lanes", lanes, 1, int64_t(1) << 20, "must be in [1, 2**20]");
    check_scalar(kernel, "max_tokens", max_tokens, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_scalar(kernel, "len(sizes)", n_sizes, 1, int64_t(64), "must be in [1, 64]");
    for (const char* name : {"work", "tokens"}) {
        const int64_t got = static_cast<int64_t>(
            name[0] == 'w' ? work.shape(0) : tokens.shape(0));
        if (got != sat_mul(n, n_sizes)) {
            refuse(kernel, std::string(name) + " holds " + text(got) +
                               " entries, not len(order) * len(sizes) = " +
                               text(sat_mul(n, n_sizes)));
        }
    }
    for (int64_t s = 0; s < n_sizes; ++s) {
        if (sizes(s) < 1 || sizes(s) > lanes || (s > 0 && sizes(s) <= sizes(s - 1))) {
            refuse(kernel, entry("sizes", s, sizes(s)) + " (sizes must ascend strictly, in [1, " +
                               "lanes = " + text(lanes) + "])");
        }
    }
    check_permutation(kernel, order, n);
    for (int64_t j = 0; j < n; ++j) {
        if (!(limits(j) >= 0.0)) {
            refuse(kernel, entry("limits", j, limits(j)) + " must be a number >= 0");
        }
    }
    for (int64_t j = 0; j < n * n_sizes; ++j) {
        if (!(work(j) >= 0.0)) {
            refuse(kernel, entry("work", j, work(j)) + " must be a number >= 0 (inf: not allowed)");
        }
        if (tokens(j) < 0 || tokens(j) > MAX_COUNT) {
            refuse(kernel, entry("tokens", j, tokens(j)) + " must be in [0, 2**62]");
        }
    }
    check_memory(kernel, "len(order)", n, 64.0);
    Rounds out;
    {
        nb::gil_scoped_release nogil;
        out = place_rounds(order.data(), sizes.data(), n_sizes, work.data(), tokens.data(),
                           limits.data(), n, lanes, max_tokens);
    }
    return nb::make_tuple(out.failed, to_numpy(std::move(out.round)),
                          to_numpy(std::move(out.first)), to_numpy(std::move(out.size)),
                          to_numpy(std::move(out.start)));
}

// The cost tables' shared arguments: one kmin per length, 9 finite coefficients >= 0 (forward
// linear, quadratic, per_sequence, exchange; the same of the backward; latency), degrees in
// [1, 2**20], lengths in [0, 2**62].
void check_cost_inputs(const char* kernel, In<int64_t> lengths, In<int64_t> ks,
                       In<int64_t> kmin, In<double> coefs) {
    const int64_t n = static_cast<int64_t>(lengths.shape(0));
    const int64_t n_ks = static_cast<int64_t>(ks.shape(0));
    check_same_size(kernel, "lengths", n, "kmin", static_cast<int64_t>(kmin.shape(0)));
    check_scalar(kernel, "len(coefs)", static_cast<int64_t>(coefs.shape(0)), 9, 9,
                 "must be 9 (forward linear, quadratic, per_sequence, exchange; the same of "
                 "the backward; latency)");
    for (int64_t j = 0; j < 9; ++j) {
        if (!(coefs(j) >= 0.0) || !std::isfinite(coefs(j))) {
            refuse(kernel, entry("coefs", j, coefs(j)) + " must be a finite number >= 0");
        }
    }
    for (int64_t j = 0; j < n_ks; ++j) {
        if (ks(j) < 1 || ks(j) > (int64_t(1) << 20)) {
            refuse(kernel, entry("ks", j, ks(j)) + " must be in [1, 2**20]");
        }
    }
    for (int64_t i = 0; i < n; ++i) {
        if (lengths(i) < 0 || lengths(i) > MAX_COUNT) {
            refuse(kernel, entry("lengths", i, lengths(i)) + " must be in [0, 2**62]");
        }
    }
}

nb::tuple cost_table_py(In<int64_t> lengths, In<int64_t> ks, In<int64_t> kmin,
                        In<double> coefs, double slack) {
    const char* kernel = "cost_table";
    const int64_t n = static_cast<int64_t>(lengths.shape(0));
    const int64_t n_ks = static_cast<int64_t>(ks.shape(0));
    check_cost_inputs(kernel, lengths, ks, kmin, coefs);
    if (!(slack >= 0.0) || !std::isfinite(slack)) {
        refuse(kernel, named("slack", slack) + " must be a finite number >= 0");
    }
    check_memory(kernel, "len(lengths) * len(ks)", sat_mul(n, n_ks), 16.0);
    Buffer<double> table(n * n_ks);
    Buffer<int64_t> fastest(n), widest(n);
    {
        nb::gil_scoped_release nogil;
        cost_table(lengths.data(), n, ks.data(), n_ks, kmin.data(), coefs.data(), table.get(),
                   fastest.get(), slack, widest.get());
    }
    return nb::make_tuple(to_numpy(std::move(table)), to_numpy(std::move(fastest)),
                          to_numpy(std::move(widest)));
}

nb::tuple rounds_tables_py(In<int64_t> lengths, In<int64_t> ks, In<int64_t> kmin,
                           In<double> coefs, int64_t cap) {
    const char* kernel = "rounds_tables";
    const int64_t n = static_cast<int64_t>(lengths.shape(0));
    const int64_t n_ks = static_cast<int64_t>(ks.shape(0));
    check_cost_inputs(kernel, lengths, ks, kmin, coefs);
    check_scalar(kernel, "len(ks)", n_ks, 1, int64_t(64), "must be in [1, 64]");
    check_scalar(kernel, "cap", cap, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_memory(kernel, "len(lengths) * len(ks)", sat_mul(n, n_ks), 40.0);
    Buffer<int64_t> tokens(n * n_ks);
    Buffer<double> times(n * n_ks), work_time(n * n_ks), work_quad(n * n_ks);
    Buffer<double> limit_time(n), limit_quad(n);
    {
        nb::gil_scoped_release nogil;
        rounds_tables(lengths.data(), n, ks.data(), n_ks, kmin.data(), coefs.data(), cap,
                      tokens.get(), times.get(), work_time.get(), work_quad.get(),
                      limit_time.get(), limit_quad.get());
    }
    return nb::make_tuple(to_numpy(std::move(tokens)), to_numpy(std::move(times)),
                          to_numpy(std::move(work_time)), to_numpy(std::move(work_quad)),
                          to_numpy(std::move(limit_time)), to_numpy(std::move(limit_quad)));
}

// pipeline: `count` orders (rows of `orders`, each a permutation of 0..len(forward)-1) of one set
// of micro-batch times, the makespan of each.
Out<double> pipeline_py(In<double> forward, In<double> backward,
                                                        int64_t stages, int64_t vpp,
                                                        In<int64_t> orders, int64_t count) {
    const char* kernel = "pipeline";
    const int64_t micro = static_cast<int64_t>(forward.shape(0));
    check_same_size(kernel, "forward", micro, "backward", static_cast<int64_t>(backward.shape(0)));
    check_scalar(kernel, "stages", stages, 1, int64_t(1) << 10, "must be in [1, 2**10]");
    check_scalar(kernel, "vpp", vpp, 1, int64_t(1) << 6, "must be in [1, 64]");
    check_scalar(kernel, "len(forward)", micro, 0, int64_t(1) << 20, "must be in [0, 2**20]");
    check_scalar(kernel, "count", count, 0, int64_t(1) << 30, "must be in [0, 2**30]");
    if (vpp > 1 && micro % stages != 0) {
        refuse(kernel, "len(forward) = " + text(micro) + " must be a multiple of stages = " +
                           text(stages) + " with vpp = " + text(vpp) +
                           " (the interleaved schedule runs micro-batches in groups of stages)");
    }
    for (int64_t m = 0; m < micro; ++m) {
        if (!(forward(m) >= 0.0) || !std::isfinite(forward(m))) {
            refuse(kernel, entry("forward", m, forward(m)) + " must be a finite number >= 0");
        }
        if (!(backward(m) >= 0.0) || !std::isfinite(backward(m))) {
            refuse(kernel, entry("backward", m, backward(m)) + " must be a finite number >= 0");
        }
    }
    if (micro == 0 && count > 1) {
        refuse(kernel, named("count", count) + " must be 0 or 1 with no micro-batches");
    }
    if (static_cast<int64_t>(orders.shape(0)) != sat_mul(count, micro)) {
        refuse(kernel, "orders holds " + text(static_cast<int64_t>(orders.shape(0))) +
                           " entries, not count * len(forward) = " + text(sat_mul(count, micro)));
    }
    std::vector<char> seen(static_cast<size_t>(micro), 0);
    for (int64_t r = 0; r < count; ++r) {
        std::fill(seen.begin(), seen.end(), char(0));
        for (int64_t j = 0; j < micro; ++j) {
            const int64_t i = orders(r * micro + j);
            if (i < 0 || i >= micro || seen[static_cast<size_t>(i)]) {
                refuse(kernel, entry("orders", r * micro + j, i) +
                                   " (each row of orders must be a permutation of 0.." +
                                   text(micro - 1) + ")");
            }
            seen[static_cast<size_t>(i)] = 1;
        }
    }
    check_memory(kernel, "len(forward) * stages * vpp", sat_mul(sat_mul(micro, stages), vpp),
                 16.0);
    check_memory(kernel, "count", count, 8.0);
    Buffer<double> out(count);
    {
        nb::gil_scoped_release nogil;
        std::vector<double> done(static_cast<size_t>(2 * micro * stages * vpp));
        std::vector<int64_t> pos(static_cast<size_t>(stages));
        std::vector<double> free_at(static_cast<size_t>(stages));
        for (int64_t r = 0; r < count; ++r) {
            out.get()[r] = pipeline(forward.data(), backward.data(), orders.data() + r * micro,
                                    micro, stages, vpp, done.data(), pos.data(), free_at.data());
        }
    }
    return to_numpy(std::move(out));
}

}  // namespace

void bind_placement(nb::module_& m) {
    m.def("place_items", &place_items_py, nb::arg("order"), nb::arg("widths"), nb::arg("times"),
          nb::arg("tokens"), nb::arg("lanes"), nb::arg("slots"), nb::arg("max_tokens"),
          nb::arg("aligned") = false,
          nb::arg("limit") = std::numeric_limits<double>::infinity());
    m.def("place_rounds", &place_rounds_py, nb::arg("order"), nb::arg("sizes"), nb::arg("work"),
          nb::arg("tokens"), nb::arg("limits"), nb::arg("lanes"), nb::arg("max_tokens"));
    m.def("cost_table", &cost_table_py, nb::arg("lengths"), nb::arg("ks"), nb::arg("kmin"),
          nb::arg("coefs"), nb::arg("slack") = 0.02);
    m.def("rounds_tables", &rounds_tables_py, nb::arg("lengths"), nb::arg("ks"), nb::arg("kmin"),
          nb::arg("coefs"), nb::arg("cap"));
    m.def("replay_lanes", &replay_lanes_py, nb::arg("lanes_of"), nb::arg("width"),
          nb::arg("times"), nb::arg("slots"), nb::arg("lanes"), nb::arg("barrier"));
    m.def("pipeline", &pipeline_py, nb::arg("forward"), nb::arg("backward"), nb::arg("stages"),
          nb::arg("vpp"), nb::arg("orders"), nb::arg("count"));
}

}  // namespace padless
