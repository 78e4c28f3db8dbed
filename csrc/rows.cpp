// The rows family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_rows(nb::module_& m) { (void)m; }

}  // namespace padless
