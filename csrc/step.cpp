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
                      int64_t capacity, int64_t world, double polish) {
    const char* k = "step_fit";
    const int64_t n = static_cast<int64_t>(sizes.shape(0));
    checks::same_size(k, "sizes", n, "costs", static_cast<int64_t>(costs.shape(0)));
    checks::in_range(k, "capacity", capacity, 1, MAX_COUNT);
    checks::in_range(k, "world", world, 1, MAX_COUNT);
    checks::in_range(k, "bins", bins, 0, MAX_COUNT);
    checks::in_range(k, "step", step, 1, MAX_COUNT);
    if (bins % world != 0)
        checks::refuse(k, "bins = " + checks::str(bins) + " must be a multiple of world = " +
                              checks::str(world) + " (whole slots)");
    if (step % world != 0)
        checks::refuse(k, "step = " + checks::str(step) + " must be a multiple of world = " +
                              checks::str(world) + " (whole slots)");
    if (!(polish >= 0.0))
        checks::refuse(k, "polish = " + text(polish) + " must be a number >= 0 (inf: never)");
    // the tries reach at most max(bins, n) + step bins (a bin per item holds them all); each
    // bin's cost, room, heap entries, tree nodes and slot figures
    const int64_t base = bins > n ? bins : n;
    check_memory(k, "bins + step", base > INT64_MAX - step ? INT64_MAX : base + step, 200);
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
        fit = step_fit(sizes.data(), c, n, bins, step, capacity, world, polish);
    }
    return nb::make_tuple(to_numpy(std::move(fit.bin_of)), fit.bins,
                          to_numpy(std::move(fit.load)), to_numpy(std::move(fit.tokens)));
}

}  // namespace

void bind_step(nb::module_& m) {
    m.def("step_fit", &step_fit_py, nb::arg("sizes"), nb::arg("costs"), nb::arg("bins"),
          nb::arg("step"), nb::arg("capacity"), nb::arg("world"), nb::arg("polish"));
}

}  // namespace padless
