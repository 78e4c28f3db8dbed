// The feistel family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_feistel(nb::module_& m) { (void)m; }

}  // namespace padless
