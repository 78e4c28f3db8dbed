// The shapes family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_shapes(nb::module_& m) { (void)m; }

}  // namespace padless
