"""Spec settings from the command line: ``--set key=value`` parsed by the spec field's type.

The registry (:func:`padless.strategies`) says which strategies exist; ``dataclasses.fields`` of a
spec say which settings it has and their types. A value is read by that type:

- ``int``: ``4096``; ``none`` (or ``null``) where the field may be None;
- ``bool``: ``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``);
- ``str``: the text itself (``drop``);
- anything else (``boundaries``, ``batch_sizes``): a comma list ``12,40,100``, a map
  ``5:4,0:1``, or a JSON value (``[12, 40, 100]``, ``{"5": 4}``).

A JSON value of the right type is accepted for every field (``max_tokens=null``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def setting_fields(spec_class: type) -> list[dataclasses.Field[Any]]:
    """The settings a spec takes (its init fields), in declaration order.

    >>> from padless import Packing
    >>> [f.name for f in setting_fields(Packing)]
    ['capacity', 'max_per_row', 'rows_per_batch', 'oversize', 'cost', 'max_row_cost',
     'context_parallel']
    """
    return [f for f in dataclasses.fields(spec_class) if f.init]


def is_required(field: dataclasses.Field[Any]) -> bool:
    """Whether a spec field has no default."""
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def field_kinds(field: dataclasses.Field[Any]) -> frozenset[str]:
    """The type names of a field's annotation: ``int | None`` gives ``{"int", "None"}``.

    >>> from padless import TokenBudget
    >>> sorted(field_kinds(setting_fields(TokenBudget)[1]))  # max_sentences
    ['None', 'int']
    """
    annotation = field.type
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if not isinstance(annotation, str) and not text:
        text = str(annotation)
    text = text.replace("typing.", "").replace("Optional[", "None | ").rstrip("]")
    kinds = {part.strip() for part in text.split("|") if part.strip()}
    known = {"int", "None", "bool", "str", "float"}
    return frozenset(k if k in known else "Any" for k in kinds)


def describe_kinds(kinds: frozenset[str]) -> str:
    """The rule a value of these kinds follows, in words (for help and errors)."""
    parts = []
    if "Any" in kinds:
        parts.append("a comma list (e.g. 12,40,100), a key:value list (e.g. 5:4,0:1) or JSON")
    if "int" in kinds:
        parts.append("an int")
    if "float" in kinds:
        parts.append("a number")
    if "bool" in kinds:
        parts.append("true or false")
    if "str" in kinds:
        parts.append("a word")
    if "None" in kinds:
        parts.append("none")
    return " or ".join(parts) or "a JSON value"


def _fits(value: Any, kinds: frozenset[str]) -> bool:
    if "Any" in kinds:
        return True
    if value is None:
        return "None" in kinds
    if isinstance(value, bool):
        return "bool" in kinds
    if isinstance(value, int):
        return "int" in kinds or "float" in kinds
    if isinstance(value, float):
        return "float" in kinds
    if isinstance(value, str):
        return "str" in kinds
    return False


def _scalar(text: str) -> Any:
    """An item of a comma list: an int if it reads as one, else a number, else the text."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def _int_keys(value: Any) -> Any:
    """JSON objects have text keys; integer-looking keys become ints (``{"5": 4}`` → {5: 4})."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            try:
                out[int(k)] = v
            except ValueError:
                out[k] = v
        return out
    return value


def parse_value(key: str, text: str, field: dataclasses.Field[Any], where: str) -> Any:
    """Read ``text`` as a value of spec field ``field``; errors name the key and the rule.

    >>> from padless import Buckets
    >>> f = {f.name: f for f in setting_fields(Buckets)}
    >>> parse_value("boundaries", "12,40,100", f["boundaries"], "buckets")
    [12, 40, 100]
    >>> parse_value("num_buckets", "none", f["num_buckets"], "buckets") is None
    True
    """
    kinds = field_kinds(field)
    raw = text.strip()
    low = raw.lower()
    try:
        decoded = json.loads(raw)
    except ValueError:
        pass
    except RecursionError:
        raise ValueError(
            f"{where}: {key} is JSON nested too deeply to read (a setting is a flat list or map), "
            f"got {text!r:.60}"
        ) from None
    else:
        if _fits(decoded, kinds) and not (isinstance(decoded, str) and "str" not in kinds):
            if (
                "Any" in kinds
                and isinstance(decoded, (int, float))
                and not isinstance(decoded, bool)
                and not (kinds & {"int", "float"})
            ):
                return [decoded]  # one boundary: a list of one (a number where none is taken)
            return _int_keys(decoded)
    if low in _NONE and ("None" in kinds or "Any" in kinds):
        return None
    if "bool" in kinds and low in _TRUE | _FALSE:
        return low in _TRUE
    if "int" in kinds:
        try:
            return int(raw)
        except ValueError:
            pass
    if "float" in kinds:
        try:
            return float(raw)
        except ValueError:
            pass
    if "Any" in kinds and raw and raw[0] not in "[{":
        items = [item.strip() for item in raw.split(",") if item.strip()]
        if items and all(":" in item for item in items):
            pairs = [item.split(":", 1) for item in items]
            return {_scalar(k.strip()): _scalar(v.strip()) for k, v in pairs}
        if items and not any(":" in item for item in items):
            return [_scalar(item) for item in items]
    if "str" in kinds and raw:
        return raw
    raise ValueError(f"{where}: {key} must be {describe_kinds(kinds)}, got {text!r}")


def split_assignment(text: str, option: str = "--set") -> tuple[str, str]:
    """``"key=value"`` → ``("key", "value")`` (dashes in the key read as underscores).

    >>> split_assignment("max-tokens=4096")
    ('max_tokens', '4096')
    """
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise ValueError(f"{option} takes key=value, got {text!r}")
    return key, value


def build_spec(
    name: str,
    spec_class: type,
    given: Mapping[str, tuple[str, str]],
    *,
    defaults: Mapping[str, Any] | None = None,
    where: str | None = None,
) -> Any:
    """Build ``spec_class`` from ``given`` = {key: (option that gave it, text)}.

    Unknown keys are refused with the known ones listed; ``defaults`` fill keys the user did
    not give; errors from the spec's own checks are prefixed with ``where``.
    """
    where = where or f"strategy {name}"
    fields = {f.name: f for f in setting_fields(spec_class)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        option, _ = given[unknown[0]]
        raise ValueError(
            f"{where}: unknown setting {unknown[0]!r} (from {option}); known: {', '.join(fields)}"
        )
    kwargs = dict(defaults or {})
    for key, (option, text) in given.items():
        # errors name the option that gave the value (--max-tokens, or the key of --set)
        label = key if option == "--set" else option
        kwargs[key] = parse_value(label, text, fields[key], where)
    missing = [k for k, f in fields.items() if is_required(f) and k not in kwargs]
    if missing:
        options = ", ".join(f"--{k.replace('_', '-')}" for k in missing)
        raise ValueError(f"{where} needs {options} (or --set {missing[0]}=VALUE)")
    try:
        return spec_class(**kwargs)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc


def merge_given(sources: Iterable[tuple[str, str, str]]) -> dict[str, tuple[str, str]]:
    """{key: (option, text)} from (key, option, text) triples; a key given twice is refused."""
    given: dict[str, tuple[str, str]] = {}
    for key, option, text in sources:
        if key in given and given[key][1] != text:
            raise ValueError(
                f"{key} is given twice ({given[key][0]} {given[key][1]!r} and {option} {text!r})"
            )
        given[key] = (option, text)
    return given
