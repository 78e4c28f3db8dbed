import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# `make test`: fixed examples (derandomized), so every run of the suite checks the same cases.
settings.register_profile(
    "padless",
    max_examples=int(os.environ.get("PADLESS_EXAMPLES", "40")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# `make fuzz`: the same properties with random seeds and many more examples.
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("PADLESS_EXAMPLES", "1000")),
    deadline=None,
    derandomize=False,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("PADLESS_HYPOTHESIS", "padless"))


@pytest.fixture(scope="session")
def bible() -> np.ndarray:
    """Real (N, 2) en/es token lengths of the built-in corpus."""
    from padless import builtin_corpus

    return builtin_corpus(["en", "es"])


# the binding fuzzer's worker is a script its test starts, not a test module
collect_ignore = ["_fuzz_worker.py"]
