// The cost family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_cost(nb::module_& m) { (void)m; }

}  // namespace padless
