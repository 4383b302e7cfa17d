"""What a Triton kernel's config is: a frozen dataclass per kernel family (gemmbench/kernels/*.py), a KernelConfig, with one
field per key of its JSON (stored files, the row's `config`), its values checked where it is made (a ConfigError
names the key).  Where a config came from is provenance.Provenance, kept beside it.  Split out of tuning.py, which
re-exports KernelConfig: the kernels and plugins subclass tuning.KernelConfig."""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Callable, ClassVar, Mapping, Optional, TypeVar


class ConfigError(ValueError):
    """A kernel config that cannot be: an unknown or missing key, a wrong type or value.  The message names the key."""


def _power_of_two(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


# Cheap checks of the values, by key: what Triton would otherwise reject at compile time, deep in a sweep, or
# launch wrongly.  tl.arange needs powers of two, and tl.dot at least 16 in every dimension.
_VALUE_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **dict.fromkeys(
        ("BLOCK_M", "BLOCK_N", "BLOCK_K"), (lambda v: _power_of_two(v) and v >= 16, "a power of two >= 16")
    ),
    "GROUP_M": (lambda v: v >= 1, ">= 1"),
    "SPLIT_K": (lambda v: v >= 1, ">= 1"),
    "num_warps": (_power_of_two, "a power of two"),
    "num_stages": (lambda v: v >= 1, ">= 1"),
    "FP8_PROMOTE": (lambda v: v >= 1, ">= 1"),
}


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """The fields' types, resolved once per class (the kernels' modules write them as strings)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


_TYPE_NAMES = {int: "an int", bool: "true or false", str: "a string", type(None): "None (not set)"}


class _Rule(typing.NamedTuple):
    """What one field's value must be: its exact types, its choices (None: any), its value check (None: none)."""

    name: str
    types: tuple
    choices: Optional[tuple]
    check: Optional[Callable[[Any], bool]]
    what: str


@functools.cache
def _rules(cls: type) -> tuple[_Rule, ...]:
    """Each field's _Rule, worked out once per class: a tune's search space makes hundreds of thousands of configs."""
    rules = []
    hints = _field_types(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        types = typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)
        check, what = _VALUE_CHECKS.get(f.name, (None, ""))
        rules.append(_Rule(f.name, types, f.metadata.get("choices"), check, what))
    return tuple(rules)


def _unmet(rule: _Rule, value: Any) -> Optional[str]:
    """What a field's value must be, where it is not that; else None.  The type is exact (int, bool, str, or an
    Optional of one): JSON's true is not an int here, nor 16.0."""
    if type(value) not in rule.types:
        return " or ".join(_TYPE_NAMES[t] for t in rule.types)
    if value is not None and rule.choices is not None and value not in rule.choices:
        return "one of " + ", ".join(map(repr, rule.choices))
    return rule.what if value is not None and rule.check is not None and not rule.check(value) else None


C = TypeVar("C", bound="KernelConfig")


class KernelConfig:
    """Base of the kernel families' configs: frozen, keyword-only dataclasses (gemmbench/kernels/*.py) with one field per
    key of the config's JSON, declared in the order the keys are written, so the JSON (stored files, the row's
    `config`) keeps the keys and order it had when configs were dicts.  A field that is None is not set: its
    key is left out, and the kernel's default applies.  A key that a dict lacks takes the field's default (a
    SplitK file tuned before TMA existed loads with TMA=False).  A field whose metadata has "choices" takes
    only those values."""

    # fields that together make one choice (a kernel's way of promoting, spelled by several fields): a tune's local
    # search changes them as one field, since a step through one alone may reach only configs that do not fit
    ONE_CHOICE: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def __post_init__(self) -> None:
        for rule in _rules(type(self)):
            value = getattr(self, rule.name)
            want = _unmet(rule, value)
            if want:
                raise ConfigError(f"{type(self).__name__}: {rule.name} must be {want}, not {value!r}")

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """The config of a JSON dict (a stored file's); an unknown or missing key, a wrong type or value is a
        ConfigError that names the key."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in data:
            if key not in fields:
                raise ConfigError(f"{cls.__name__}: unknown key {key!r} (known: {', '.join(fields)})")
        for name, f in fields.items():
            if name not in data and f.default is dataclasses.MISSING:
                raise ConfigError(f"{cls.__name__}: missing key {name!r}")
        return cls(**data)

    @classmethod
    def tile(cls: type[C], bm: int, bn: int, bk: int, warps: int, stages: int, **knobs: Any) -> C:
        """The shorthand of the search spaces: tile sizes, warps and stages by position, the rest by name."""
        return cls(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages, **knobs)

    def to_dict(self) -> dict[str, Any]:
        """Its JSON dict: the fields that are set, in their declared order."""
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}
