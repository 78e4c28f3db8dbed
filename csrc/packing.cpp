// The packing family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_packing(nb::module_& m) { (void)m; }

}  // namespace padless
