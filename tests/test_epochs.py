"""``padless.epochs``: the three forms of an epoch answer one protocol, and the sampler asks only
the protocol (no form branches)."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

import padless
from padless.epochs import Epochs, batch_order, epochs_for
from padless.epochs.histogram import HistogramEpochs
from padless.epochs.whole import WholeEpochs
from padless.epochs.windows import WindowedEpochs
from padless.sampling import sampler as sampler_module

LENS = np.random.default_rng(3).integers(1, 200, 900)
SPEC = padless.TokenBudget(max_tokens=600)
FORMS = {"whole": None, "windows": 300, "histogram": "histogram"}


@pytest.mark.parametrize("window", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize("balance", [False, True])
def test_each_form_answers_the_protocol(window, balance):
    epochs = epochs_for(SPEC, LENS, window, shuffle=True, seed=4, balance=balance)
    assert isinstance(epochs, Epochs)
    epoch = epochs.at(1, (), 2, ())
    assert epochs.at(1, (), 2, ()) is epoch  # the last one asked is kept
    batches = [values[lo:hi].tolist() for values, lo, hi in map(epoch.batch_at, range(epoch.total))]
    # every planned sequence once, and what a sampler of that form yields, slot by slot
    sampler = padless.PlanSampler(LENS, SPEC, seed=4, balance=balance, window=window, world_size=2)
    sampler.set_epoch(1)
    assert epochs.count(1) == epoch.total == len(batches)
    assert sorted(i for b in batches for i in b) == list(range(LENS.size))
    mine = [batches[s] for s in range(0, epoch.total, 2)]
    assert list(sampler)[: len(mine)] == mine
    for slot in (0, epoch.total - 1):
        assert epoch.entry_lengths(slot).tolist() == LENS[batches[slot]].tolist()
    ids = epoch.slot_ids(np.arange(epoch.total), ((2, 4),), 3)
    assert np.unique(ids).size == epoch.total  # a batch named once whatever its slot
    figures = epoch.stats(drop_last=False)
    assert figures.batches == epoch.total and figures.steps == -(-epoch.total // 2)
    assert figures.plan["sentences"] == LENS.size and 1.0 <= figures.imbalance
    if window is None:
        plan, order = epoch.global_plan()
        assert sorted(order.tolist()) == list(range(len(plan))) and epochs.refuses_changes is None
    else:
        with pytest.raises(ValueError, match="epoch_plan needs the whole epoch's plan"):
            epoch.global_plan()
        assert "cannot resume across a change of settings" in epochs.refuses_changes


def test_epochs_for_picks_the_form_and_checks_window():
    kinds = {
        name: type(epochs_for(SPEC, LENS, w, shuffle=True, seed=0, balance=False))
        for name, w in FORMS.items()
    }
    assert kinds == {"whole": WholeEpochs, "windows": WindowedEpochs, "histogram": HistogramEpochs}
    with pytest.raises(ValueError, match="window must be None, a window size"):
        epochs_for(SPEC, LENS, "windows", shuffle=True, seed=0, balance=False)


def test_an_elastic_history_orders_the_same_plan_again():
    epochs = epochs_for(SPEC, LENS, None, shuffle=True, seed=1, balance=True)
    first = epochs.at(0, (), 2, ())
    again = epochs.at(0, ((2, 6),), 3, ())
    assert again.plan is first.plan and again.order[:6].tolist() == first.order[:6].tolist()
    assert sorted(again.order.tolist()) == list(range(again.total))


def test_batch_order_shuffles_balances_or_keeps_the_plan_order():
    costs = np.array([5, 1, 6, 2, 3, 3])
    assert batch_order(6, None, 2, (), None).tolist() == list(range(6))
    draw = lambda stream: np.random.default_rng([7, stream])  # noqa: E731
    assert batch_order(6, None, 2, (), draw, permute=False).tolist() == list(range(6))
    assert sorted(batch_order(6, None, 2, (), draw).tolist()) == list(range(6))
    steps = costs[batch_order(6, costs, 2, (), draw)].reshape(3, 2)
    assert sorted(steps.max(axis=1) - steps.min(axis=1)) == [0, 1, 1]  # alike costs share a step


def test_the_sampler_never_asks_which_form_it_holds():
    """No form named, no ``isinstance`` of a planner or an epoch, no ``window`` tested (but in
    ``__repr__``) in PlanSampler's methods: generic code asks the epoch."""
    tree = ast.parse(inspect.getsource(sampler_module.PlanSampler))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"WholeEpochs", "WindowedEpochs", "HistogramEpochs"}
    assert "_windowed" not in attrs
    checks = [
        ast.unparse(n.args[1])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "isinstance"
    ]
    assert not [c for c in checks if "Planner" in c or "Epoch" in c], checks
    methods = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name != "__repr__"]
    tests = [n.test for f in methods for n in ast.walk(f) if isinstance(n, (ast.If, ast.IfExp))]
    assert not [ast.unparse(t) for t in tests if "window" in ast.unparse(t)]
