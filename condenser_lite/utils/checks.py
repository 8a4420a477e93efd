"""Settings checked where they enter: a dataclass's field types and signs.

Every config (``StageConfig``... the component configs of a preset, ``TrainConfig``) calls these
in ``__post_init__``, so a wrong setting stops in one line naming the field before anything runs.
Explained on the page "Running the book" (``book/running.md``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing

from .errors import ConfigError
from .roles import having


def check_types(obj: object) -> None:
    """Raise ``ConfigError`` naming the first field of the dataclass ``obj`` whose value does not
    have its annotated type (``int``, ``float``, ``bool``, ``str``, optionally ``| None``): a
    ``max_steps`` of 2.5 would otherwise run 3 steps and be recorded as 2.5. Introduction
    (``book/running.md``)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        kind, value = hints[f.name], getattr(obj, f.name)
        options = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
        if value is None and type(None) in options:
            continue
        simple = [t for t in options if t in (int, float, bool, str)]
        if not simple or len(simple) != len([t for t in options if t is not type(None)]):
            continue  # tuples, mappings, nested configs: checked where they are used
        number = numbers.Real if float in simple else numbers.Integral if int in simple else ()
        ok = isinstance(value, tuple(t for t in simple if t in (bool, str))) \
            or (isinstance(value, number) and not isinstance(value, bool))
        if not ok:
            allowed = " or ".join(t.__name__ for t in simple) + (" or None" if type(None) in options else "")
            raise ConfigError(f"{type(obj).__name__}.{f.name}={value!r} must be {allowed}")
        if number and not isinstance(value, bool) and isinstance(value, numbers.Real) and not math.isfinite(value):
            raise ConfigError(f"{type(obj).__name__}.{f.name}={value!r} must be a finite number")


# where each config's fields sit in the settings tree (reproduction.configuration.presets.setting_tree)
PATH_ROOTS = {"StageConfig": "stages.<stage>.", "StageRecipe": "stages.<stage>.", "ModelConfig": "model.",
              "FinetuneConfig": "finetune.", "STSConfig": "sts."}


def check_positive(obj: object, *names: str) -> None:
    """Raise ``ConfigError`` naming the first of the fields ``names`` of ``obj`` that is set but
    not > 0 and finite: ``lr=0`` would train nothing without a word and ``batch_size=0`` fail deep inside.
    The page "Running the book" (``book/running.md``)."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and not 0 < value < float("inf"):  # inf trains to NaN at the first step
            root = PATH_ROOTS.get(type(obj).__name__)
            settable = root is not None and name not in having(type(obj), "unread")
            where = f" (command line: --set {root}{name}=...)" if settable else ""
            raise ConfigError(f"{type(obj).__name__}.{name}={value!r} must be > 0 and finite; give a positive value{where}")
