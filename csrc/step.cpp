// The step family's binding: step_fit (see step.hpp). It checks its arguments before it places
// anything (checks_b.hpp).
#include "step.hpp"

#include <cmath>
#include <string>

#include "checks.hpp"
#include "checks_b.hpp"
#include "common.hpp"

namespace padless {
namespace {

nb::tuple step_fit_py(In<int64_t> sizes, In<double> costs, int64_t bins, int64_t step,
                      int64_t capacity) {
    const char* k = "step_fit";
    const int64_t n = static_cast<int64_t>(sizes.shape(0));
    checks::same_size(k, "sizes", n, "costs", static_cast<int64_t>(costs.shape(0)));
    checks::in_range(k, "capacity", capacity, 1, MAX_COUNT);
    checks::in_range(k, "bins", bins, 0, MAX_COUNT);
    checks::in_range(k, "step", step, 1, MAX_COUNT);
    // a bin's cost, room and queue entry; the last try may reach bins + step
    check_memory(k, "bins + step", bins + step, 40);
    checks::all_in_range(k, "sizes", sizes.data(), n, 0, capacity, "an item fits one bin");
    const double* c = costs.data();
    for (int64_t i = 0; i < n; ++i) {
        if (!(c[i] >= 0.0) || !std::isfinite(c[i]))
            checks::refuse(k, "costs[" + checks::str(i) + "] = " + text(c[i]) +
                                  " must be a finite number >= 0");
    }
    StepFit fit;
    {
        nb::gil_scoped_release nogil;
        fit = step_fit(sizes.data(), c, n, bins, step, capacity);
    }
    return nb::make_tuple(to_numpy(std::move(fit.bin_of)), fit.bins);
}

}  // namespace

void bind_step(nb::module_& m) {
    m.def("step_fit", &step_fit_py, nb::arg("sizes"), nb::arg("costs"), nb::arg("bins"),
          nb::arg("step"), nb::arg("capacity"));
}

}  // namespace padless
