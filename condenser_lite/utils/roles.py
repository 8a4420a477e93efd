"""A setting's role, declared once on its field.

A config field is declared with ``setting(default, **role)``, which stores the role in the
field's metadata; a subclass adds roles to an inherited field with ``inherited``. Everything
that treats settings by role (the cache key, a resume, the health check, the command line) asks
``having`` instead of keeping its own list of names. The roles:

* ``read_by``: the stage methods that read it (unset: every method). Set for another method it
  would change the stage's cache key and nothing the stage computes.
* ``key``: how it joins a stage's cache key: ``"no"`` (it changes neither the weights nor the
  log) or ``"if_changed"`` (only where set away from its default, so the stages recorded before
  it existed keep their keys). Unset: always.
* ``resume``: ``False`` where a resumed run may differ from its checkpoint in it (bookkeeping
  and speed; the same maths).
* ``health``: ``"neutral"`` (it changes neither how a stage learns nor what from), or the rank
  of a training setting among the suspects the health check names first (1: the learning rate).
* ``unread``: why a config that inherits the field does not read it (no path of the tree).
* ``protocol_unread``: on a stage of ``Stages``, the fields of it the protocol does not read.

Explained on the page "Running the book" (``book/running.md``).

>>> import dataclasses
>>> @dataclasses.dataclass
... class C:
...     lr: float = setting(1e-3, health=1)
...     save_every: int = setting(200, key="no", resume=False)
>>> having(C, "key", "no"), having(C, "health")
(('save_every',), {'lr': 1})
"""

from __future__ import annotations

import dataclasses
from typing import Any


def setting(default: Any, **role: Any) -> Any:
    """A dataclass field with ``default`` and its ``role`` (see the module docstring)."""
    return dataclasses.field(default=default, metadata=role)


def inherited(base: type, name: str, **role: Any) -> Any:
    """The field ``name`` of the dataclass ``base``, redeclared in a subclass with the same default
    and its roles, plus ``role`` (e.g. why the subclass does not read it)."""
    field = next(f for f in dataclasses.fields(base) if f.name == name)
    return dataclasses.field(default=field.default, metadata={**field.metadata, **role})


def having(cls: type, role: str, value: Any = None) -> tuple[str, ...] | dict[str, Any]:
    """The fields of ``cls`` whose ``role`` is ``value``, in field order; without ``value``, a
    dict of every field that declares ``role`` to what it declares."""
    declared = {f.name: f.metadata[role] for f in dataclasses.fields(cls) if role in f.metadata}
    return declared if value is None else tuple(n for n, v in declared.items() if v == value)
