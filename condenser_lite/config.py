"""Notebook parameters and shared locations.

Every chapter's first cell holds papermill parameters; papermill passes ``-p full true`` as the
*string* ``"true"``, so each chapter validates its parameters with the helpers here
(explained in the introduction, ``book/intro.md``, "Running the book").
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import types
import typing
from pathlib import Path

from .errors import ConfigError

CACHE_ENV = "CONDENSER_LITE_CACHE"

_TRUE = {"true", "1", "yes", "y", "on", "t"}
_FALSE = {"false", "0", "no", "n", "off", "f", ""}


def parse_bool(value: object, name: str = "full") -> bool:
    """Read a boolean parameter that may arrive as a bool, an int or a string.

    ``papermill ... -p full true`` injects ``full = "true"``; ``-p full True`` injects a bool.
    Anything else is an error that names the parameter and the accepted spellings.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(
        f"parameter {name!r} must be a boolean, got {value!r} ({type(value).__name__}); "
        f"use one of True/False, true/false, 1/0, yes/no (e.g. papermill -p {name} true)"
    )


def parse_int(value: object, name: str, minimum: int | None = None, optional: bool = False) -> int | None:
    """Read an integer parameter (papermill may pass ``"3"``); error names the parameter.
    With ``optional=True``, ``None``, ``""`` and ``"none"`` mean "not set" and give ``None``."""
    if optional and _unset(value):
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, float) and not value.is_integer():
            raise TypeError
        out = int(str(value).strip()) if isinstance(value, str) else int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"parameter {name!r} must be an integer, got {value!r} ({type(value).__name__})") from None
    if minimum is not None and out < minimum:
        raise ConfigError(f"parameter {name!r} must be >= {minimum}, got {out}")
    return out


def parse_float(value: object, name: str) -> float:
    """Read a float parameter (papermill may pass ``"1e-4"``); error names the parameter."""
    if isinstance(value, bool):
        raise ConfigError(f"parameter {name!r} must be a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"parameter {name!r} must be a number, got {value!r} ({type(value).__name__})") from None


def parse_choice(value: object, name: str, choices: tuple[str, ...], hint: str = "") -> str:
    """Read a parameter that must be one of ``choices`` (case-insensitive); error names them."""
    text = str(value).strip().lower()
    if text not in choices:
        raise ValueError(f"parameter {name!r} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}" + (f" ({hint})" if hint else ""))
    return text


def parse_path(value: object, name: str) -> Path | None:
    """Read an optional folder parameter: ``None``, ``""`` or ``"none"`` give ``None``, anything
    else a :class:`~pathlib.Path` with ``~`` expanded."""
    if _unset(value):
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"parameter {name!r} must be a folder path or None, got {value!r}")
    return Path(value).expanduser()


def _unset(value: object) -> bool:
    # papermill's -p passes strings, so "None" arrives as text
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "none"))


def cache_dir(sub: str | None = None) -> Path:
    """Where tokenizers, checkpoints and results are cached: ``$CONDENSER_LITE_CACHE`` or
    ``~/.cache/condenser_lite``. Chapters share it, so a model pre-trained in chapter 2 is reused later."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "condenser_lite").expanduser()
    path = root / sub if sub else root
    if root.exists() and not root.is_dir():
        path = root  # the cause, whichever sub-folder was asked for
    try:
        path.mkdir(parents=True, exist_ok=True)
        reason = None if os.access(path, os.W_OK) else "read-only"
    except OSError as err:  # a file where a folder should be, no permission to create it
        reason = f"{type(err).__name__}: {err.strerror or err}"
    if reason:  # said here, not in whichever write of an hour-long run comes first
        raise ConfigError(f"the cache folder {path} (${CACHE_ENV}) cannot be written ({reason}); point ${CACHE_ENV} "
                          "at a writable folder")
    return path


def pick_device() -> str:
    """``"cuda"``, ``"xla"`` (TPU), ``"mps"`` or ``"cpu"``, whichever this machine has."""
    import torch

    from .devices import xla

    if torch.cuda.is_available():
        return "cuda"
    if xla.available():  # Colab TPU runtime (torch_xla installed)
        return "xla"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def check_types(obj: object) -> None:
    """Raise ``ConfigError`` naming the first field of the dataclass ``obj`` whose value does not
    have its annotated type (``int``, ``float``, ``bool``, ``str``, optionally ``| None``): a
    ``max_steps`` of 2.5 would otherwise run 3 steps and be recorded as 2.5. Introduction
    (``book/intro.md``, "Running the book")."""
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


def check_positive(obj: object, *names: str) -> None:
    """Raise ``ConfigError`` naming the first of the fields ``names`` of ``obj`` that is set but
    not > 0: ``lr=0`` would train nothing without a word and ``batch_size=0`` fail deep inside.
    Introduction (``book/intro.md``, "Running the book")."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and not value > 0:
            raise ConfigError(f"{type(obj).__name__}.{name}={value!r} must be > 0; give a positive value "
                              f"(command line: --set {name}=...)")
