"""The results file as evidence: what it records about how it was made (commit, command,
settings, wall and CPU time, machine, package versions), its headline for tools, and reading the
committed file back with its version checked.

``protocol.run_protocol`` writes the file; the chapters read it with ``load_results`` (the
committed ``results/<name>.json``). Explained in chapters 4 and 8
(``notebooks/04_finetune.ipynb``, ``notebooks/08_scorecard.ipynb``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import torch

import condenser_lite

from ..utils.errors import DataSourceError, SchemaError
from .jobs import load_average
from .presets import Preset
from .rules import PRE_REGISTRATION_COMMIT, RULES_V2_COMMIT, RULES_VERSION, gauge, head_arms, pretraining_runs, reliance_by_seed, reliance_summary

RESULTS_VERSION = 4  # 4: the preset under "preset" (3: "budget")
REPO_ROOT = Path(__file__).resolve().parents[2]  # condenser_lite/reproduction/results.py -> the repository
RESULTS_DIR = REPO_ROOT / "results"  # the committed results files the chapters read (load_results)
RESULTS_ENV = "CONDENSER_LITE_RESULTS"  # where they are when the package is installed away from its clone
PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "accelerate", "faiss-cpu", "bm25s", "ir_measures",
            "numpy", "scipy")


# ---- provenance ----------------------------------------------------------------------------------


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its finished children (the job workers,
    counted once the pool has shut them down)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def machine(load_start: list[float] | None) -> dict:
    cpu_model, ram = None, None
    try:
        info = Path("/proc/cpuinfo").read_text()
        cpu_model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                          if line.startswith("model name")), None)
        mem = Path("/proc/meminfo").read_text().split("MemTotal:", 1)[1].split()[0]
        ram = round(int(mem) / 2**20, 1)  # kB -> GiB
    except (OSError, IndexError, ValueError):
        pass
    return {"cpu": cpu_model or platform.processor() or None, "cores": os.cpu_count(), "ram_gib": ram,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "platform": platform.platform(), "load_average_start": load_start, "load_average_end": load_average()}


def provenance(preset: Preset, command: str | None, started: str, wall_seconds: float, cpu_seconds: float,
               parts: Mapping[str, Mapping], parts_reused: int, load_start: list[float] | None,
               work_cpu_seconds: float) -> dict:
    """Where a results file comes from: the git ``commit`` of the library (and whether tracked
    files differed from it: ``dirty``), the ``command`` line, the ``preset`` and all its
    ``settings``, ``started``/``finished`` (UTC), ``wall_seconds`` and ``cpu_seconds`` of this call
    (its own process and the job workers) in total and per ``part``, ``parts_reused`` (pre-training
    stages, fine-tunings and STS-b runs found in the cache, so the call's times do not cover them),
    ``work_cpu_seconds`` (the CPU seconds every part recorded when it was computed, whenever that
    was), the ``machine`` (CPU model, cores, RAM, GPU, load averages) and the ``python`` and
    ``packages`` versions, and ``pre_registration``: the commit that fixed the scorecard's rules
    (``rules.PRE_REGISTRATION_COMMIT``) and whether it is in this commit's history (None
    without git), so the file says it was judged by rules committed before it. Explained in chapter 8."""
    env = environment()
    status = git("status", "--porcelain", "--untracked-files=no")  # tracked files changed since the commit
    head = git("rev-parse", "HEAD")
    # `git merge-base --is-ancestor` prints nothing: success (returncode 0) reads "", failure None
    in_history = None if head is None else git("merge-base", "--is-ancestor", PRE_REGISTRATION_COMMIT, "HEAD") is not None
    return {"commit": head, "dirty": None if status is None else bool(status),
            "command": command if command is not None else shlex.join(["python", *sys.argv]),
            "preset": preset.name, "settings": preset.to_dict(), "started": started, "finished": now(),
            "wall_seconds": wall_seconds, "cpu_seconds": cpu_seconds, "parts": dict(parts),
            "parts_reused": parts_reused, "work_cpu_seconds": work_cpu_seconds, "machine": machine(load_start),
            "python": env["python"], "condenser_lite": env["condenser_lite"], "packages": env["packages"],
            "pre_registration": {"commit": PRE_REGISTRATION_COMMIT, "in_history": in_history},
            "rules": {"version": RULES_VERSION, "commit": RULES_V2_COMMIT,
                      "in_history": None if head is None or RULES_V2_COMMIT is None else
                      git("merge-base", "--is-ancestor", RULES_V2_COMMIT, "HEAD") is not None}}


# ---- the headline and the committed results -----------------------------------------------------------


def rounded(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits) + 0.0  # + 0.0: no "-0.0"


def significant(x: float | None, digits: int = 6) -> float | None:
    # gauges keep 6 significant digits: a gap of 1e-5 against a noise of 1e-6 must stay visible
    return None if x is None else float(f"{x:.{digits}g}") + 0.0


def headline(results: Mapping) -> dict:
    """The results file's summary for tools that do not know the rest of its layout:
    ``mlm_loss`` (the BERT arm's held-out MLM loss), ``unigram_entropy`` (of the same held-out
    tokens), ``cls_swap_gap`` / ``cls_swap_noise`` (the Condenser arm's), ``ndcg10`` per arm and
    BM25 on the same tokens (round 1, every training query, means over seeds), ``wall_minutes``
    (of the call that computed the file), ``cls_reliance`` (``{arm: reliance}`` for every
    Condenser-family arm that logged the reliance gauges, ``scorecard.head_arms``; None for an arm
    undefined on some seed; empty where no arm logged them) and ``pretraining_seeds`` (their number).
    Gauges are means over pre-training seeds. Chapter 8."""
    sizes = results.get("train_sizes") or [None]
    full = str(sizes[-1])

    def ndcg(arm: str) -> float | None:
        return rounded(((results.get("retrieval", {}).get(arm, {}).get("round1", {}).get(full) or {})
                       .get("nDCG@10") or {}).get("mean"))

    wall = (results.get("provenance") or {}).get("wall_seconds")
    return {"mlm_loss": significant(gauge(results, "bert", "mlm_loss")),
            "unigram_entropy": significant((results.get("heldout") or {}).get("unigram_entropy")),
            "cls_swap_gap": significant(gauge(results, "condenser", "cls_swap_gap")),
            "cls_swap_noise": significant(gauge(results, "condenser", "cls_swap_noise")),
            "ndcg10": {"bert": ndcg("bert"), "condenser": ndcg("condenser"), "cocondenser": ndcg("cocondenser"),
                       "bm25_same_tokens": rounded((results.get("bm25", {}).get("truncated") or {}).get("nDCG@10"))},
            "wall_minutes": None if wall is None else round(wall / 60, 1),
            "cls_reliance": {arm: significant(reliance_summary(reliance_by_seed(results, arm))["mean"])
                             for arm in head_arms(results)},
            "pretraining_seeds": len(results.get("pretraining_seeds") or pretraining_runs(results, "bert"))}


def results_dir() -> Path:
    """The folder of the committed results files: ``$CONDENSER_LITE_RESULTS`` if set (the Colab
    install sets it to the clone's ``results/``), else the repository's ``results/`` when the
    package runs from its clone, else ``results/`` in the working directory or its parent (a
    chapter run from a clone's ``notebooks/`` with the package installed elsewhere). Chapter 4."""
    if os.environ.get(RESULTS_ENV):
        return Path(os.environ[RESULTS_ENV]).expanduser()
    if RESULTS_DIR.is_dir():
        return RESULTS_DIR
    here = Path.cwd()
    return next((d for d in (here / "results", here.parent / "results") if d.is_dir()), RESULTS_DIR)


def load_results(name: str = "small", folder: str | os.PathLike | None = None) -> dict:
    """The committed results ``results/<name>.json`` of the repository (or of ``folder``), checked:
    it must exist, come from this protocol and have this library's results version. The chapters
    read their tables, figures, numbers and claim checks from here. Explained in chapter 4."""
    path = Path(folder or results_dir()) / f"{name}.json"
    fix = f"run `python -m condenser_lite experiments --preset {name} --out {path}` (and commit it)"
    if folder is None and os.environ.get(RESULTS_ENV) and not path.parent.is_dir():
        raise DataSourceError(f"${RESULTS_ENV}={os.environ[RESULTS_ENV]} is not a folder: point it at the clone's "
                              "results/ folder, or unset it to use the repository's")
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: {fix}")
    results = json.loads(path.read_text())
    if results.get("protocol") != "condenser_lite.protocol":
        raise ValueError(f"{path} is not a protocol results file (no 'protocol' field): {fix}")
    if results.get("version") != RESULTS_VERSION:
        raise ValueError(f"{path} has results version {results.get('version')}, this library reads "
                         f"{RESULTS_VERSION}: it is stale; {fix}")
    # (a file without a headline, as the tests' made-up ones, has nothing to disagree with)
    stored, body = _flat(results.get("headline") or {}), _flat(headline(results) if "headline" in results else {})
    wrong = next((k for k in body if stored.get(k) != body[k]), None)
    if wrong is not None:  # an edited or damaged file: the chapters would show numbers the body does not hold
        raise SchemaError(f"{path}: its headline says {wrong}={stored.get(wrong)} but its body gives {body[wrong]}; "
                          f"the file was edited or damaged: restore it from git, or {fix}")
    return results


def _flat(tree: Mapping, prefix: str = "") -> dict:
    """``{"ndcg10.bert": 0.5, ...}``: a nested dict's leaves by dotted key."""
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {f"{prefix}{key}": value})
    return out


def environment() -> dict:
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"condenser_lite": condenser_lite.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(), "packages": versions}
