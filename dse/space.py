"""The design space of a sweep: HwConfig fields and the values each takes, read from a
YAML file, and the points (configurations) it spans."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorfab.isa import HwConfig, UsageError
from tensorfab.isa.config import ConfigError

__all__ = ["FIELD_TYPES", "SWEEPABLE_FIELDS", "SpacePoint", "load_space", "space_points"]

#: HwConfig fields a space file may name.
SWEEPABLE_FIELDS = ("batch", "block_in", "block_out", "inp_depth", "wgt_depth",
                    "acc_depth", "uop_depth", "mem_bus_width", "clock_mhz",
                    "sequential_multiplier")


@dataclass(frozen=True)
class SpacePoint:
    """One point of the space: the field values and the config they make, or why not.

    Attributes
    ----------
    values : dict[str, Any]
        The swept fields' values at this point.
    config : HwConfig or None
        The configuration, ``None`` when the values break a HwConfig rule.
    invalid_reason : str or None
        The :class:`~tensorfab.isa.config.ConfigError` message of an invalid point.
    """

    values: dict[str, Any]
    config: HwConfig | None
    invalid_reason: str | None


#: The type of each sweepable field's values (``float`` takes integers too).
FIELD_TYPES: dict[str, type] = {name: type(getattr(HwConfig(), name))
                                for name in SWEEPABLE_FIELDS}


def _yaml_lines(node: Any, key: str) -> tuple[int | None, list[int]]:
    """1-based lines of ``key`` in a composed YAML mapping node and of each item of its
    list of values (the key's line for a single value)."""
    import yaml

    for k, v in getattr(node, "value", []):
        if getattr(k, "value", None) == key:
            items = v.value if isinstance(v, yaml.SequenceNode) else [v]
            return k.start_mark.line + 1, [item.start_mark.line + 1 for item in items]
    return None, []


def _refuse_repeated_fields(node: Any, path: Path) -> None:
    """A :class:`UsageError` naming the line of a field the mapping ``node`` gives a
    second time (YAML loaders keep the last and drop the first silently)."""
    first: dict[Any, int] = {}
    for k, _ in getattr(node, "value", []):
        key, line = getattr(k, "value", None), k.start_mark.line + 1
        if key in first:
            raise UsageError(f"{path}:{line}: field {key!r} is given twice (first on line "
                             f"{first[key]}); give it once, with all its values in one "
                             "list")
        first[key] = line


def _is_value(value: Any, kind: type) -> bool:
    """Whether ``value`` is of a field's ``kind`` (an integer, for ``float`` any
    number, for ``bool`` true or false; YAML's ``true`` is no number)."""
    if kind is bool:
        return isinstance(value, bool)
    return (isinstance(value, int | float if kind is float else int)
            and not isinstance(value, bool))


def load_space(path: str | Path) -> dict[str, list[Any]]:
    """Read a space file: a mapping of HwConfig field to a list of values.

    Parameters
    ----------
    path
        The YAML file, e.g. ``{batch: [1], block_in: [8, 16], clock_mhz: [50]}``.

    Returns
    -------
    dict[str, list]
        Field name to its values, in file order.

    Raises
    ------
    UsageError
        The file is missing, not YAML (file and line named), or names an unknown
        field or one twice, a field without a non-empty list of values, a value that is not a
        number of the field's type (an integer but for ``clock_mhz``) or one listed
        twice for a field (file, line, field and value named).
    """
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise UsageError(f"{p}: cannot read the space file ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(e, "problem", None) or str(e)
        raise UsageError(f"{where}: not valid YAML ({problem})") from None
    if not isinstance(data, dict) or not data:
        raise UsageError(f"{p}: expected a mapping of HwConfig field to a list of values")
    _refuse_repeated_fields(node, p)
    space: dict[str, list[Any]] = {}
    for key, values in data.items():
        line, lines = _yaml_lines(node, str(key))
        where = f"{p}:{line or '?'}"
        if key not in SWEEPABLE_FIELDS:
            raise UsageError(f"{where}: field {key!r} is not a sweepable HwConfig field "
                             f"(one of {', '.join(SWEEPABLE_FIELDS)})")
        kind = FIELD_TYPES[key]
        numbers = {int: "integers", bool: "true or false"}.get(kind, "numbers")
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise UsageError(f"{where}: field {key!r} needs a non-empty list of {numbers}")
        for k, v in enumerate(values):
            if not _is_value(v, kind):
                at = f"{p}:{lines[k]}" if k < len(lines) else where
                one = {int: "an integer", bool: "true or false"}.get(kind, "a number")
                raise UsageError(f"{at}: field {key!r}: {v!r} is not {one} (it needs "
                                 f"a non-empty list of {numbers})")
            if v in values[:k]:
                at = f"{p}:{lines[k]}" if k < len(lines) else where
                raise UsageError(f"{at}: field {key!r}: {v!r} is listed twice (list each "
                                 "value once; a repeated point is summed twice)")
        space[str(key)] = values
    return space


def space_points(space: dict[str, list[Any]],
                 base: HwConfig | None = None) -> list[SpacePoint]:
    """Every combination of the space's values applied to ``base`` (default HwConfig).

    A combination that breaks a HwConfig rule becomes an invalid point carrying the
    ConfigError's message rather than an exception.
    """
    base = base or HwConfig()
    fields = list(space)
    points = []
    for combo in itertools.product(*(space[f] for f in fields)):
        values = dict(zip(fields, combo, strict=True))
        name = "dse-" + "-".join(f"{k}{v}" for k, v in values.items())
        try:
            cfg = dataclasses.replace(base, name=name, **values)
        except ConfigError as e:
            points.append(SpacePoint(values, None, str(e)))
        else:
            points.append(SpacePoint(values, cfg, None))
    return points
