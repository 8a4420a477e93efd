"""The command line's small parts shared by ``python -m condenser_lite`` and the scripts under
``benchmarks/``: argument types that name a bad value in one line, and running a script's ``main``
so that a known error (``errors.UserError``) prints one line instead of a traceback. The page
"Running the book" (``book/running.md``).

>>> seed_list("42,43")
[42, 43]
"""

from __future__ import annotations

import argparse
import sys
import typing

from .errors import ConfigError, UserError


def seed_list(text: str, flag: str = "--seeds") -> list[int]:
    """Comma-separated pre-training seeds (``"42,43,44"``), each a whole number of at least 0;
    a ``ConfigError`` naming ``flag`` otherwise."""
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0:
        raise ConfigError(f"{flag} {text!r}: give at least one seed, comma-separated whole numbers of at "
                          "least 0, e.g. --seeds 0,1,2")
    return seeds


def token_length(text: str) -> int:
    """``argparse`` type of a length in tokens (``--q-max-len``): at least 3, room for ``[CLS]``,
    ``[SEP]`` and one token of text (below 2 a tokenizer does not truncate at all)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of tokens of at least 3 ([CLS], [SEP] "
                                         "and one token of text)")
    return value


def positive_float(text: str) -> float:
    """``argparse`` type of a finite amount above 0 (a budget in seconds)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number above 0")
    return value


def positive_int(text: str) -> int:
    """``argparse`` type of a count of at least 1 (``--workers``, ``--batch-size``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


def one_line(err: BaseException | str) -> str:
    """A message on one line (an error's lines joined), as the command line prints it."""
    return " ".join(part.strip() for part in str(err).splitlines() if part.strip())


def run_script(main: typing.Callable[[], None]) -> None:
    """Run a benchmark script's ``main`` as ``python -m condenser_lite`` runs a sub-command: a
    known error (``errors.UserError``) is one line ``error: ...`` with exit status 1, its traceback
    only with ``--debug`` on the script's command line; any other exception is a bug and keeps
    its traceback."""
    try:
        main()
    except UserError as err:
        if "--debug" in sys.argv[1:]:
            raise
        print(f"error: {one_line(err)}", file=sys.stderr)
        raise SystemExit(1) from None
