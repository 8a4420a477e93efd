"""The library's known errors: problems a user can fix, each message saying what and how.

Explained on the book's page "Running the book" (``book/running.md``) and in DESIGN.md ("Bad
inputs"). Everything else that goes wrong is a bug. The command line prints a known error as one
line (``error: ...``) and exits with status 1; any other exception keeps its traceback, and
``--debug`` shows the traceback of a known error too.

Each class also derives from the built-in exception that code written before it expected
(``ValueError`` for a bad value, ``RuntimeError`` for a failed read), so ``except ValueError``
still catches a ``ConfigError``.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the inputs (data, settings, checkpoints), not with the library."""


class DataSourceError(UserError, RuntimeError):
    """A data set could not be read from where it was asked for (Hub offline, mirror incomplete,
    a file damaged or not UTF-8)."""


class SchemaError(UserError, ValueError):
    """A data file lacks a field the loaders need, or holds values they cannot use."""


class ConfigError(UserError, ValueError):
    """A setting has a value that cannot work (wrong type, out of range, unknown name)."""


class CheckpointError(UserError, RuntimeError):
    """A model or training checkpoint is missing, incomplete or damaged, or belongs to another run."""


class DivergedError(UserError, FloatingPointError):
    """Training stopped because the loss became NaN or infinite."""
