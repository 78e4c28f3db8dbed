"""An epoch planned window by window as Ray tasks, and the folder of files it is written to.

:func:`plan` runs :func:`padless.plan_windows` as Ray tasks and writes the windows' arrays as a
folder of ``.npy`` files; :class:`PlanFiles` maps that folder lazily on every training rank.

The folder (format ``padless-ray-plan-1``): ``plan.json`` (the spec, window, seed, epoch,
parts), ``counts.npy`` (batches per window) and per task ``part-NNNNN.json`` (where each
window's slice of each array starts and ends, its scalars and info) with one
``part-NNNNN.NAME.npy`` per plan array.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import ray

from ..core._check import check_seed, positive_or_none
from ..core.plan import BatchPlan, json_default, saved_type
from ..io.readers import load_npy
from ..planners.spec import Spec, spec_from_dict, spec_to_dict
from ..planners.windows import WindowedPlanner
from ._npy import NpyStream

PLAN_FORMAT = "padless-ray-plan-1"
MANIFEST = "plan.json"
COUNTS = "counts.npy"


def _plan_part(
    shipped: WindowedPlanner,
    path: str,
    seed: int,
    epoch: int,
    first: int,
    last: int,
    folder: str,
    part: int,
) -> list[int]:
    """Plan windows ``first..last-1`` into the files of part ``part`` (runs on the cluster).

    ``shipped`` arrives with its lengths as their file (``path``), mapped again on arrival. Each
    array a window's plan holds (``plan.to_arrays()``: indices, offsets,
    skipped, and for packing the row arrays) is appended to ``part-NNNNN.NAME.npy``;
    ``part-NNNNN.json`` says where each window's slice of each array starts and ends, and holds
    its scalars and info. Returns the windows' batch counts.
    """
    planner = shipped  # unpickled here: its lengths mapped from their file again
    member = planner.layout.membership(seed, epoch)
    stem = os.path.join(folder, f"part-{part:05d}")
    files: dict[str, Any] = {}
    streams: dict[str, NpyStream] = {}
    records = []
    counts = []
    try:
        for w in range(first, last):
            plan = planner.plan_window(member, w, seed, epoch)
            counts.append(len(plan))
            ranges: dict[str, list[int]] = {}
            scalars: dict[str, Any] = {}
            for name, arr in plan.to_arrays().items():
                arr = np.asarray(arr)
                if arr.ndim == 0:
                    scalars[name] = arr.item()
                    continue
                if name not in streams:
                    files[name] = open(f"{stem}.{name}.npy", "wb")  # noqa: SIM115
                    streams[name] = NpyStream(files[name], arr.dtype, arr.shape[1:])
                s = streams[name]
                ranges[name] = [s.rows, s.rows + int(arr.shape[0])]
                s.write(arr)
            kind = type(plan)
            records.append(
                {
                    "window": w,
                    "type": kind.__name__,
                    "module": kind.__module__,
                    "ranges": ranges,
                    "scalars": scalars,
                    "dtypes": {n: streams[n].dtype.str for n in ranges},
                    "info": json.loads(json.dumps(plan.info, default=json_default)),
                }
            )
        for s in streams.values():
            s.close()
    finally:
        for fh in files.values():
            fh.close()
    with open(f"{stem}.json", "w") as fh:
        json.dump({"first": first, "last": last, "windows": records}, fh)
    return counts


_plan_part_remote = ray.remote(num_cpus=1)(_plan_part)


def _plan_out(out: Any) -> Path:
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a path to a folder, got {type(out).__name__} {out!r}")
    target = Path(out).absolute()  # tasks write there, from their own working folders
    if not target.parent.is_dir():
        raise FileNotFoundError(
            f"the folder of out {str(target)!r} does not exist: {target.parent}"
        )
    if target.exists():
        if not target.is_dir():
            raise ValueError(f"out {str(target)!r} exists and is not a folder")
        if any(target.iterdir()) and not (target / MANIFEST).is_file():
            raise ValueError(
                f"out {str(target)!r} is a folder holding other files: name a new or empty "
                "folder, or one a previous padless.ray.plan wrote (it is replaced)"
            )
    return target


def plan(
    lengths_path: str | os.PathLike[str],
    spec: Spec,
    *,
    window: int,
    seed: int = 0,
    epoch: int = 0,
    out: str | os.PathLike[str],
    tasks: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> PlanFiles:
    """Plan an epoch window by window as Ray tasks, and write it as files ranks map lazily.

    The plan is exactly :func:`padless.plan_windows` ``(lengths, spec, window=window,
    seed=seed, epoch=epoch)``: the driver checks the lengths and the spec once (one pass over
    the mapped file), then ``tasks`` Ray tasks each plan a run of consecutive windows, memory-map
    the lengths themselves (``lengths_path`` must be readable on every node: shared storage) and
    write their windows' arrays to ``out``; no window's plan depends on which task made it.

    ``out`` is a folder: ``plan.json`` (the spec, window, seed, epoch, parts), ``counts.npy``
    (batches per window) and per task ``part-NNNNN.json`` with one ``.npy`` per plan array. The
    folder is written under a temporary name beside ``out`` and renamed into place when every
    task has finished (a folder a previous call wrote is replaced; one holding other files is
    refused up front).

    Args:
        lengths_path: an int ``.npy`` of (N,) or (N, F) lengths, e.g. from :func:`lengths`.
        spec: any planner spec (``padless.TokenBudget(max_tokens=...)``, ``padless.Packing(...)``).
        window, seed, epoch: as :func:`padless.plan_windows`.
        out: the folder to write.
        tasks: how many tasks (default: 4 per CPU of the cluster, at most one per window).
        progress: called with the number of windows done after each task finishes.

    Returns:
        :class:`PlanFiles` over ``out``.

    Cost: the driver's checking pass (about 1 ns per length, in threads) and O(windows) of
    manifest; each task O(its windows × (window + longest length)), memory O(window). The
    cluster reads the lengths once more, window by window.

    >>> import os, tempfile, padless
    >>> d = tempfile.mkdtemp()
    >>> np.save(os.path.join(d, "l.npy"), (np.arange(1000) % 37 + 1).astype(np.int32))
    >>> spec = padless.TokenBudget(max_tokens=64)
    >>> files = plan(os.path.join(d, "l.npy"), spec, window=300, seed=1, out=os.path.join(d, "p"))
    >>> ref = padless.plan_windows(np.load(os.path.join(d, "l.npy")), spec, window=300, seed=1)
    >>> files.num_windows, all(a == b for a, b in zip(files, ref, strict=True))
    (4, True)
    """
    if not isinstance(lengths_path, (str, os.PathLike)):
        raise TypeError(
            f"lengths_path must be a path to a .npy file, got {type(lengths_path).__name__}"
        )
    src = Path(lengths_path)
    if src.suffix.lower() != ".npy":
        raise ValueError(
            f"lengths_path must name a .npy file (memory-mapped by every task), got {src}"
        )
    if not src.is_file():
        raise FileNotFoundError(f"no such file: {src}")
    mapped = load_npy(src, mmap_mode="r")  # a file that is no .npy is named here
    if mapped.dtype.kind not in "iu":  # each task maps the file: a copy there would be O(N)
        raise TypeError(
            f"lengths_path must hold integer lengths (int32 or int64), got dtype {mapped.dtype} "
            f"in {src} (save them with np.save(path, lengths.astype(np.int32)))"
        )
    del mapped
    if not isinstance(spec, Spec):
        raise TypeError(
            f"spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
            f"got {type(spec).__name__}"
        )
    seed = check_seed("seed", seed)
    epoch = check_seed("epoch", epoch)
    tasks = positive_or_none("tasks", tasks)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
    target = _plan_out(out)
    planner = WindowedPlanner(spec, src, window)
    num_windows = planner.num_windows
    planner_ref = ray.put(planner)  # its lengths stay behind (starts a local Ray if none runs)
    if tasks is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        tasks = 4 * max(cpus, 1)
    parts = min(tasks, num_windows)
    cuts = [k * num_windows // parts for k in range(parts + 1)] if parts else [0]
    groups = list(zip(cuts[:-1], cuts[1:], strict=True))
    tmp = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.padless-tmp"
    tmp.mkdir()
    try:
        where = str(src.resolve())
        pending = {
            _plan_part_remote.remote(planner_ref, where, seed, epoch, a, b, str(tmp), p): p
            for p, (a, b) in enumerate(groups)
        }
        results: dict[int, list[int]] = {}
        done_windows = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                p = pending.pop(ref)
                results[p] = ray.get(ref)
                done_windows += len(results[p])
                if progress is not None:
                    progress(done_windows)
        counts = np.array(
            [c for p in range(len(groups)) for c in results[p]], dtype=np.int64
        ).reshape(-1)
        np.save(tmp / COUNTS, counts)
        manifest = {
            "format": PLAN_FORMAT,
            "spec": spec_to_dict(spec),
            "window": planner.window,
            "seed": seed,
            "epoch": epoch,
            "num_sequences": planner.n,
            "num_windows": num_windows,
            "num_batches": int(counts.sum()),
            "lengths": where,
            "parts": [{"first": a, "last": b} for a, b in groups],
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PlanFiles(target)


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename the finished folder ``tmp`` to ``target`` (an old plan there is removed)."""
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.padless-old"
    os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


class _Arrays(dict):  # type: ignore[type-arg]
    """Arrays by name with ``.files``, as ``BatchPlan.from_arrays`` reads an opened ``.npz``."""

    @property
    def files(self) -> list[str]:
        return list(self)


class PlanFiles:
    """A windowed plan written by :func:`plan`, read lazily (memory-mapped ``.npy`` files).

    ``files.window(w)`` is window ``w``'s plan (the plan :func:`padless.plan_windows` gives,
    its arrays mapped read-only, not read until used); iterating gives the windows in order;
    ``len(files)`` is the number of batches of the epoch and ``files.batch(i)`` the indices of
    batch ``i`` (windows one after the other, each window's batches in its plan's order), so a
    rank reads only the batches it takes, e.g. ``range(rank, len(files), world_size)``.

    Cost: opening reads ``plan.json`` and ``counts.npy`` (8 bytes per window); a window's first
    use reads its part's JSON and maps its files; ``batch(i)`` is a binary search plus a slice.

    >>> import os, tempfile, padless
    >>> d = tempfile.mkdtemp()
    >>> np.save(os.path.join(d, "l.npy"), np.array([3, 1, 2, 5, 4, 4, 2, 2], np.int32))
    >>> spec = padless.Packing(capacity=8)
    >>> _ = plan(os.path.join(d, "l.npy"), spec, window=4, out=os.path.join(d, "plan"))
    >>> files = PlanFiles(os.path.join(d, "plan"))
    >>> files.num_windows, len(files), sorted(int(i) for b in range(len(files)) for i in files.batch(b))
    (2, 4, [0, 1, 2, 3, 4, 5, 6, 7])
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"path must be a plan folder (a str or path), got {type(path).__name__} {path!r:.60}"
            )
        self.path = Path(path)
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            raise ValueError(
                f"path {str(self.path)!r} is not a padless.ray plan folder (no {MANIFEST})"
            )
        try:
            meta = json.loads(manifest.read_text())
        except ValueError as exc:
            raise ValueError(f"{manifest} is not readable JSON ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != PLAN_FORMAT:
            raise ValueError(f"{manifest} is not a {PLAN_FORMAT} manifest")
        self.meta = meta
        self.counts = np.load(self.path / COUNTS, mmap_mode=None, allow_pickle=False)
        self.cumulative = np.zeros(self.counts.size + 1, np.int64)
        np.cumsum(self.counts, out=self.cumulative[1:])
        self._firsts = np.array([p["first"] for p in meta["parts"]], np.int64)
        self._parts: OrderedDict[int, tuple[dict[str, Any], dict[str, np.ndarray]]] = OrderedDict()
        self._last: tuple[int, BatchPlan] | None = None

    @property
    def spec(self) -> Spec:
        """The spec the plan was made with."""
        return spec_from_dict(self.meta["spec"])

    @property
    def num_windows(self) -> int:
        return int(self.meta["num_windows"])

    @property
    def window_size(self) -> int:
        return int(self.meta["window"])

    @property
    def seed(self) -> int:
        return int(self.meta["seed"])

    @property
    def epoch(self) -> int:
        return int(self.meta["epoch"])

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def _part(self, p: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        hit = self._parts.get(p)
        if hit is not None:
            self._parts.move_to_end(p)
            return hit
        stem = self.path / f"part-{p:05d}"
        record = json.loads(Path(f"{stem}.json").read_text())
        names = {n for w in record["windows"] for n in w["ranges"]}
        arrays = {n: np.load(f"{stem}.{n}.npy", mmap_mode="r", allow_pickle=False) for n in names}
        self._parts[p] = (record, arrays)
        while len(self._parts) > 4:
            self._parts.popitem(last=False)
        return record, arrays

    def window(self, w: int) -> BatchPlan:
        """Window ``w``'s plan, with global indices (arrays mapped from the files)."""
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"window must be an int, got {type(w).__name__}")
        if not 0 <= w < self.num_windows:
            raise IndexError(f"window {w} out of range for a plan of {self.num_windows} windows")
        if self._last is not None and self._last[0] == w:
            return self._last[1]
        p = int(np.searchsorted(self._firsts, w, side="right")) - 1
        record, arrays = self._part(p)
        entry = record["windows"][int(w) - record["first"]]
        data = _Arrays({n: arrays[n][a:b] for n, (a, b) in entry["ranges"].items()})
        for n, v in entry["scalars"].items():
            data[n] = np.array(v)
        where = f"{self.path} window {w}"
        kind = saved_type({"type": entry["type"], "module": entry["module"]}, where)
        out = kind.from_arrays(data, {"info": entry["info"]}, where)
        out.info = dict(entry["info"])
        self._last = (int(w), out)
        return out

    def __iter__(self) -> Iterator[BatchPlan]:
        for w in range(self.num_windows):
            yield self.window(w)

    def batch(self, i: int) -> np.ndarray:
        """The indices of batch ``i`` of the epoch (windows in order)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"batch index must be an int, got {type(i).__name__}")
        n = len(self)
        if not 0 <= i < n:
            raise IndexError(f"batch {i} out of range for a plan of {n} batches")
        w = int(np.searchsorted(self.cumulative, i, side="right")) - 1
        return self.window(w)[int(i - self.cumulative[w])]

    def __repr__(self) -> str:
        return (
            f"PlanFiles({str(self.path)!r}, windows={self.num_windows}, batches={len(self)}, "
            f"window={self.window_size}, seed={self.seed}, epoch={self.epoch})"
        )
