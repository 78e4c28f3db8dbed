// The placement family's binding: place_items (see placement.hpp). It checks its arguments
// before it places anything (checks.hpp).
#include "placement.hpp"

#include <cmath>

#include "checks.hpp"
#include "common.hpp"

namespace padless {
namespace {

nb::tuple place_items_py(In<int64_t> order, In<int64_t> widths, In<double> times,
                         In<int64_t> tokens, int64_t lanes, int64_t slots, int64_t max_tokens) {
    const char* kernel = "place_items";
    const int64_t n = static_cast<int64_t>(widths.shape(0));
    check_same_size(kernel, "widths", n, "order", static_cast<int64_t>(order.shape(0)));
    check_same_size(kernel, "widths", n, "times", static_cast<int64_t>(times.shape(0)));
    check_same_size(kernel, "widths", n, "tokens", static_cast<int64_t>(tokens.shape(0)));
    check_scalar(kernel, "lanes", lanes, 1, int64_t(1) << 20, "must be in [1, 2**20]");
    check_scalar(kernel, "slots", slots, 1, int64_t(1) << 20, "must be in [1, 2**20]");
    check_scalar(kernel, "max_tokens", max_tokens, 1, MAX_COUNT, "must be in [1, 2**62]");
    check_memory(kernel, "slots * lanes", slots * lanes, 24.0);
    int64_t wmax = 1;
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < n; ++j) {
        const int64_t i = order(j);
        if (i < 0 || i >= n || seen[static_cast<size_t>(i)]) {
            refuse(kernel, entry("order", j, i) + " (order must be a permutation of 0.." +
                               text(n - 1) + ")");
        }
        seen[static_cast<size_t>(i)] = 1;
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
                          slots, max_tokens, wmax);
    }
    return nb::make_tuple(out.failed, to_numpy(std::move(out.slot)),
                          to_numpy(std::move(out.start)), to_numpy(std::move(out.lanes)), wmax);
}

}  // namespace

void bind_placement(nb::module_& m) {
    m.def("place_items", &place_items_py, nb::arg("order"), nb::arg("widths"), nb::arg("times"),
          nb::arg("tokens"), nb::arg("lanes"), nb::arg("slots"), nb::arg("max_tokens"));
}

}  // namespace padless
