"""The results file as evidence: what it records about how it was made (commit, command,
settings, wall and CPU time, machine, package versions), its headline for tools, reading the
committed file back with its version checked, and the readers of what it holds (its pre-training
runs, their gauges and [CLS] reliance, the seeds each arm was pre-trained on).

``protocol.run_protocol`` writes the file; the chapters read the committed ``results/<name>.json``
with ``load_results`` and look into it with the readers here, so a results file's layout is read
in one place. Explained in chapters 4 and 8 (``notebooks/04_finetune.md``, ``notebooks/08_scorecard.md``).
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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

import condenser_lite

from ...modeling.gauges import cls_reliance
from ...utils.errors import ConfigError, DataSourceError, SchemaError
from ...utils.devices import load_average
from ..configuration.settings_tree import Preset
from ..statistics.rules import (MODIFIED_CHOICE_SEEDS, PRE_REGISTRATION_COMMIT, RULES_V2_COMMIT, RULES_VERSION,
                                head_relies, reliance_summary)

RESULTS_VERSION = 4  # 4: the preset under "preset" (3: "budget")
REPO_ROOT = Path(__file__).resolve().parents[3]  # condenser_lite/reproduction/evidence/results.py -> the repository
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


def git_state(exclude: Path | None = None) -> dict:
    """The library's ``commit``, whether tracked files differ from it (``dirty``) and which
    (``dirty_files``), leaving out ``exclude``: the results file the run itself rewrites. All
    None without git. Every results file's provenance starts with these; chapter 2.

    >>> sorted(git_state())
    ['commit', 'dirty', 'dirty_files']
    """
    # git refuses a pathspec outside the repository: a file there needs no excluding
    inside = exclude is not None and exclude.resolve().is_relative_to(REPO_ROOT)
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 *([f":(exclude){exclude.resolve()}"] if inside else []))
    files = None if status is None else [line.split(maxsplit=1)[-1] for line in status.splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if files is None else bool(files), "dirty_files": files}


def machine(load_start: list[float] | None) -> dict:
    """Where a run ran: the CPU's name, and its family and model numbers (``"25/17"``: a Zen 4
    EPYC; names like "AMD EPYC" do not tell the generations apart, whose CPU seconds per update
    differ), the matrix flags the precision choice reads (bf16, AMX, AVX-512), cores, memory, GPU,
    platform and the load average at the start and end. Chapter 4."""
    cpu_model, ram, family, flags = None, None, None, []
    try:
        info = Path("/proc/cpuinfo").read_text()
        field = {}
        for line in info.splitlines():
            name, _, value = line.partition(":")
            field.setdefault(name.strip(), value.strip())
        cpu_model = field.get("model name")
        family = f"{field['cpu family']}/{field['model']}" if "cpu family" in field and "model" in field else None
        flags = sorted(f for f in field.get("flags", "").split() if "bf16" in f or "amx" in f or f == "avx512f")
        mem = Path("/proc/meminfo").read_text().split("MemTotal:", 1)[1].split()[0]
        ram = round(int(mem) / 2**20, 1)  # kB -> GiB
    except (OSError, IndexError, ValueError):
        pass
    return {"cpu": cpu_model or platform.processor() or None, "cpu_family_model": family, "matrix_flags": flags,
            "cores": os.cpu_count(), "ram_gib": ram,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "platform": platform.platform(), "load_average_start": load_start, "load_average_end": load_average()}


def study_provenance(out: Path, command: str, started: str, t0: float, load_start, first: dict | None = None,
                     before_versions: dict | None = None) -> dict:
    """Where, when and from what a study's runs came (the health, mechanism and real-model studies):
    commit (dirty for any change but ``out``), ``first``, command, wall time since ``t0``
    (``time.perf_counter``), machine, ``before_versions`` and versions. Chapters 10, 11 and 13."""
    env = environment()
    return {**git_state(exclude=out), **(first or {}), "command": command, "started": started, "finished": now(),
            "wall_seconds": round(time.perf_counter() - t0, 1), "machine": machine(load_start),
            **(before_versions or {}), "python": env["python"], "packages": env["packages"]}


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
    state = git_state()
    head = state["commit"]
    def in_history(commit: str) -> bool | None:
        # `git merge-base --is-ancestor` prints nothing: success (returncode 0) reads "", failure None
        return None if head is None else git("merge-base", "--is-ancestor", commit, "HEAD") is not None

    return {**state, "command": command if command is not None else shlex.join(["python", *sys.argv]),
            "preset": preset.name, "settings": preset.to_dict(), "started": started, "finished": now(),
            "wall_seconds": wall_seconds, "cpu_seconds": cpu_seconds, "parts": dict(parts),
            "parts_reused": parts_reused, "work_cpu_seconds": work_cpu_seconds, "machine": machine(load_start),
            "python": env["python"], "condenser_lite": env["condenser_lite"], "packages": env["packages"],
            "pre_registration": {"commit": PRE_REGISTRATION_COMMIT, "in_history": in_history(PRE_REGISTRATION_COMMIT)},
            "rules": {"version": RULES_VERSION, "commit": RULES_V2_COMMIT, "in_history": in_history(RULES_V2_COMMIT)}}


# ---- what a results file is -------------------------------------------------------------------------

# Each command that writes a results file writes one kind, named in the file itself: the protocol's
# ``protocol`` field, a study's ``study`` field.
KINDS = {"protocol": "a protocol results file (experiments, merge)", "mechanism": "the mechanism study's file",
         "health": "the health-runs study's file", "sizing": "the sizing study's file",
         "real-model": "the real-model comparison's file"}


def file_kind(data: Any) -> str | None:
    """The kind (``KINDS``) of a results file's content, or None for anything else. Chapter 8."""
    if not isinstance(data, dict):
        return None
    if data.get("protocol") == "condenser_lite.protocol":
        return "protocol"
    return data.get("study") if data.get("study") in KINDS else None


def check_out(path: str | os.PathLike, kind: str, flag: str = "--out") -> dict | None:
    """Refuse, before any work, an output ``path`` that holds something other than a results file
    of ``kind`` (a folder, a user's notes, another kind), so no command replaces a file it did not
    make. Returns the file's content when it is one of ``kind``, None when there is none. Chapter 8."""
    path = Path(path)
    keep = f"nothing was written: choose another path, or delete {path} first"
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file path")
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise ConfigError(f"{flag} {path} is not a results file (not JSON: a file of yours?), and this would "
                          f"overwrite it; {keep}") from None
    found = file_kind(data)
    if found != kind:
        what = KINDS.get(found, "a JSON file that is no results file of this library")
        raise ConfigError(f"{flag} {path} is {what}, not {KINDS[kind]}, and this would overwrite it; {keep}")
    return data


# ---- reading what a results file holds ------------------------------------------------------------


def get_path(d: Mapping, *path: Any) -> Any:
    """``d[path[0]][path[1]]...``, or None where a step is missing: results files of other presets
    lack some parts. Chapter 8."""
    for p in path:
        if not isinstance(d, Mapping) or p not in d:
            return None
        d = d[p]
    return d


def preset_name(results: Mapping) -> str | None:
    """The name of the preset a results file was made with. Chapter 8."""
    return get_path(results, "preset", "name")


def retrieval_score(results: Mapping, arm: str, rnd: str, size: str | None, metric: str) -> Mapping | None:
    """``arm``'s retrieval ``metric`` over its fine-tuning runs (a ``rules.stats`` dict) in round
    ``rnd`` (``"round1"``, ``"round2"``) at training ``size`` (the file's key, a string); None
    where it was not run. Chapters 4 and 8."""
    return get_path(results, "retrieval", arm, rnd, size, metric)


def bm25_score(results: Mapping, metric: str, text: str = "full") -> float | None:
    """BM25's ``metric`` on whole documents (``text="full"``) or on the dense models' first tokens
    (``"truncated"``). Chapters 4 and 8."""
    return get_path(results, "bm25", text, metric)


def sts_score(results: Mapping, arm: str, size: str) -> Mapping | None:
    """``arm``'s STS-b Spearman over its runs (a ``rules.stats`` dict) at ``size`` training pairs
    (the file's key, a string); None where it was not run. Chapters 7 and 8."""
    return get_path(results, "sts", arm, size)


def entropy_change(results: Mapping, arm: str) -> Mapping | None:
    """How much fine-tuning changed ``arm``'s per-layer CLS attention entropy (mean |after -
    before| over layers, a ``rules.stats`` dict). Chapters 5 and 8."""
    return get_path(results, "entropy", arm, "mean_abs_change")


def nb_recall(results: Mapping, arm: str, name: str) -> Mapping | None:
    """``arm``'s neighbourhood recall ``name`` (``"n50@k10"``: the round-2 top 50 covered by the
    round-1 top 10) over its runs, a ``rules.stats`` dict. Chapters 6 and 8."""
    return get_path(results, "nb_recall", arm, name)


def loss_curves(results: Mapping, arm: str, size: str) -> list | None:
    """``arm``'s round-1 fine-tuning loss per step at training ``size``, one curve per run.
    Chapters 6 and 8."""
    return get_path(results, "loss_curves", arm, size)


def stage_flops(run: Mapping) -> float | None:
    """The FLOPs one pre-training run's own stage spent (its ``compute``). Chapters 3 and 8."""
    return get_path(run, "compute", "stage", "flops")


def pretraining_runs(results: Mapping, arm: str) -> list[dict]:
    """Every pre-training run of ``arm`` in a results dict, first pre-training seed first (each
    with its final ``heldout`` gauges and ``compute``); empty for an arm that was not run.
    Chapters 2 and 8."""
    entry = get_path(results, "arms", arm)
    if not entry:
        return []
    return [entry, *entry.get("other_pretraining_seeds", [])]


def gauge(results: Mapping, arm: str, name: str) -> float | None:
    """The mean over ``arm``'s pre-training runs of its final held-out gauge ``name``
    (``mlm_loss``, ``head_loss``, ``cls_swap_gap``, ``cls_swap_noise``, ``cls_cosine``,
    ``cls_reliance``), or None where any run lacks it: a mean over only the seeds where a gauge
    is defined (the reliance is undefined without a deficit) would stand for a seed or two as if
    for all (``gauge_defined`` counts them). Chapters 2 and 8."""
    values = [(r.get("heldout") or {}).get(name) for r in pretraining_runs(results, arm)]
    return float(np.mean(values)) if values and all(v is not None for v in values) else None


def gauge_defined(results: Mapping, arm: str, name: str) -> tuple[int, int]:
    """``(runs with the gauge name, runs)`` over ``arm``'s pre-training runs. Chapter 2."""
    runs = pretraining_runs(results, arm)
    return sum((r.get("heldout") or {}).get(name) is not None for r in runs), len(runs)


def run_reliance(heldout: Mapping | None) -> dict | None:
    """One pre-training run's [CLS] reliance, recomputed by the pre-registered ``cls_reliance``
    from the losses its final gauges logged (``reliance_{own,ablated,late}_loss``; ``zero`` and
    ``mean`` with the zero / mean [CLS] as the ablation), with the gauge's ``noise`` over blocks
    and masks; None where the run has no reliance gauges. Chapters 2 and 8."""
    h = heldout or {}
    if h.get("reliance_own_loss") is None:
        return None
    own, late = h["reliance_own_loss"], h["reliance_late_loss"]
    return {"reliance": cls_reliance(own, h["reliance_ablated_loss"], late), "noise": h.get("cls_reliance_noise"),
            "zero": cls_reliance(own, h["reliance_zero_loss"], late), "mean": cls_reliance(own, h["reliance_mean_loss"], late)}


def reliance_by_seed(results: Mapping, arm: str) -> list[dict]:
    """``run_reliance`` of each of ``arm``'s pre-training runs (first seed first); empty where
    any run lacks the gauges. Chapters 2 and 8."""
    runs = [run_reliance(r.get("heldout")) for r in pretraining_runs(results, arm)]
    return runs if runs and all(r is not None for r in runs) else []


def head_arms(results: Mapping) -> list[str]:
    """The Condenser-family arms of a results file: those whose runs logged the reliance gauges
    (condenser, cocondenser, the coCondenser ablations, any modified Condenser). Chapter 8."""
    return [a for a in results.get("arms", {}) if reliance_by_seed(results, a)]


def runs_without_reliance(results: Mapping) -> list[str]:
    """The arms with a pre-training run that logged its head's gauges (the [CLS]-swap gap) but not
    the [CLS]-reliance ones: a run made before the reliance gauge existed, whose C0 the
    pre-registered rule cannot judge (``scorecard`` refuses such a file). A published checkpoint,
    pre-trained elsewhere, logged no gauges at all and is not among them. Chapter 8."""
    def predates_reliance(heldout: Mapping | None) -> bool:
        h = heldout or {}
        return h.get("cls_swap_gap") is not None and h.get("reliance_own_loss") is None

    return [arm for arm in results.get("arms", {})
            if any(predates_reliance(r.get("heldout")) for r in pretraining_runs(results, arm))]


def head_gate(results: Mapping, arm: str) -> bool | None:
    """Whether ``arm``'s own head relies on [CLS] by the pre-registered ``head_relies`` (the C3
    gate reads coCondenser's); None where its runs logged no reliance gauges. Chapter 8."""
    return head_relies([r["reliance"] for r in reliance_by_seed(results, arm)])


def arm_seeds(results: Mapping, arm: str) -> list:
    """The pre-training seeds of ``arm``'s pre-trained models in a results file, first first
    (None for a published checkpoint, which has no seed of ours). Chapter 8."""
    return [r.get("seed") for r in pretraining_runs(results, arm)]


def rules_version(results: Mapping) -> int | None:
    """The version of the rules a results file was made under (its provenance's ``rules``), None
    where it records none (a file made by hand, as the tests' are). Chapter 8."""
    version = get_path(results, "provenance", "rules", "version")
    return None if version is None else int(version)


def judged_seeds(results: Mapping, arm: str) -> list:
    """The pre-training seeds on which C0 is judged for ``arm``: every seed, except for the
    modified Condenser, which is judged only on seeds the choice never saw (not in
    ``MODIFIED_CHOICE_SEEDS``). Chapter 8."""
    seeds = arm_seeds(results, arm)
    if arm == "condenser_mod":
        return [s for s in seeds if s not in MODIFIED_CHOICE_SEEDS]
    return seeds


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
    Condenser-family arm that logged the reliance gauges, ``head_arms``; None for an arm
    undefined on some seed; empty where no arm logged them) and ``pretraining_seeds`` (their number).
    Gauges are means over pre-training seeds. Chapter 8."""
    full = str((results.get("train_sizes") or [None])[-1])

    def ndcg(arm: str) -> float | None:
        return rounded(get_path(results, "retrieval", arm, "round1", full, "nDCG@10", "mean"))

    wall = get_path(results, "provenance", "wall_seconds")
    return {"mlm_loss": significant(gauge(results, "bert", "mlm_loss")),
            "unigram_entropy": significant(get_path(results, "heldout", "unigram_entropy")),
            "cls_swap_gap": significant(gauge(results, "condenser", "cls_swap_gap")),
            "cls_swap_noise": significant(gauge(results, "condenser", "cls_swap_noise")),
            "ndcg10": {"bert": ndcg("bert"), "condenser": ndcg("condenser"), "cocondenser": ndcg("cocondenser"),
                       "bm25_same_tokens": rounded(bm25_score(results, "nDCG@10", "truncated"))},
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
