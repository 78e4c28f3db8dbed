// The buckets family's kernels and their bindings.
#include "common.hpp"

namespace padless {

void bind_buckets(nb::module_& m) { (void)m; }

}  // namespace padless
