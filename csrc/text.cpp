// The text family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_text(nb::module_& m) { (void)m; }

}  // namespace padless
