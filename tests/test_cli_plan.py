"""``padless plan`` and ``padless report`` driven by the strategy registry: every spec setting is
an option and a ``--set key=value``, parsed by the field's type, with clear errors."""

import contextlib
import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless.cli import build_parser, main
from padless.cli.settings import parse_value, setting_fields
from padless.planners.spec import spec_from_dict

LENGTHS = np.random.default_rng(1).integers(1, 120, 400)

# command-line settings of each strategy and the spec they must give
EXAMPLES = {
    "token_budget": (
        ["--max-tokens", "512", "--set", "oversize=skip"],
        padless.TokenBudget(max_tokens=512, oversize="drop"),
    ),
    "exact_length": (
        ["--batch-size", "8", "--set", "include_partial=false", "--max-length", "none"],
        padless.ExactLength(batch_size=8, include_partial=False),
    ),
    "buckets": (
        ["--boundaries", "12,40,100", "--set", "max_tokens=1024"],
        padless.Buckets(boundaries=[12, 40, 100], max_tokens=1024),
    ),
    "packing": (
        ["--capacity", "256", "--set", "max_per_row=4", "--rows-per-batch", "2"],
        padless.Packing(capacity=256, max_per_row=4, rows_per_batch=2),
    ),
}


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in args])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def lengths_file(tmp_path):
    path = tmp_path / "lengths.npy"
    np.save(path, LENGTHS)
    return path


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_plan_of_every_strategy_matches_the_library(tmp_path, lengths_file, name):
    options, spec = EXAMPLES[name]
    out = tmp_path / "plan.npz"
    status, stdout, err = cli("plan", lengths_file, "--strategy", name, *options, "--seed", 5,
                              "-o", out, "--json")  # fmt: skip
    assert status == 0, err
    line = json.loads(stdout)
    assert spec_from_dict(line["spec"]) == spec
    saved = padless.BatchPlan.load(out)
    assert saved == spec.plan(LENGTHS, seed=5)
    assert saved.info["spec"] == line["spec"]
    assert line["batches"] == len(saved) and line["strategy"] == name


def test_every_setting_of_every_registered_spec_is_an_option():
    parser = build_parser("plan")
    plan_parser = parser._subparsers._group_actions[0].choices["plan"]  # noqa: SLF001
    options = {s for a in plan_parser._actions for s in a.option_strings}  # noqa: SLF001
    for name, cls in padless.strategies().items():
        for f in setting_fields(cls):
            assert "--" + f.name.replace("_", "-") in options, (name, f.name)


def test_json_values_and_epochs(tmp_path, lengths_file):
    out = tmp_path / "p.npz"
    status, stdout, err = cli(
        "plan", lengths_file, "--strategy", "exact_length", "--set", 'batch_sizes={"0": 4}',
        "--set", "max_tokens=null", "--epochs", "2", "--epoch", "3", "-o", out, "--json",
    )  # fmt: skip
    assert status == 0, err
    lines = [json.loads(x) for x in stdout.splitlines()]
    assert [x["epoch"] for x in lines] == [3, 4]
    spec = padless.ExactLength(batch_sizes={0: 4})
    assert spec_from_dict(lines[0]["spec"]) == spec
    assert padless.BatchPlan.load(tmp_path / "p-epoch4.npz") == spec.plan(LENGTHS, epoch=4)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--set", "max_tokenz=5"], ["unknown setting 'max_tokenz'", "max_tokens, max_sentences"]),
        (["--max-tokens", "lots"], ["max_tokens[0] must be a number", "'lots'"]),
        (["--max-tokens", "0"], ["token_budget", "max_tokens must be a positive int, got 0"]),
        (["--capacity", "64"], ["unknown setting 'capacity'", "known: max_tokens"]),
        (["--set", "oversize"], ["--set takes key=value, got 'oversize'"]),
        (["--max-tokens", "64", "--set", "max_tokens=65"], ["max_tokens is given twice"]),
        (["--strategy", "packing", "--max-per-row", "2"], ["packing needs --capacity"]),
        (["--strategy", "exact_length", "--include-partial", "maybe"], ["true or false"]),
        (["--strategy", "buckets", "--boundaries", "a,b", "--batch-size", "4"], ["boundaries"]),
        (["--strategy", "buckets", "--batch-size", "4", "--set", "boundaries=[1,"], ["[1,"]),
        (["--max-tokens", "64", "--epochs", "0"], ["--epochs must be a positive int, got 0"]),
        (["--max-tokens", "64", "--seed", "-1"], ["--seed must be a non-negative int, got -1"]),
    ],
)
def test_setting_errors_name_the_key_rule_and_value(tmp_path, lengths_file, args, fragments):
    out = tmp_path / "p.npz"
    status, _, err = cli("plan", lengths_file, *args, "-o", out)
    assert status == 2
    for fragment in fragments:
        assert fragment in err, err
    assert "Traceback" not in err and not out.exists()


def test_cli_defaults_keep_todays_commands(tmp_path, lengths_file):
    out = tmp_path / "p.npz"
    status, stdout, err = cli("plan", lengths_file, "--strategy", "buckets", "--max-tokens", 512,
                              "-o", out, "--json")  # fmt: skip
    assert status == 0, err
    assert json.loads(stdout)["spec"]["num_buckets"] == 8  # today's --num-buckets default


@given(
    ints=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=6),
    flag=st.booleans(),
)
def test_values_read_by_field_type(ints, flag):
    fields = {f.name: f for cls in padless.strategies().values() for f in setting_fields(cls)}
    listed = ",".join(map(str, ints))
    assert parse_value("boundaries", listed, fields["boundaries"], "x") == ints
    assert parse_value("boundaries", json.dumps(ints), fields["boundaries"], "x") == ints
    for text in (str(ints[0]), json.dumps(ints[0])):
        assert parse_value("max_tokens", text, fields["max_tokens"], "x") == ints[0]
    for text in (str(flag), str(flag).lower(), json.dumps(flag), "yes" if flag else "no"):
        assert parse_value("include_partial", text, fields["include_partial"], "x") is flag
    pairs = dict(zip(ints, reversed(ints), strict=True))
    text = ",".join(f"{k}:{v}" for k, v in pairs.items())
    assert parse_value("batch_sizes", text, fields["batch_sizes"], "x") == pairs


# ------------------------------------------------------------------ report over the registry


def test_report_rows_follow_the_registry_and_take_settings(lengths_file):
    status, stdout, err = cli("report", lengths_file, "--json", "--max-tokens", 256,
                              "--set", "packing.max_per_row=2")  # fmt: skip
    assert status == 0, err
    data = json.loads(stdout)
    rows = {r["strategy"]: r for r in data["strategies"]}
    ran = set(rows) - {"random", "group_by_length"}
    skipped = {x["strategy"] for x in data["not_run"]}
    assert ran | skipped == set(padless.strategies()) and not ran & skipped
    assert {"token_budget", "exact_length", "buckets", "packing"} <= ran
    spec = spec_from_dict(rows["packing"]["spec"])
    assert spec == padless.Packing(capacity=256, max_per_row=2)
    plan = spec.plan(LENGTHS)
    assert rows["packing"]["batches"] == len(plan)
    assert rows["packing"]["padding_pct"] == pytest.approx(100 * (1 - plan.efficiency))
    assert rows["random"]["spec"] is None


def test_report_lists_strategies_that_cannot_run(lengths_file):
    status, stdout, err = cli("report", lengths_file, "--json", "--capacity", 50)
    assert status == 0, err
    data = json.loads(stdout)
    assert "packing" not in {r["strategy"] for r in data["strategies"]}
    reasons = {x["strategy"]: x["reason"] for x in data["not_run"]}
    assert "capacity=50" in reasons["packing"]
    status, stdout, _ = cli("report", lengths_file, "--capacity", 50)
    assert "packing" in stdout and "not run" in stdout


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ("packing.max_per_row=two", "max_per_row must be an int or none, got 'two'"),
        ("packer.capacity=4", "unknown strategy 'packer'"),
        ("packing.capasity=4", "unknown setting 'capasity' of packing; known: capacity"),
        ("capacity=4", "--set takes STRATEGY.KEY=VALUE"),
        ("buckets.boundaries=40,12", "buckets: boundaries must be strictly increasing"),
    ],
)
def test_report_setting_errors(lengths_file, setting, fragment):
    status, _, err = cli("report", lengths_file, "--set", setting)
    assert status == 2 and fragment in err, err
