"""The one setup call at the top of every chapter, and the chapters' Colab install cell.

A chapter starts with a cell of papermill parameters (strings, from ``papermill -p full true``).
:func:`setup` parses them, points the library at the cache and data folders, silences the import
noise of ``transformers`` and ``datasets``, fixes the thread count and the seeds, picks the device,
makes the figures folder and returns a :class:`Chapter`: its evidence (:meth:`Chapter.results`),
its live cells' briefly pre-trained models (:meth:`Chapter.live_checkpoint`) and the committed
run's final models (:meth:`Chapter.released`). Explained in the introduction
(``book/running.md``, "Running it").
"""

from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .parameters import parse_bool, parse_choice, parse_int, parse_path, parse_settings
from .utils.cache import CACHE_ENV
from .utils.devices import default_device
from .utils.errors import ConfigError

COMMITTED = "small"  # the committed results the chapters read by default: results/small.json
# The live cells' settings: tiny's short pre-training stages in float32 (the same maths on every
# CPU), with the committed run's model (its shape and its Condenser split) and fine-tuning recipes,
# so what they build and fine-tune is what the committed run did.
LIVE_PRESET = "tiny"
# Steps of the live pre-training stages (seconds on a CPU, cached): enough to see the losses move,
# not to reach the committed run's models.
LIVE_STEPS = {"mlm": 40, "condenser": 20}
LIVE_SECTIONS = 600  # general-corpus sections the live stages read (packing them all takes longer)

# The git tag every chapter's Colab cell installs (and its badge opens): a release of this
# repository, so that a chapter and the library it imports come from the same commit.
# tests/test_book.py checks every chapter's install cell and badge against it.
COLAB_RELEASE = "v0.2.0"
# Importing the library (transformers, datasets) loads tqdm's notebook bars, which warn outside a
# full Jupyter install with a message holding the environment's absolute path: silenced as soon
# as a chapter imports this module (its first import), so no stored output depends on the path.
warnings.filterwarnings("ignore", message="IProgress not found")

REPOSITORY = "condenser-lite/condenser-lite"


def rerun_presets() -> tuple[str, ...]:
    """The presets a chapter's ``preset`` may re-run: all but ``paper``, which is ``full=True``."""
    from .reproduction.configuration.presets import PRESETS

    return tuple(name for name in PRESETS if name != "paper")


@dataclass(frozen=True)
class Chapter:
    """A chapter's parsed parameters and environment, as returned by :func:`setup`.

    ``preset`` None: the chapter reads the committed results (``results/small.json``); a preset
    name: it re-runs that preset's protocol and shows the re-run. ``full``: the ``paper`` preset.
    ``settings``: paths of the settings tree (``-p settings "finetune.lr=1e-4"``, as
    ``experiments --set``) that change the re-run's preset (``rerun_preset``). The live cells' own
    settings are ``live_preset``."""

    full: bool
    preset: str | None
    seed: int
    max_steps: int | None
    workers: int | None
    device: str
    figures: Path
    reads: str  # the committed results file the page shows
    settings: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # (path, value) pairs
    init: str | None = field(default=None, repr=False)  # -p init: a checkpoint the live fine-tuning starts from

    @property
    def rerun(self) -> bool:
        """Whether the chapter re-runs the protocol instead of reading the committed results."""
        return self.full or self.preset is not None

    @property
    def live_preset(self):
        """The ``Preset`` of the live cells: ``paper`` at full scale, else ``LIVE_PRESET`` with the
        committed run's model, fine-tuning and STS-b configs, whatever the evidence (the committed
        stages are too long for live cells, a re-run's ``micro`` too small to show anything), so the
        live cells print the same with or without ``preset``. Introduction, "Running it"."""
        from .reproduction.configuration.presets import get_preset

        if self.full:
            return get_preset("paper")
        committed = get_preset(COMMITTED)
        return get_preset(LIVE_PRESET).replace(model=committed.model, finetune=committed.finetune, sts=committed.sts)

    @property
    def rerun_preset(self):
        """The ``Preset`` a re-run runs: ``preset`` (at full scale ``paper`` with the one seed ``seed``)
        with ``settings`` applied, as ``experiments --set`` does; None without a re-run."""
        from .reproduction.configuration.presets import get_preset

        if not self.rerun:
            return None
        preset = get_preset("paper", seeds=(self.seed,)) if self.full else get_preset(self.preset)
        return preset.replace(**dict(self.settings))

    def released(self, arm: str) -> str:
        """The committed run's final ``bert``, ``condenser`` (with its head) or ``cocondenser`` from
        ``results/checkpoints/small/`` (its first pre-training seed, ``release.export_checkpoints``),
        for the live cells that study trained models; at full scale the published checkpoint. Chapter 2."""
        from .reproduction.configuration.presets import PAPER
        from .reproduction.runs.release import CHECKPOINTS_DIR, RELEASED_ARMS
        from .utils.errors import CheckpointError

        if arm not in RELEASED_ARMS:
            raise ValueError(f"released(arm={arm!r}): choose from {RELEASED_ARMS}")
        if self.full:
            return PAPER.pretrained[arm]
        path = CHECKPOINTS_DIR / COMMITTED / arm
        if not (path / "config.json").is_file():
            raise CheckpointError(f"{path} is missing: restore results/checkpoints/ from git, or export a run's "
                                  f"models with `python -m condenser_lite release results/{COMMITTED}.json`")
        return str(path)

    def results(self, verbose: bool = True) -> dict:
        """The chapter's evidence: the committed ``results/small.json``, or the protocol re-run at
        ``rerun_preset`` (cached). With ``verbose``, one line says which. Introduction, "Running it"."""
        from .reproduction.configuration.presets import get_preset
        from .reproduction.runs.protocol import run_protocol
        from .reproduction.evidence.results import load_results
        from .reproduction.claims.scorecard import check_judged

        if not self.rerun:
            results = load_results(COMMITTED)
            check_judged(results, f"results/{COMMITTED}.json")  # a page never shows a p beside another's verdict
        else:
            results = run_protocol(self.rerun_preset, workers=self.workers, verbose=verbose)
        if verbose:
            print(describe(results, committed=not self.rerun))
        return results

    def check_claims(self, results: dict) -> bool:
        """Whether the prose's statements describe ``results``: the committed ``small`` run the prose
        was written from. A re-run shows its own numbers and skips the checks of the prose's findings."""
        return not self.rerun and results["preset"]["name"] == COMMITTED

    def live_checkpoint(self, method: str) -> str:
        """A briefly pre-trained checkpoint for the live cells (chapters 1-4), cached: ``live_preset``'s
        BERT trained from scratch by MLM (``"mlm"``), or that model continued as a Condenser
        (``"condenser"``), for ``LIVE_STEPS[method]`` steps on ``LIVE_SECTIONS`` general-corpus sections.
        At full scale: ``bert-base-uncased``, and the papers' Condenser stage for ``max_steps``. Chapter 1."""
        from .reproduction.configuration.presets import PAPER, paper_condenser, stage_config
        from .training.pretraining import pretrain

        if method not in LIVE_STEPS:
            raise ValueError(f"live_checkpoint(method={method!r}): choose from {tuple(LIVE_STEPS)}")
        steps = (self.max_steps if self.full else None) or LIVE_STEPS[method]
        if self.full:
            if method == "mlm":
                return PAPER.pretrained["bert"]
            return str(pretrain(paper_condenser(max_steps=steps), progress=False))
        init = None if method == "mlm" else self.live_checkpoint("mlm")
        # evaluated once, after the last step (eval_every=None), on the held-out blocks
        cfg = stage_config(self.live_preset, method, init, max_steps=steps, corpus_limit=LIVE_SECTIONS,
                           eval_every=None, save_every=None)
        return str(pretrain(cfg, progress=False))

    def __str__(self) -> str:
        import torch
        import transformers

        scale = ("full scale (the paper preset)" if self.full else
                 f"re-running the {self.preset} preset" if self.preset else
                 f"committed {self.reads}")
        # a page that reads committed runs re-runs none of them: its seed is its live cells'
        seed = f"seed {self.seed}" if self.rerun else f"live cells' seed {self.seed}"
        return (f"{scale}, {seed}, device {self.device}; "
                f"torch {torch.__version__}, transformers {transformers.__version__}")


def describe(results: dict, committed: bool = True) -> str:
    """One line naming a results dict: where it comes from, its preset and seeds; for a re-run also
    its commit and time (the committed run's are on the running page, not in the chapters' outputs)."""
    prov = results.get("provenance") or {}
    n_pre = len(results["pretraining_seeds"])
    what = (f"preset {results['preset']['name']}, {len(results['seeds'])} fine-tuning seeds, "
            f"{n_pre} pre-training seed{'s' * (n_pre != 1)}")
    if committed:
        return f"results/{COMMITTED}.json, the committed run: {what}"
    commit = (prov.get("commit") or "unknown commit")[:7] + (" (dirty)" if prov.get("dirty") else "")
    n_reused, work = prov.get("parts_reused") or 0, prov.get("work_cpu_seconds")
    reused = ""
    if n_reused:  # the call took less than the run's work: say so, with the work
        in_all = f"; {work / 3600:.1f} CPU-hours of work in all" if work else ""
        reused = f" ({n_reused} cached stage{'s' * (n_reused != 1)} reused{in_all})"
    return f"this re-run: {what}, commit {commit}, {(prov.get('wall_seconds') or 0) / 60:.1f} min{reused}"


def setup(full: object = False, preset: object = None, seed: object = 0, max_steps: object = None,
          workers: object = None, cache_dir: object = None, data_dir: object = None,
          figures_dir: object = "figures", threads: int = 1, remade_by: str | None = None,
          reads: str | None = None, settings: object = None, init: object = None) -> Chapter:
    """Parse a chapter's papermill parameters and prepare the run; the first call of every chapter.

    ``preset`` None (or ``"none"``) reads the committed results; a preset name (``rerun_presets()``)
    re-runs it, with ``settings`` (``"stages.bert.max_steps=5 finetune.lr=1e-4"``, as ``experiments
    --set``) applied. ``cache_dir`` and ``data_dir`` set ``$CONDENSER_LITE_CACHE`` and
    ``$CONDENSER_LITE_DATA``. ``threads`` is fixed because float sums differ between thread counts
    and the printed numbers should repeat; one, because two wait on each other on a busy machine
    (10 fine-tuning steps of chapter 4: 2.8 s with one thread, 37.5 s with two on a loaded 2-core
    machine). ``remade_by``: the command that remakes a page's own results file ``reads``, which
    ``full`` and ``preset`` cannot re-run: passing either is then an error, not a silent no-op.
    ``init``: a checkpoint that chapter 4's live fine-tuning starts from instead of the committed
    coCondenser, with the recipe fit for it (``presets.recipe_for``). Explained on the page
    "Running the book" (``book/running.md``).
    """
    chapter_full = parse_bool(full, "full")
    unset = preset is None or str(preset).strip().lower() in ("", "none")  # papermill passes text
    if remade_by and (chapter_full or not unset):
        raise ValueError(f"parameter {'full' if chapter_full else 'preset'!r}: this page reads its own committed "
                         f"results, which the protocol does not make; remake them with `{remade_by}` and "
                         "execute the page again without it")
    chapter_preset = None if unset else parse_choice(preset, "preset", rerun_presets(),
                                                     hint=f"None: the committed results/{COMMITTED}.json; "
                                                     "full scale: -p full true")
    chapter_seed = parse_int(seed, "seed", minimum=0)
    steps = parse_int(max_steps, "max_steps", minimum=1, optional=True)
    n_workers = parse_int(workers, "workers", minimum=1, optional=True)
    cache, data = parse_path(cache_dir, "cache_dir"), parse_path(data_dir, "data_dir")
    figures = parse_path(figures_dir, "figures_dir") or Path("figures")
    start = parse_path(init, "init")
    if start is not None:
        from .utils.loading import check_checkpoint

        check_checkpoint(start)  # a missing folder is named now, not after the chapter's first cells
        start = str(start)

    _quiet()  # before anything imports transformers or datasets
    chapter_settings = parse_settings(settings, where="parameter 'settings'")
    if chapter_settings:
        if not (chapter_full or chapter_preset):
            raise ConfigError("parameter 'settings' changes a re-run's preset; pass the preset to re-run too "
                              "(e.g. -p preset micro), or leave settings out to read the committed results")
        from .reproduction.configuration.settings_tree import check_protocol_reads

        check_protocol_reads(chapter_settings, where="parameter 'settings'")
    from .data.sources import DATA_ENV

    if cache is not None:
        os.environ[CACHE_ENV] = str(cache)
    if data is not None:
        os.environ[DATA_ENV] = str(data)

    import numpy as np
    import torch

    torch.set_num_threads(threads)
    random.seed(chapter_seed)
    np.random.seed(chapter_seed)
    torch.manual_seed(chapter_seed)
    figures.mkdir(parents=True, exist_ok=True)
    _figures_inline()
    _tables_whole()
    return Chapter(full=chapter_full, preset=chapter_preset, seed=chapter_seed, max_steps=steps,
                   workers=n_workers, device=str(default_device()), figures=figures,
                   reads=reads or f"results/{COMMITTED}.json", settings=tuple(chapter_settings.items()),
                   init=start)


def glue(name: str, value: object, digits: int | None = None) -> None:
    """Make ``value`` available to the chapter's prose under ``name`` (MyST-NB's glue, pasted
    by the ``glue:text`` role where the book is built); with ``digits``, a number is pasted with
    that many decimals (``0.50``, not ``0.5``; never ``-0.00``). Without MyST-NB (on Colab)
    nothing happens: the prose then shows the role itself. Introduction, "Running it"."""
    if digits is not None:
        from .reproduction.statistics.wording import fixed

        value = fixed(float(value), digits)
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, value, display=False)


def _quiet() -> None:
    """Silence the known noise of a chapter's imports, so stored outputs hold results only."""
    import logging

    warnings.filterwarnings("ignore", message="IProgress not found")  # as at import: it holds a path
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from tqdm import TqdmWarning

    warnings.filterwarnings("ignore", category=TqdmWarning)

    import datasets
    import transformers

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("condenser_lite").setLevel(logging.ERROR)


def _figures_inline() -> None:
    """Show figures in the notebook's outputs (the book renders only what the outputs hold).

    Inside a kernel, ``MPLBACKEND=Agg`` (set by CI and test runs) would otherwise win over the
    inline backend, and ``plt.show()`` would show nothing."""
    import matplotlib.pyplot as plt

    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython else None
    if shell is not None and getattr(shell, "kernel", None) is not None:
        shell.run_line_magic("matplotlib", "inline")
    # no "1e-5+4.113" offset labels: tick labels show the values themselves
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 120, "font.size": 10,
                         "axes.formatter.useoffset": False})


def _tables_whole() -> None:
    """Show every table cell whole: pandas would cut a comparison's text at 50 characters
    ("... vs BERT-continued, eq...") and hide which control or which seed a number is."""
    import pandas as pd

    pd.set_option("display.max_colwidth", None)


def colab_cell() -> str:
    """The source of every chapter's first code cell: on Colab only, clone this repository at
    :data:`COLAB_RELEASE` and run its ``scripts/colab_install.py`` in the running kernel.
    Introduction, "Running it"."""
    return f'''# On Colab only: install condenser_lite at a pinned release (skipped elsewhere).
import sys

if "google.colab" in sys.modules:
    import os
    import subprocess

    RELEASE, REPO = "{COLAB_RELEASE}", "https://github.com/{REPOSITORY}"
    CLONE = "/content/condenser-lite"
    if not os.path.isdir(CLONE):
        subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q",
                        "--depth", "1", "--branch", RELEASE, REPO, CLONE], check=True)
    sys.path.insert(0, CLONE + "/scripts")
    import colab_install

    colab_install.main(CLONE)'''


def colab_badge(chapter: str) -> str:
    """The Markdown of a chapter's "Open in Colab" link, at :data:`COLAB_RELEASE`: plain text, not
    Colab's badge image, which a page read offline would show as a broken image."""
    return ("[Open this chapter in Colab ↗]"
            f"(https://colab.research.google.com/github/{REPOSITORY}/blob/{COLAB_RELEASE}"
            f"/notebooks/{chapter}.ipynb)")
