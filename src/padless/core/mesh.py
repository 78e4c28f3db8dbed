"""The device mesh a global batch is placed on, and what a shard of a sequence costs on it.

A :class:`Mesh` is ``dp`` data-parallel groups of ``cp`` context-parallel ranks, repeated over
``pp`` pipeline stages. With a fixed ``cp`` every sequence is split over its whole group; with
``dynamic=True`` the ``dp·cp`` ranks of a stage are one pool and each sequence gets its own CP
degree ``k`` in ``1..cp`` (any integer, not only powers of two) within ``max_tokens`` tokens per
rank per micro-batch.

A :class:`MeshCost` predicts the seconds a pipeline stage spends on one shard: a sequence of
``L`` tokens split over ``k`` ranks (padded to a multiple of ``2·k``, Transformer Engine's THD
layout). Forward and backward each follow a :class:`padless.Cost` ``a·L + b·L² + c`` of the
whole sequence on one rank; on ``k`` ranks a shard computes ``a·L/k + c`` of per-token work and
``b·L²/k`` of attention, the attention in ``k`` ring steps of ``b·L²/k²``. Each of the ``k − 1``
exchanges passes ``L/k`` tokens' keys and values (``kv_bytes`` per token; twice that backward,
where their gradients go round too) over a link of ``bandwidth`` bytes/s and ``latency`` s, hidden
behind the ring step it overlaps:

    ``t(L, k) = a·L/k + c + b·L²/k² + (k − 1)·max(b·L²/k², bytes·L/k / bandwidth + latency)``

Without the exchange, every sequence at the largest CP degree would reach the lower bound; the
exchange (and ``c``, paid by every shard) is what makes a large degree cost.

>>> from padless import Cost
>>> cost = MeshCost(forward=Cost(linear=1e-6, quadratic=1e-10), backward=Cost(linear=2e-6,
...                 quadratic=2e-10), kv_bytes=65536, bandwidth=5e10, latency=1e-5)
>>> [round(float(cost.time(32768, k)) * 1e3, 1) for k in (1, 2, 4, 8)]  # ms: the exchange shows
[420.4, 210.2, 141.4, 130.2]
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np

from ._check import (
    check_bool,
    check_choice,
    check_int,
    check_real,
    check_record,
    positive_or_none,
)
from ._output import load_json, save_json
from .cost import Cost, as_cost

__all__ = ["Mesh", "MeshCost"]

KIND = "padless.MeshCost"
VERSION = 1
SCHEDULES = ("1f1b", "interleaved")
MAX_CP = 1024
#: most micro-batches of one step (the placement kernels' bound)
MAX_MICRO_BATCHES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Mesh:
    """``dp`` data-parallel groups × ``cp`` context-parallel ranks × ``pp`` pipeline stages.

    Args:
        dp: data-parallel groups.
        cp: context-parallel ranks per group; with ``dynamic`` the largest CP degree a sequence
            may get.
        pp: pipeline stages (1: none).
        dynamic: pool the ``dp·cp`` ranks of a stage and give each sequence its own CP degree
            (needs ``max_tokens``).
        max_tokens: most tokens (padded to ``2·k`` per sequence, divided by its degree ``k``) a
            rank holds in one micro-batch; None: no budget (fixed ``cp`` only).
        schedule: ``"1f1b"`` or ``"interleaved"`` (virtual stages, ``vpp ≥ 2``).
        vpp: virtual pipeline stages per device (1 with ``"1f1b"``).
        micro_batches: micro-batches per step, a multiple of ``vpp`` (and of ``pp`` when
            interleaved); None: the fewest the budget allows (at least ``pp``).
        aligned_groups: with ``dynamic``, a sequence of degree ``k`` takes ``k`` consecutive
            ranks starting at a multiple of ``k`` (so the runtime needs only ``⌊dp·cp / k⌋``
            process groups per degree, made up front); False: any ``k`` ranks.

    >>> Mesh.parse("dp=8,cp=4,pp=2,max_tokens=8192")
    Mesh(dp=8, cp=4, pp=2, dynamic=False, max_tokens=8192, schedule='1f1b', vpp=1, micro_batches=None, aligned_groups=False)
    >>> Mesh(dp=2, cp=4, dynamic=True, max_tokens=4096).ranks
    8
    """

    dp: int
    cp: int = 1
    pp: int = 1
    dynamic: bool = False
    max_tokens: int | None = None
    schedule: str = "1f1b"
    vpp: int = 1
    micro_batches: int | None = None
    aligned_groups: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("dp", "cp", "pp", "vpp"):
            set_(self, name, check_int(name, getattr(self, name), minimum=1))
        if self.cp > MAX_CP:
            raise ValueError(f"cp must be at most {MAX_CP}, got {self.cp}")
        set_(self, "dynamic", check_bool("dynamic", self.dynamic))
        set_(self, "aligned_groups", check_bool("aligned_groups", self.aligned_groups))
        if self.aligned_groups and not self.dynamic:
            raise ValueError(
                "aligned_groups=True needs dynamic=True (with a fixed cp every group is a data-"
                "parallel group, aligned already), got dynamic=False"
            )
        set_(self, "max_tokens", positive_or_none("max_tokens", self.max_tokens))
        set_(self, "schedule", check_choice("schedule", self.schedule, SCHEDULES))
        set_(self, "micro_batches", positive_or_none("micro_batches", self.micro_batches))
        if self.micro_batches is not None and self.micro_batches > MAX_MICRO_BATCHES:
            raise ValueError(f"micro_batches must be <= 2**20 per step, got {self.micro_batches}")
        if self.dynamic and self.max_tokens is None:
            raise ValueError(
                "dynamic=True needs max_tokens (the tokens a rank holds per micro-batch, which "
                "set each sequence's smallest CP degree), got max_tokens=None"
            )
        if self.schedule == "1f1b" and self.vpp != 1:
            raise ValueError(
                f"vpp must be 1 with schedule='1f1b', got vpp={self.vpp}; pass "
                "schedule='interleaved' for virtual stages"
            )
        if self.schedule == "interleaved" and (self.vpp < 2 or self.pp < 2):
            raise ValueError(
                "schedule='interleaved' needs pp >= 2 and vpp >= 2, got "
                f"pp={self.pp}, vpp={self.vpp}; use schedule='1f1b'"
            )
        if self.micro_batches is not None:
            multiple = self.multiple
            if self.micro_batches % multiple:
                raise ValueError(
                    f"micro_batches must be a multiple of {multiple} (vpp={self.vpp}"
                    f"{', pp' if self.schedule == 'interleaved' else ''}), got "
                    f"{self.micro_batches}"
                )

    @property
    def ranks(self) -> int:
        """Ranks of one pipeline stage: ``dp·cp``."""
        return self.dp * self.cp

    @property
    def world(self) -> int:
        """All ranks: ``dp·cp·pp``."""
        return self.dp * self.cp * self.pp

    @property
    def multiple(self) -> int:
        """What the micro-batch count is a multiple of: ``vpp`` (``lcm(vpp, pp)`` interleaved)."""
        if self.schedule == "interleaved":
            return self.vpp * self.pp // math.gcd(self.vpp, self.pp)
        return self.vpp

    def as_dict(self) -> dict[str, Any]:
        """The settings as a JSON-safe dict: ``Mesh(**m.as_dict()) == m``."""
        return dataclasses.asdict(self)

    @classmethod
    def parse(cls, text: str) -> Mesh:
        """A mesh from ``"dp=8,cp=4,pp=2"`` (keys: the constructor's; ``dynamic=1``).

        >>> Mesh.parse("dp=2, cp=4, dynamic=yes, max_tokens=4096").dynamic
        True
        """
        if not isinstance(text, str):
            raise TypeError(f"mesh must be a str such as 'dp=8,cp=4', got {type(text).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        out: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = (s.strip() for s in part.partition("="))
            if not sep or key not in fields:
                raise ValueError(
                    f"mesh must be key=value pairs with keys {sorted(fields)}, got {part!r}"
                )
            if key in out:
                raise ValueError(f"mesh must give each key once, got {key!r} twice in {text!r}")
            if key == "schedule":
                out[key] = value
            elif key in ("dynamic", "aligned_groups"):
                if value.lower() not in ("1", "0", "yes", "no", "true", "false"):
                    raise ValueError(f"mesh {key} must be yes or no, got {value!r}")
                out[key] = value.lower() in ("1", "yes", "true")
            else:
                try:
                    out[key] = int(value)
                except ValueError:
                    raise ValueError(f"mesh {key} must be an int, got {value!r}") from None
        if "dp" not in out:
            raise ValueError(f"mesh must give dp (e.g. 'dp=8,cp=4'), got {text!r}")
        return cls(**out)


def padded(lengths: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """Lengths padded to a multiple of ``2·k`` (unchanged where ``k == 1``), int64."""
    kk = np.asarray(k, dtype=np.int64)
    m = np.where(kk == 1, 1, 2 * kk)
    return -(-np.asarray(lengths, dtype=np.int64) // m) * m


def rank_tokens(lengths: Any, k: Any) -> np.ndarray:
    """Tokens one of ``k`` ranks holds of each sequence (padded to ``2·k``, divided by ``k``)."""
    kk = np.asarray(k, dtype=np.int64)
    return padded(np.asarray(lengths, dtype=np.int64), kk) // kk


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshCost:
    """Seconds one pipeline stage spends on a shard of a sequence (see the module's formula).

    Args:
        forward, backward: :class:`padless.Cost` of the whole sequence on one rank, in seconds
            (``per_sequence`` is paid by every shard).
        kv_bytes: bytes of keys and values per token that a ring step passes (all the stage's
            layers); 0: no exchange (then the largest degree is always fastest).
        bandwidth: link bytes per second.
        latency: seconds per exchange.
        device: where it was measured, or None.

    Save it with :meth:`save` and read it with :meth:`load` (JSON).
    """

    forward: Cost
    backward: Cost
    kv_bytes: float = 0.0
    bandwidth: float = 1e11
    latency: float = 0.0
    device: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("forward", "backward"):
            value = as_cost(getattr(self, name), name)
            if value is None:
                raise TypeError(f"{name} must be a padless.Cost, got None")
            set_(self, name, value)
        set_(self, "kv_bytes", check_real("kv_bytes", self.kv_bytes, positive_only=False))
        set_(self, "latency", check_real("latency", self.latency, positive_only=False))
        set_(self, "bandwidth", check_real("bandwidth", self.bandwidth))
        for name in ("kv_bytes", "latency"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if self.device is not None and not isinstance(self.device, str):
            raise TypeError(f"device must be a str or None, got {type(self.device).__name__}")

    # ------------------------------------------------------------------ times
    def _pass(self, cost: Cost, lengths: Any, k: Any, bytes_factor: float) -> np.ndarray:
        kk, shard = self._shard(lengths, k)
        return self._seconds(cost, kk, shard, bytes_factor)

    @staticmethod
    def _shard(lengths: Any, k: Any) -> tuple[np.ndarray, np.ndarray]:
        """The degrees (int64) and each shard's padded tokens (float64), broadcast."""
        kk = np.asarray(k, dtype=np.int64)
        if kk.size and int(kk.min()) < 1:
            raise ValueError(f"k must be positive CP degrees, got {int(kk.min())}")
        # padded to 2·k (1 at k = 1) in floats: exact below 2**52 tokens, and cheaper than
        # integer division on the (rows, degrees) tables the planner costs
        mult = np.where(kk > 1, 2.0 * kk, 1.0)
        lf = np.ceil(np.asarray(lengths, dtype=np.int64) / mult) * mult
        return kk, lf / kk

    def _seconds(
        self, cost: Cost, kk: np.ndarray, shard: np.ndarray, bytes_factor: float
    ) -> np.ndarray:
        kf = kk.astype(np.float64)
        step = cost.quadratic * shard * shard  # one ring step's attention
        comm = (bytes_factor * self.kv_bytes / self.bandwidth) * shard + self.latency
        out = cost.linear * shard + cost.per_sequence + step
        # k − 1 exchanges, each hidden behind a step's attention (none at k = 1: k − 1 = 0)
        out += (kf - 1.0) * np.maximum(step, comm)
        return np.asarray(out, dtype=np.float64)

    def forward_time(self, lengths: Any, k: Any = 1) -> Any:
        """Forward seconds of a shard of each length over ``k`` ranks."""
        return self._pass(self.forward, lengths, k, 1.0)

    def backward_time(self, lengths: Any, k: Any = 1) -> Any:
        """Backward seconds (keys, values and their gradients go round: twice the bytes)."""
        return self._pass(self.backward, lengths, k, 2.0)

    def time(self, lengths: Any, k: Any = 1) -> Any:
        """Forward + backward seconds of a shard of each length over ``k`` ranks (broadcast)."""
        kk, shard = self._shard(lengths, k)  # padded once for both passes
        return self._seconds(self.forward, kk, shard, 1.0) + self._seconds(
            self.backward, kk, shard, 2.0
        )

    # ------------------------------------------------------------------ records
    def as_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: ``MeshCost.from_dict(c.as_dict()) == c``."""
        return {
            "kind": KIND,
            "version": VERSION,
            "unit": "seconds",
            "forward": self.forward.as_dict(),
            "backward": self.backward.as_dict(),
            "kv_bytes": self.kv_bytes,
            "bandwidth": self.bandwidth,
            "latency": self.latency,
            "device": self.device,
        }

    @classmethod
    def from_dict(cls, record: Any) -> MeshCost:
        """The cost of a dict made by :meth:`as_dict` (checked like the constructor)."""
        known = {"kind", "version", "unit", "forward", "backward", "kv_bytes", "bandwidth"}
        known |= {"latency", "device"}
        check_record(
            record, owner="MeshCost", kind=KIND, version=VERSION, unit="seconds", known=known
        )
        return cls(**{k: v for k, v in record.items() if k not in ("kind", "version", "unit")})

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the cost as JSON to ``path`` atomically; return the path written."""
        return save_json(path, self.as_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MeshCost:
        """The cost saved at ``path`` by :meth:`save`."""
        return cls.from_dict(load_json(path, "mesh cost"))
