// The windows family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_windows(nb::module_& m) { (void)m; }

}  // namespace padless
