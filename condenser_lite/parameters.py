"""The chapters' papermill parameters and the command line's settings, parsed.

Every chapter's first cell holds papermill parameters; papermill passes ``-p full true`` as the
*string* ``"true"``, so each chapter (``book.setup``) and the command line read their parameters
with the helpers here, which accept the spellings a user types and name the parameter otherwise
(explained in the page "Running the book", ``book/running.md``). ``parse_settings`` reads
``path=value`` settings (``--set`` and a chapter's ``settings``) into the settings tree's paths
(``settings_tree.setting_path``), each value of its field's type, read by OmegaConf.
"""

from __future__ import annotations

import math
import os
import shlex
import types
import typing
from pathlib import Path
from typing import Any

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


def parse_settings(pairs: object, where: str = "--set") -> dict[str, Any]:
    """``path=value`` settings (a list, or one string of them separated by spaces) as
    ``{path: value}``: each key resolved to its path in the settings tree
    (``settings_tree.setting_path``; a bare name that one path ends in stands for it), each value read as
    its field's annotated type (``_convert``: OmegaConf's structured schema of the field's config);
    a bad key or value raises ``ConfigError`` naming it. ``where``
    names the source in errors (``--set``, ``parameter 'settings'``). Explained on the page
    "Running the book" (``book/running.md``)."""
    from .reproduction.configuration.settings_tree import setting_path, setting_tree

    if _unset(pairs):
        return {}
    pairs = shlex.split(pairs) if isinstance(pairs, str) else list(pairs)
    tree, out = setting_tree(), {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{where} expects path=value, got {pair!r} (e.g. {where} finetune.lr=1e-4)")
        key, raw = pair.split("=", 1)
        try:
            path = setting_path(key)
        except ConfigError as err:
            raise ConfigError(f"{where} {pair}: {err}") from None
        owner, name = tree[path]
        if path in out:  # which of the two wins is not for a reader to guess
            raise ConfigError(f"{where} {pair}: {path} is set twice; give it once")
        out[path] = _convert(owner, name, raw, path, where)
    return out


def _convert(owner: type, name: str, raw: str, key: str, where: str) -> Any:
    """``raw`` as a value of the field ``name`` of the config class ``owner``, read by OmegaConf
    against its annotated type (YAML's grammar: ``null``, ``[0, 1, 2]``, ``{skip_from: 0}``), or
    a ``ConfigError`` naming the key and an example.

    Read from the annotation, not from the current value: ``max_steps`` is ``int | None`` even
    while it is None, so ``max_steps=2.5`` is refused instead of running 3 steps. A text field
    takes the text as typed: YAML would read ``mixed_precision=no`` as ``False``, and OmegaConf
    would then store the string ``"False"``."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    kind = typing.get_type_hints(owner)[name]
    options = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
    optional, simple = type(None) in options, [t for t in options if t is not type(None)]
    base = (typing.get_origin(simple[0]) or simple[0]) if len(simple) == 1 else None
    if raw.strip().lower() in ("none", "null"):
        if optional:
            return None
        raise ConfigError(f"{where} {key}={raw}: {key} cannot be None; give a value")
    if base is str:
        return raw
    try:
        node = OmegaConf.merge(OmegaConf.structured(owner), OmegaConf.from_dotlist([f"{name}={raw}"]))
        value = OmegaConf.to_container(node)[name]
    except OmegaConfBaseException:
        value = _REFUSED
    example = {bool: "true", int: "8", float: "1e-4", dict: "'{skip_from: 0}'"}.get(base, "'[0, 1, 2]'")
    items = typing.get_args(simple[0])[:1] if base is tuple else ()
    words = {bool: "true or false", int: "an integer" + " (or none)" * optional, float: "a number",
             dict: "a mapping", tuple: "a list" + " of integers" * (items == (int,))}
    if value is _REFUSED:
        raise ConfigError(f"{where} {key}={raw}: {key} takes {words.get(base, 'a YAML value')}, "
                          f"e.g. {where} {key}={example}")
    if base is float and value is not None and not math.isfinite(value):  # nan passes every < and > check
        raise ConfigError(f"{where} {key}={raw}: {key} takes a finite number, e.g. {where} {key}={example}")
    return tuple(value) if base is tuple and isinstance(value, list) else value


_REFUSED = object()  # a value OmegaConf cannot read as the field's type
