"""Past one machine: lengths, windowed plans and packed datasets on Ray Data.

When a corpus outgrows one machine the heavy work is reading (and tokenizing) every document to
learn its length, and moving packed rows to many training workers. This package runs that work
on Ray (``pip install 'padless[ray]'``); ``import padless`` never imports ray.

- :func:`lengths`: the lengths of a ``ray.data.Dataset``, in the dataset's row order, computed
  block by block on the cluster (from Arrow list offsets for a token column, by a tokenizer for a
  text column) and written as an int32 ``.npy`` that ``np.load(path, mmap_mode="r")`` opens.
- :func:`plan`: :func:`padless.plan_windows` as Ray tasks, one group of windows per task, written
  as a folder of ``.npy`` files that :class:`PlanFiles` maps lazily on every training rank.
- :func:`pack`: a ``ray.data.Dataset`` of packed rows (tokens back to back, ``cu_seqlens``,
  ``position_ids``, ``seq_idx``), best fit within windows of ``window`` consecutive documents;
  the documents of the rows a window fills poorly are carried and packed again together with
  those of the windows around them.
- For Ray Train: each worker's ``ray.train.get_dataset_shard(...)`` iterator feeds a
  :class:`padless.StreamBatcher`; see ``docs/ray.md``.

The parts: ``_lengths`` (:func:`lengths`), ``_plans`` (:func:`plan`, :class:`PlanFiles` and the
plan folder's format), ``_pack`` (:func:`pack`, :func:`pack_table`, the row kernel), over
``_columns`` (datasets and their Arrow columns) and ``_npy`` (a ``.npy`` written as a stream).

**Row order.** Ray Data may finish blocks out of order. :func:`lengths` and :func:`pack` run on a
copy of the dataset whose ``DataContext.execution_options.preserve_order`` is True (the dataset
passed in, and its context, are left as they are), so lengths come out in the order
``ds.iter_rows()`` yields rows with ``preserve_order`` set, and windows are runs of consecutive
rows in that order whatever the block layout. Ray Train ingests with the driver's
``DataContext`` options unless ``DataConfig(execution_options=...)`` says otherwise: set
``preserve_order=True`` there for shards that come out the same in every epoch (which the
StreamBatcher's exact resume needs).

Example (a 2-CPU local Ray; on a cluster, ``ray.init(address="auto")``)::

    import ray, padless, padless.ray
    ds = ray.data.read_parquet("s3://corpus/")             # a column of token ids
    lengths = padless.ray.lengths(ds, column="input_ids", out="lengths.npy")
    files = padless.ray.plan("lengths.npy", padless.TokenBudget(max_tokens=16384),
                             window=1_000_000, seed=0, epoch=0, out="plan-e0")
    packed = padless.ray.pack(ds, padless.Packing(capacity=4096, oversize="split"),
                              column="input_ids", window=10_000, seed=0)
"""

from __future__ import annotations

from ..io.readers import MissingDependency

try:  # the one check for Ray: every module of this package imports ray and pyarrow freely
    import pyarrow  # noqa: F401
    import ray.data  # noqa: F401
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingDependency(
        "padless.ray needs Ray Data: pip install 'padless[ray]' (or pip install 'ray[data]' "
        f"pyarrow); importing it failed: {_exc}"
    ) from _exc

# column_lengths, row_columns, row_columns_reference and PLAN_FORMAT: reachable as before
from ._lengths import column_lengths, lengths  # noqa: F401
from ._pack import pack, pack_table, row_columns, row_columns_reference  # noqa: F401
from ._plans import PLAN_FORMAT, PlanFiles, plan  # noqa: F401

__all__ = ["PlanFiles", "lengths", "pack", "pack_table", "plan"]
