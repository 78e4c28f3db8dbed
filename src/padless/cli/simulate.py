"""``padless simulate``: place global batches on a mesh and predict them, before any GPU runs.

Prints, for one step of the epoch (``--step``), the predicted step time per rank, the imbalance
per micro-batch slot, the pipeline bubble, tokens per rank and (``--memory``) the peak
activation memory per micro-batch, in 80 columns; ``--json`` for the figures, ``--plot`` for a
figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from .inputs import (
    add_input_arguments,
    check_output_paths,
    input_kind,
    load_lengths,
    shares_stdout,
)

WIDTH = 80
MAX_LANES = 1 << 20  # the most dp groups (dp x cp ranks when dynamic) the placement takes
MAX_STAGES = 1 << 10  # the most pipeline stages (pp) the pipeline simulator takes
MAX_VPP = 64  # the most virtual stages per rank it takes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``padless simulate``."""
    add_input_arguments(parser)
    parser.add_argument(
        "--mesh",
        required=True,
        help="the mesh, e.g. dp=8,cp=4,pp=2,max_tokens=8192 (keys dp, cp, pp, dynamic, "
        "max_tokens, schedule, vpp, micro_batches, aligned_groups)",
    )
    parser.add_argument(
        "--cost",
        metavar="FILE.json",
        help="a padless.MeshCost saved as JSON (padless.torch.calibrate_cost writes one; "
        "default: a nominal model, see --model)",
    )
    parser.add_argument(
        "--model",
        default="2048,24",
        metavar="D_MODEL,N_LAYERS",
        help="without --cost: a transformer of this size at 40%% of 400 TFLOP/s, keys and "
        "values in bf16 over 100 GB/s links (default 2048,24)",
    )
    parser.add_argument("--memory", metavar="FILE.json", help="a padless.MemoryModel (JSON)")
    parser.add_argument("--global-batch", type=int, default=256, help="sequences per step")
    parser.add_argument("--step", type=int, default=0, help="which step of the epoch (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="the epoch's shuffle seed")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write a figure to exactly FILE (PNG; SVG or PDF by suffix); a device or pipe is "
        "written in place",
    )


def _load(option: str, path: str, load: Any) -> Any:
    """``load(path)``, its errors naming ``option`` and the file."""
    try:
        return load(path)
    except OSError as exc:
        raise ValueError(f"{option} {path!r}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{option} {path!r}: {exc}") from None


def _one_field(args: argparse.Namespace) -> str:
    """How to give simulate one field, for the inputs given."""
    if not args.inputs or all(input_kind(p, args.eos) == "npz" for p in args.inputs):
        return "pick one with --fields (e.g. --fields en)"
    if len(args.inputs) > 1:
        return f"give one INPUT, not {len(args.inputs)} side by side"
    return f"{args.inputs[0]} holds several; give an input of one field"


def nominal_cost(model: str, pp: int) -> Any:
    """A :class:`padless.MeshCost` of a transformer ``D_MODEL,N_LAYERS`` split over ``pp``
    stages: its training FLOPs at 40% of 400 TFLOP/s (a third forward), bf16 keys and values
    exchanged over 100 GB/s links with 20 µs latency."""
    from ..core.cost import Cost
    from ..core.mesh import MeshCost

    try:
        d_model, layers = (int(x) for x in model.split(","))
    except ValueError:
        raise ValueError(
            f"--model must be D_MODEL,N_LAYERS (e.g. 2048,24), got {model!r}"
        ) from None
    flops = Cost.transformer(d_model, layers)
    rate = 0.4 * 400e12 * pp

    def part(share: float) -> Cost:
        return Cost(linear=flops.linear * share / rate, quadratic=flops.quadratic * share / rate)

    kv = 2 * 2 * d_model * layers / pp  # keys and values, bf16, the stage's layers
    return MeshCost(
        forward=part(1 / 3), backward=part(2 / 3), kv_bytes=kv, bandwidth=1e11, latency=2e-5
    )


def run(args: argparse.Namespace) -> int:
    """Place the chosen step, simulate it, print the table (or JSON), write the plot."""
    from ..core.memory import MemoryModel
    from ..core.mesh import Mesh, MeshCost
    from ..planners.placement import plan_placement, simulate

    try:
        mesh = Mesh.parse(args.mesh)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--mesh {args.mesh!r}: {exc}") from None
    lanes = mesh.ranks if mesh.dynamic else mesh.dp
    if lanes > MAX_LANES:
        what = "dp x cp ranks (dynamic)" if mesh.dynamic else "dp groups"
        raise ValueError(
            f"--mesh {args.mesh!r} places on {lanes:,} {what}: the placement takes at most "
            f"2**20 ({MAX_LANES:,}), far beyond any mesh that trains"
        )
    for key, value, most in (("pp", mesh.pp, MAX_STAGES), ("vpp", mesh.vpp, MAX_VPP)):
        if value > most:
            raise ValueError(
                f"--mesh {args.mesh!r}: {key} must be at most {most} (the pipeline simulator's "
                f"limit), got {value:,}"
            )
    cost = (
        _load("--cost", args.cost, MeshCost.load)
        if args.cost
        else nominal_cost(args.model, mesh.pp)
    )
    memory = _load("--memory", args.memory, MemoryModel.load) if args.memory else None
    if args.plot is not None:
        check_output_paths(args, [args.plot], "--plot")
    if args.global_batch < 1:
        raise ValueError(f"--global-batch must be a positive int, got {args.global_batch}")
    if args.step < 0:
        raise ValueError(f"--step must be a non-negative int, got {args.step}")
    lengths, name = load_lengths(args)
    if getattr(lengths, "ndim", 1) != 1:
        raise ValueError(
            f"simulate plans one field of lengths, got {lengths.shape[1]}: {_one_field(args)}"
        )
    plan = plan_placement(lengths, mesh, cost, global_batch=args.global_batch, seed=args.seed)
    sim = simulate(plan.step(args.step), memory)
    # the plot on standard output (--plot /dev/stdout): the figures go to standard error
    out = sys.stderr if args.plot is not None and shares_stdout([args.plot]) else sys.stdout
    if args.plot is not None:
        plot_simulation(sim, args.plot, title=name)
    with contextlib.redirect_stdout(out):
        return _print(args, name, mesh, cost, plan, sim)


def _print(args: argparse.Namespace, name: str, mesh: Any, cost: Any, plan: Any, sim: Any) -> int:
    """The step's figures as JSON or a table on standard output."""
    if args.json:
        p = sim.placement
        json.dump(
            {
                "input": name,
                "mesh": mesh.as_dict(),
                "cost": cost.as_dict(),
                "step": args.step,
                "steps": len(plan),
                "sequences": len(p),
                "micro_batches": p.micro_batches,
                "makespan_s": sim.makespan,
                "bound_s": sim.bound,
                "bubble": sim.bubble,
                "rank_time_s": sim.rank_time.tolist(),
                "slot_time_s": sim.slot_time.tolist(),
                "slot_imbalance": sim.slot_imbalance.tolist(),
                "tokens_per_rank": sim.tokens.tolist(),
                "memory_bytes": None if sim.memory is None else sim.memory.tolist(),
                "peak_memory_bytes": sim.peak_memory,
            },
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    print(f"padless simulate: {name}"[:WIDTH])
    placed = len(sim.placement)  # at most --global-batch: fewer in a short last step
    print(f"step {args.step} of {len(plan)}, {placed:,} sequences placed"[:WIDTH])
    print(sim.table(WIDTH))
    return 0


def plot_simulation(sim: Any, path: str, *, title: str = "") -> None:
    """Write a figure: busy time per rank per micro-batch, and micro-batch times."""
    import numpy as np

    from ..core._output import check_output, write_exactly
    from .plot import FORMATS, pyplot

    target = check_output(path, "plot")
    plt = pyplot()
    p = sim.placement
    busy = np.zeros((p.micro_batches, p.mesh.ranks))
    for j in range(p.ranks.shape[1]):
        on = p.ranks[:, j] >= 0
        np.add.at(busy, (p.slots[on], p.ranks[on, j]), p.times[on])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    im = axes[0].imshow(busy.T * 1e3, aspect="auto", cmap="viridis")
    axes[0].set_xlabel("micro-batch (run order)")
    axes[0].set_ylabel("rank")
    axes[0].set_title("busy ms per rank and micro-batch")
    fig.colorbar(im, ax=axes[0])
    axes[1].bar(np.arange(p.micro_batches), sim.slot_time * 1e3, color="#4c72b0")
    axes[1].set_xlabel("micro-batch (run order)")
    axes[1].set_ylabel("ms (slowest rank)")
    axes[1].set_title(f"step {sim.makespan * 1e3:.0f} ms, bound {sim.bound * 1e3:.0f} ms")
    fig.suptitle(f"padless simulate: {title}" if title else "padless simulate")
    fig.tight_layout()
    suffix = os.path.splitext(target)[1].lower().lstrip(".")
    kind = suffix if suffix in FORMATS else "png"  # as report --plot: the format by suffix
    try:
        write_exactly(target, lambda f: fig.savefig(f, format=kind, dpi=100), what="plot")
    finally:
        plt.close(fig)
