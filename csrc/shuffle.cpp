// The shuffle family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_shuffle(nb::module_& m) { (void)m; }

}  // namespace padless
