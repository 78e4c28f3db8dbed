// The streams family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_streams(nb::module_& m) { (void)m; }

}  // namespace padless
