"""The cache: where results are kept, how they are named, and how two processes share them.

Every cached thing in the library (tokenizers, pre-training stages, fine-tunings, STS-b runs,
the protocol's jobs) lives under ``$CONDENSER_LITE_CACHE`` (``cache_dir``), in a folder named by
a hash of everything its result depends on (``settings_hash``; files by their content,
``content_id``), is computed once (``compute_once`` for a JSON result, ``build_once`` for a folder
of files) and is written by one process at a time (``output_lock``); a pre-training stage, which
must also resume, marks itself done the same way (``training.pretraining``). ``settings_diff``
says what differs when a folder holds another result.

Explained in chapter 4, ``notebooks/04_finetune.ipynb`` ("Cost"), and DESIGN.md ("Caches").
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

logger = logging.getLogger(__name__)


CACHE_ENV = "CONDENSER_LITE_CACHE"


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


_WHOLE_FILE_LIMIT = 256 * 2**20  # larger files (full-scale parquet shards) are named by size, head and tail


def content_id(path: Path, whole: bool = False) -> Any:
    """A file's content hash, a folder's per-file hashes, or None when it is absent: what a cache
    key holds for a file it depends on (chapter 1). Unless ``whole``, files over 256 MiB are named
    by their size, first and last MiB, so a full-scale corpus is not read twice."""
    if path.is_dir():
        return {p.name: content_id(p, whole) for p in sorted(path.iterdir()) if not p.name.startswith(".")}
    if not path.is_file():
        return None
    size, h = path.stat().st_size, hashlib.sha256()
    with path.open("rb") as f:
        if whole or size <= _WHOLE_FILE_LIMIT:
            for block in iter(lambda: f.read(2**20), b""):
                h.update(block)
        else:
            h.update(f.read(2**20))
            f.seek(-2**20, os.SEEK_END)
            h.update(f.read(2**20))
            h.update(str(size).encode())
    return h.hexdigest()[:16]
LOCK_FILE = ".lock"  # in the folder it guards; clean-ups that empty a folder must leave it
_held: dict[str, int] = {}  # lock files this process holds -> nesting depth


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (``fcntl.flock`` on ``folder/.lock``) for the block (chapter 4).

    A second process asking for the same folder says once that it waits, and for whom, then waits
    until the first is done, so two identical commands never write one checkpoint or log at once.
    Re-entrant within a process (a fine-tuning locks its folder, and so does the training loop
    inside it). The lock dies with its process: a killed writer leaves nothing to clean up."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = str((folder / LOCK_FILE).resolve())
    if path in _held:
        _held[path] += 1
        try:
            yield folder
        finally:
            _held[path] -= 1
        return
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            logger.warning("%s is being written by %s; waiting for it to finish", folder, holder)
            fcntl.flock(f, fcntl.LOCK_EX)
        f.truncate(0)
        f.write(f"process {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        _held[path] = 1
        try:
            yield folder
        finally:
            del _held[path]
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


def settings_hash(settings: Any, n: int = 12) -> str:
    """A short hash of JSON-able settings: the name of a cached result (chapter 4)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:n]


def settings_diff(saved: Mapping[str, Any], now: Mapping[str, Any], label: str = "saved") -> list[str]:
    """Where two settings dicts differ, one ``"name: <label> a vs now b"`` per field, nested dicts
    compared field by field (``data.scifact/corpus.jsonl: ...``): what an error shows when a
    folder holds the result of other settings (chapter 4)."""
    out = []
    for k in sorted(set(saved) | set(now), key=str):
        a, b = saved.get(k), now.get(k)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += [f"{k}.{line}" for line in settings_diff(a, b, label)]
        elif a != b:
            out.append(f"{k}: {label} {a!r} vs now {b!r}")
    return out


def compute_once(result_file: str | os.PathLike, compute: Callable[[], dict]) -> dict:
    """``compute()`` once: its JSON result is written to ``result_file`` (atomically, last, so a
    folder without it is unfinished) and read back on every later call (chapter 4). The folder
    is locked while computing: a second process waits for the first one's result."""
    result_file = Path(result_file)
    if result_file.exists():
        return json.loads(result_file.read_text())
    with output_lock(result_file.parent):
        if result_file.exists():  # written while this process waited for the lock
            return json.loads(result_file.read_text())
        result = compute()
        tmp = result_file.with_name(f"{result_file.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(result))
        tmp.replace(result_file)
    return result


DONE_FILE = ".done"  # written last by build_once: a folder without it is unfinished


def build_once(folder: str | os.PathLike, build: Callable[[Path], Any]) -> Path:
    """The folder that ``build(folder)`` fills, built once (chapter 4): under ``output_lock``,
    whatever an interrupted build left is cleared, ``build`` writes its files, and ``DONE_FILE`` is
    written last; later calls (and a second process, after waiting) find it done and build nothing.
    Returns the folder. The tokenizer and the protocol's task data are cached this way."""
    folder = Path(folder)
    if (folder / DONE_FILE).exists():
        return folder
    with output_lock(folder):
        if not (folder / DONE_FILE).exists():
            for leftover in folder.iterdir():
                if leftover.name != LOCK_FILE:
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
            build(folder)
            (folder / DONE_FILE).write_text("")
    return folder
