// The budget family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_budget(nb::module_& m) { (void)m; }

}  // namespace padless
