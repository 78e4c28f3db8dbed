"""The composition matrix (issue 40): a pairwise sample of strategy x form x layer x consumer
cells, each of which works or is refused when built; the broken ones listed in known.py.

``make test`` runs the sample (every pair of factor values meets once); ``make fuzz``
(``PADLESS_HYPOTHESIS=fuzz``) draws cells of the whole matrix and positions at random.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless

from . import build as build_module
from . import cells as cells_module
from . import corpus as C
from .build import Built, Env, Failure
from .cells import BROKEN, Outcome, Params, classify_refusal, run_cell
from .checks import check_batch, check_once, interleave, without_repeats
from .factors import FACTORS, STRATEGIES, Cell, all_cells, not_a_cell, registered
from .known import KNOWN_BROKEN, REFUSED
from .pairwise import all_pairs, pairs_of
from .sample import SAMPLE

FUZZ = os.environ.get("PADLESS_HYPOTHESIS") == "fuzz"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    return Env(tmp_path_factory.mktemp("matrix"))


# ------------------------------------------------------------------------------ completeness
def test_every_strategy_has_settings():
    """A strategy added to the registry must be given settings here before the matrix runs it."""
    missing = set(registered()) - set(STRATEGIES)
    assert not missing, f"give {sorted(missing)} a row of tests/matrix/factors.py STRATEGIES"
    extra = {n for n, s in STRATEGIES.items() if not s.registered}
    assert set(STRATEGIES) - set(registered()) == extra == {"lm"}
    for name in registered():  # its settings make a valid spec
        padless.strategies()[name](**STRATEGIES[name].base)
        padless.strategies()[name](**STRATEGIES[name].change)


def test_sample_covers_every_pair():
    """Every pair of factor values that some cell holds meets in a sampled cell."""
    covered = {p for c in SAMPLE for p in pairs_of(c.values())}
    wanted = all_pairs(list(FACTORS.values()), valid=lambda r: not_a_cell(*r) is None)
    assert wanted - covered == set()
    assert len(SAMPLE) == len(set(SAMPLE))


def test_sample_holds_every_factor_value():
    seen = {name: {getattr(c, name) for c in SAMPLE} for name in FACTORS}
    for name, values in FACTORS.items():
        assert set(values) == seen[name], name
    assert set(registered()) <= seen["strategy"]


def test_tables_hold_cells():
    ids = {c.id for c in all_cells()}
    assert set(KNOWN_BROKEN) <= ids and set(REFUSED) <= ids
    assert not set(KNOWN_BROKEN) & set(REFUSED)
    assert all(r.split(":")[0] in BROKEN for r in KNOWN_BROKEN.values())


# ------------------------------------------------------------------------------ the sample
def _param(cell: Cell):
    marks = []
    if cell.id in KNOWN_BROKEN:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BROKEN[cell.id]))
    return pytest.param(cell, id=cell.id, marks=marks)


def _blank(text: str) -> str:
    return re.sub(r"\d+", "#", text)


def _expect(cell: Cell, outcome: Outcome) -> None:
    """A cell works, or is refused when built with the recorded message. A known broken cell
    (xfail) passes once fixed, which fails the run until its entry leaves KNOWN_BROKEN."""
    if cell.id in KNOWN_BROKEN:
        assert outcome.kind in ("works", "refused"), str(outcome)
    elif cell.id in REFUSED:
        assert outcome.kind == "refused", str(outcome)
        # numbers blanked: which DataLoader worker refuses first ("shard 0 of 4" or "shard 1
        # of 4") is a race between the workers
        assert _blank(REFUSED[cell.id]) in _blank(outcome.message), outcome.message
    else:
        assert outcome.kind == "works", str(outcome)


@pytest.mark.parametrize("cell", [_param(c) for c in SAMPLE])
def test_matrix_cell(cell: Cell, env: Env):
    _expect(cell, run_cell(cell, env))


# The issue's runs, as cells: a mixture of warming-up packed corpora served from Megatron pairs
# through a TokenDataset per corpus, the same through the HF Trainer (the resume across a weight
# change: docs/schedules.md's example, run by tests/test_mixture_pieces.py).
ISSUE_RUNS = (
    "packing-whole-mixture_warmup-token_dataset",
    "packing-whole-mixture_warmup-hf",
    "packing-whole-mixture_warmup-collate",
    "lm-whole-mixture_warmup-collate",  # (3) an LM-stream warm-up inside a mixture
    "lm-whole-mixture_warmup-torchdata",
)


@pytest.mark.parametrize("cell", ISSUE_RUNS)
def test_the_issue_runs_work(cell: str, env: Env):
    outcome = run_cell(Cell.parse(cell), env)
    assert outcome.kind == "works", str(outcome)


# ------------------------------------------------------------------------------ fuzz
@pytest.mark.skipif(not FUZZ, reason="make fuzz (PADLESS_HYPOTHESIS=fuzz) draws cells")
@settings(max_examples=min(settings().max_examples, 300))  # a cell costs up to seconds
@given(
    cell=st.sampled_from([c for c in all_cells() if c.id not in KNOWN_BROKEN]),
    resume_at=st.integers(0, 14),
    skip_from=st.integers(0, 6),
    skip_len=st.integers(1, 4),
)
def test_matrix_fuzz_every_cell(tmp_path_factory, cell, resume_at, skip_from, skip_len):
    """A random cell of the whole matrix at random positions (a resume, an elastic resume, a
    change or a skip anywhere in the epoch, past its end included)."""
    env = Env(tmp_path_factory.mktemp("fuzz"))
    if cell.form == "stream" and cell.consumer == "torchdata":
        # a StreamDataset's workers each batch their own shard: a skip over 2 workers must be
        # a multiple of 2 steps (docs/streaming.md), refused by the workers at the first batch
        skip_len += skip_len % 2
    params = Params(resume_at=resume_at, skip=(skip_from, skip_from + skip_len))
    _expect(cell, run_cell(cell, env, params))


# ------------------------------------------------------------------------------ the harness
def _got(rows: list[list[int]], kind: str = "padded", step: int = 0, width: int = 0) -> C.Got:
    arrays = [np.asarray(r, dtype=np.int64) for r in rows]
    width = width or max((len(r) for r in rows), default=0)
    return C.Got(arrays, (len(rows), width), kind, step=step, opt=step)


def test_checks_catch_lost_repeated_and_foreign_tokens():
    a, b = C.ITEMS[0], C.ITEMS[1]
    want = set(a) | set(b)
    check_once([_got([a]), _got([b])], want, "ok")
    with pytest.raises(Failure, match="1 items\\) missing"):
        check_once([_got([a])], want, "lost")
    with pytest.raises(Failure, match="twice"):
        check_once([_got([a]), _got([a, b])], want, "repeated")
    with pytest.raises(Failure, match="unexpected"):
        check_once([_got([a]), _got([b]), _got([C.ITEMS[2]])], want, "foreign")
    # a tail's repeat must be a batch of the epoch; `repeated` too high or low fails
    slots = [_got([a]), _got([b]), _got([a])]
    assert len(without_repeats(slots, 1, "tail")) == 2
    with pytest.raises(Failure, match="not all repeats"):
        without_repeats([_got([a]), _got([b])], 1, "tail")
    with pytest.raises(Failure, match="repeats 1 of the epoch's batches, but repeated=0"):
        without_repeats(slots, 0, "uncounted repeat")
    with pytest.raises(Failure, match="twice"):
        check_once(slots, want, "uncounted repeat")
    assert [g.step for g in interleave([[_got([a], step=0)], [_got([b], step=1)]])] == [0, 1]


def test_checks_catch_a_batch_over_budget_or_a_warmup_ignored():
    kw = STRATEGIES["packing"].warmup
    assert kw is not None
    row = C.ITEMS[0][:20]
    check_batch("packing", kw, _got([row] * 4, "packed", width=32), 0, "ok")
    with pytest.raises(Failure, match="expected at most 4 rows of 32"):
        check_batch("packing", kw, _got([row] * 2, "packed", width=64), 0, "ignored")
    check_batch("packing", kw, _got([row] * 2, "packed", width=64), 2, "after")
    long = [i for i in range(C.N) if C.LENGTHS[i] > 40][:5]
    over = _got([C.ITEMS[i] for i in long])
    with pytest.raises(Failure, match="max_tokens=192"):
        check_batch("token_budget", STRATEGIES["token_budget"].base, over, 0, "budget")
    cut = _got([C.ITEMS[long[0]][:10]])
    with pytest.raises(Failure, match="cut or joined"):
        check_batch("token_budget", STRATEGIES["token_budget"].base, cut, 0, "cut")
    shapes = STRATEGIES["fixed_shapes"].base
    with pytest.raises(Failure, match="is not one of"):
        check_batch("fixed_shapes", shapes, _got([C.ITEMS[0]], "flat"), 0, "shape")


def test_refusals_are_classified_by_what_they_say():
    cell = Cell("token_budget", "stream", "ramp", "collate")
    signature = TypeError("__init__() got an unexpected keyword argument 'batches_per_step'")
    assert classify_refusal(cell, signature).kind == "refused_unhelpful"
    assert classify_refusal(cell, AttributeError("no attribute 'skip'")).kind == (
        "refused_unhelpful"
    )
    helpful = ValueError("batches_per_step is not taken by a StreamBatcher: ramp a sampler")
    assert classify_refusal(cell, helpful).kind == "refused"
    one_part = ValueError("batches_per_step must be a schedule")
    assert classify_refusal(cell, one_part).kind == "refused_unhelpful"
    example = TypeError("plan must be a sampler (e.g. the StreamBatcher ramp), got x")
    assert classify_refusal(cell, example).kind == "refused_unhelpful"
    assert classify_refusal(cell, RuntimeError("boom")).kind == "crash"


def test_run_cell_tells_construction_from_iteration(env, monkeypatch):
    cell = Cell("token_budget", "whole", "none", "collate")

    def at_build(*args):
        raise Built(ValueError("TokenBudget cannot be collated so"))

    def at_batch(*args):
        raise ValueError("too late")

    def wrong(*args):
        raise Failure("a batch lost")

    def other(*args):
        raise KeyError("x")

    expected = {at_build: "refused", at_batch: "late", wrong: "silent", other: "crash"}
    for driver, kind in expected.items():
        monkeypatch.setitem(cells_module._DRIVERS, "none", driver)
        assert run_cell(cell, env).kind == kind


def test_a_layer_ignored_is_silent(env, monkeypatch):
    """Each layer's check sees it ignored: the harness would not pass a broken cell."""
    plain = padless.PlanSampler.__init__

    def no_ramp(self, *args, batches_per_step=None, **kw):  # the ramp's first value throughout
        plain(self, *args, batches_per_step=None if batches_per_step is None else 2, **kw)

    with monkeypatch.context() as m:
        m.setattr(padless.PlanSampler, "__init__", no_ramp)
        got = run_cell(Cell("token_budget", "whole", "ramp", "collate"), env)
    assert got.kind == "silent" and "per step" in got.reason, got
    with monkeypatch.context() as m:
        m.setattr(padless.PlanSampler, "skip", lambda self, *a, **k: None)
        got = run_cell(Cell("token_budget", "whole", "skip", "collate"), env)
    assert got.kind == "silent" and "skip" in got.reason, got
    with monkeypatch.context() as m:
        m.setattr(padless.PlanSampler, "load_state_dict", lambda self, state: None)
        for layer in ("resume", "elastic", "change"):
            got = run_cell(Cell("packing", "whole", layer, "collate"), env)
            assert got.kind == "silent", (layer, got)
    spec_of = build_module.spec_of

    def constant(strategy, kw):  # every schedule replaced by its final value
        return spec_of(strategy, {k: getattr(v, "final", v) for k, v in kw.items()})

    with monkeypatch.context() as m:
        m.setattr(build_module, "spec_of", constant)
        for cell in ("packing-whole-warmup-collate", "packing-whole-warmup-checked"):
            got = run_cell(Cell.parse(cell), env)
            assert got.kind == "silent" and "capacity 32" in got.reason, (cell, got)
    with monkeypatch.context() as m:
        m.setattr(cells_module, "MIX_WEIGHTS", {"a": 1.0, "b": 1.0})  # checked against 1:1
        got = run_cell(Cell("token_budget", "whole", "mixture", "collate"), env)
    assert got.kind == "silent" and "weights ignored" in got.reason, got


def test_the_corpus_reads_back():
    assert C.LENGTHS.max() <= C.LONGEST < C.K
    assert all(C.valid(t) for t in C.ITEMS[5]) and not C.valid(C.token(0, int(C.LENGTHS[0])))
    runs = C.runs(np.asarray(C.ITEMS[1] + C.ITEMS[2]))
    assert [len(r) for r in runs] == [C.LENGTHS[1], C.LENGTHS[2]]
    kept = C.decomposition_tokens(16, 4)
    assert kept <= C.all_tokens() and len(kept) < len(C.all_tokens())
    assert Path(__file__).parent.joinpath("known.py").exists()


def test_the_docs_table_is_the_known_table():
    """docs/combinations.md is the rendering of known.py (rewrite it after a census)."""
    from .table import PAGE, render

    assert PAGE.read_text() == render(), "rewrite it: python -m tests.matrix.table"
