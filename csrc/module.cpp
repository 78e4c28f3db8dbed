// padless._core: the compiled kernels, one bind_<family> per family (see common.hpp).
#include "common.hpp"

namespace padless {
void bind_base(nb::module_& m);
void bind_budget(nb::module_& m);
void bind_streams(nb::module_& m);
void bind_shapes(nb::module_& m);
void bind_exact(nb::module_& m);
void bind_buckets(nb::module_& m);
void bind_packing(nb::module_& m);
void bind_cost(nb::module_& m);
void bind_windows(nb::module_& m);
void bind_feistel(nb::module_& m);
void bind_text(nb::module_& m);
void bind_rows(nb::module_& m);
void bind_shuffle(nb::module_& m);
void bind_collate(nb::module_& m);
void bind_ingest(nb::module_& m);
void bind_step(nb::module_& m);
void bind_placement(nb::module_& m);
}  // namespace padless

NB_MODULE(_core, m) {
    m.doc() = "padless's compiled kernels (each has a plain-Python reference in padless._kernels)";
    padless::bind_base(m);
    padless::bind_budget(m);
    padless::bind_streams(m);
    padless::bind_shapes(m);
    padless::bind_exact(m);
    padless::bind_buckets(m);
    padless::bind_packing(m);
    padless::bind_cost(m);
    padless::bind_windows(m);
    padless::bind_feistel(m);
    padless::bind_text(m);
    padless::bind_rows(m);
    padless::bind_shuffle(m);
    padless::bind_collate(m);
    padless::bind_ingest(m);
    padless::bind_step(m);
    padless::bind_placement(m);
}
