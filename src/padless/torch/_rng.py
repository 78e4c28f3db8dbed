"""The random state of each training step as a checkpointable state, so resumed losses are bitwise.

A resumed run gets the same batches from a padless sampler, but not the same dropout masks: the
random generators (torch's CPU and CUDA ones, numpy's and python's global ones) start fresh in
the new process. Saving their state with the checkpoint is not enough on its own: restoring it
before ``iter(loader)`` is undone by the draw the DataLoader's iterator makes for its workers'
seeds, and at an epoch's end the uninterrupted run makes that draw (a new epoch's iterator)
between two steps while the resumed run does not.

:class:`StepRng` makes each step's random state a function of the checkpoint: ``begin()`` puts
the generators in the state ``end()`` captured after the previous step (or the one loaded from
a checkpoint), so whatever runs between two steps (a new epoch's iterator, validation, the
loader's own draws) cannot change what the next step draws. ``end()`` then moves the CPU
generators to a stream derived from that state, so what runs between steps does not draw the
very numbers the next step will draw.

torch only (numpy and python's ``random`` too): re-exported by ``padless.torch``, imported by
``padless.lightning``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

STATE_VERSION = 1
_KEYS = ("python", "numpy", "torch", "cuda")

__all__ = ["StepRng", "get_rng_state", "set_rng_state"]


def get_rng_state() -> dict[str, Any]:
    """The state of python's, numpy's and torch's (CPU and initialized CUDA) global generators.

    Only ints, bytes, lists and CPU tensors: a checkpoint holding it loads with
    ``torch.load(weights_only=True)``.
    """
    version, internal, gauss = random.getstate()
    legacy: Any = np.random.get_state(legacy=True)
    kind, keys, pos, has_gauss, cached = legacy
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return {
        "python": [version, internal, gauss],
        "numpy": [str(kind), np.asarray(keys, dtype="<u4").tobytes(), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": list(cuda),
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Put the global generators back in a state from :func:`get_rng_state`."""
    _check_rng(state, "state")
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.frombuffer(keys, dtype="<u4"), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_rng(state: Any, name: str) -> None:
    if not isinstance(state, Mapping) or any(key not in state for key in _KEYS):
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise TypeError(f"{name} must be a dict from get_rng_state() with keys {_KEYS}, got {got}")


def _fork() -> None:
    """Seed the CPU generators from a value drawn from them: a stream apart from their own.

    (``torch.default_generator`` rather than ``torch.manual_seed``, which also seeds every
    accelerator and costs about 100 µs.)
    """
    words = np.random.SeedSequence([random.getrandbits(64), 0x5EED]).generate_state(3)
    random.seed(int(words[0]))
    np.random.seed(int(words[1]))
    torch.default_generator.manual_seed(int(words[2]))


class StepRng:
    """Each training step's random state, saved and restored with the checkpoint.

    Call ``begin()`` right before a step's forward and ``end()`` after its optimizer step (or
    use ``with rng.step():``); save ``state_dict()`` in the checkpoint and, on resume,
    ``load_state_dict()`` it. The steps then draw exactly the random numbers (dropout masks,
    noise) of the uninterrupted run, mid-epoch and at an epoch's end alike. Randomness drawn
    *between* steps (random transforms in the loader's main process) is not covered; random
    transforms in DataLoader workers follow the loader's own seeds.

    Each process has its own state: under DDP save every rank's ``state_dict()`` (the Lightning
    callback ``padless.lightning.ExactResume`` gathers them for you).

    Cost: per step one save, one restore and one reseed of the generators: 0.1–0.2 ms on a
    busy 2-core CPU, mostly numpy's 2.5 KB state; ``state_dict()`` is about 14 KB.

    >>> import torch
    >>> rng = StepRng()
    >>> draws = []
    >>> for step in range(3):
    ...     with rng.step():
    ...         draws.append(torch.rand(1).item())
    ...     if step == 0:
    ...         saved = rng.state_dict()
    >>> resumed = StepRng()
    >>> resumed.load_state_dict(saved)
    >>> _ = torch.rand(5)  # a fresh process, a loader's draw: does not matter
    >>> again = []
    >>> for step in range(2):
    ...     with resumed.step():
    ...         again.append(torch.rand(1).item())
    >>> again == draws[1:]
    True
    """

    def __init__(self) -> None:
        self._next: dict[str, Any] | None = None

    def begin(self) -> None:
        """Put the generators in this step's state (nothing before the first step of a run)."""
        if self._next is not None:
            set_rng_state(self._next)

    def end(self) -> None:
        """Capture the next step's state, then move the generators to a stream apart from it."""
        self._next = get_rng_state()
        _fork()

    @contextmanager
    def step(self) -> Iterator[None]:
        """``begin()``, the body, ``end()`` (not ``end()`` when the body raises)."""
        self.begin()
        yield
        self.end()

    def state_dict(self) -> dict[str, Any]:
        """The state the next step starts from (``None`` inside before the first step)."""
        return {"version": STATE_VERSION, "next": self._next}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (a ``state_dict()``): the next ``begin()`` restores it."""
        if not isinstance(state, Mapping) or "next" not in state:
            got = type(state).__name__ if not isinstance(state, Mapping) else sorted(state)
            raise TypeError(f"state must be a dict from StepRng.state_dict(), got {got}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"state['version'] must be {STATE_VERSION} (a StepRng.state_dict()), "
                f"got {state.get('version')!r}"
            )
        if state["next"] is not None:
            _check_rng(state["next"], "state['next']")
            now = get_rng_state()  # tried now, not at the first begin(): then put back
            try:
                set_rng_state(state["next"])
            except Exception as err:  # noqa: BLE001 - any value the generators refuse
                raise ValueError(
                    f"state['next'] is not a generators' state StepRng.state_dict() saves: "
                    f"{type(err).__name__}: {err}"
                ) from None
            finally:
                set_rng_state(now)
        self._next = None if state["next"] is None else dict(state["next"])
