"""The chapters' papermill parameters, parsed.

Every chapter's first cell holds papermill parameters; papermill passes ``-p full true`` as the
*string* ``"true"``, so each chapter (``book.setup``) and the command line read their parameters
with the helpers here, which accept the spellings a user types and name the parameter otherwise
(explained in the page "Running the book", ``book/running.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .utils.errors import ConfigError

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
