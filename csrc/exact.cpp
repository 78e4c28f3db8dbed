// The exact family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_exact(nb::module_& m) { (void)m; }

}  // namespace padless
