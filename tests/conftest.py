import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "padless",
    max_examples=int(os.environ.get("PADLESS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("padless")


@pytest.fixture(scope="session")
def bible() -> np.ndarray:
    """Real (N, 2) en/es token lengths of the built-in corpus."""
    from padless import builtin_corpus

    return builtin_corpus(["en", "es"])
