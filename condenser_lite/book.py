"""The one setup call at the top of every chapter, and the chapters' Colab install cell.

A chapter starts with a cell of papermill parameters (``full``, ``budget``, ``seed``, ...), which
arrive as strings from ``papermill -p full true``. :func:`setup` parses them, points the library
at the cache and data folders, silences the import noise of ``transformers`` and ``datasets``,
fixes the thread count and the seeds, picks the device, makes the figures folder and returns
what the chapter needs. Explained in the introduction (``book/intro.md``, "Running it").
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from .config import CACHE_ENV, parse_bool, parse_choice, parse_int, parse_path, pick_device

BUDGETS = ("tiny", "micro")  # scaled-down budgets a chapter accepts; full scale is -p full true

# The git tag every chapter's Colab cell installs (and its badge opens): a release of this
# repository, so that a chapter and the library it imports come from the same commit.
# tests/test_book.py checks every chapter's install cell and badge against it.
COLAB_RELEASE = "v0.2.0"
REPOSITORY = "condenser-lite/condenser-lite"


@dataclass(frozen=True)
class Chapter:
    """A chapter's parsed parameters and environment, as returned by :func:`setup`."""

    full: bool
    budget: str
    seed: int
    max_steps: int | None
    workers: int | None
    device: str
    figures: Path

    @property
    def check_claims(self) -> bool:
        """Whether the prose's numbers apply: they describe the scaled-down ``tiny`` run."""
        return not self.full and self.budget == "tiny"

    def __str__(self) -> str:
        import torch
        import transformers

        scale = "full scale" if self.full else f"scaled-down, {self.budget} budget"
        return (f"{scale}, seed {self.seed}, device {self.device}; "
                f"torch {torch.__version__}, transformers {transformers.__version__}")


def setup(full: object = False, budget: object = "tiny", seed: object = 0, max_steps: object = None,
          workers: object = None, cache_dir: object = None, data_dir: object = None,
          figures_dir: object = "figures", threads: int = 2) -> Chapter:
    """Parse a chapter's papermill parameters and prepare the run; the first call of every chapter.

    ``cache_dir`` and ``data_dir`` set ``$CONDENSER_LITE_CACHE`` and ``$CONDENSER_LITE_DATA`` when
    given. ``threads`` is fixed because float sums differ between thread counts and the chapters'
    printed numbers should repeat. Errors name the parameter and what to pass. Explained in the
    introduction (``book/intro.md``).
    """
    chapter_full = parse_bool(full, "full")
    chapter_budget = parse_choice(budget, "budget", BUDGETS, hint="full scale: -p full true")
    chapter_seed = parse_int(seed, "seed", minimum=0)
    steps = parse_int(max_steps, "max_steps", minimum=1, optional=True)
    n_workers = parse_int(workers, "workers", minimum=1, optional=True)
    cache, data = parse_path(cache_dir, "cache_dir"), parse_path(data_dir, "data_dir")
    figures = parse_path(figures_dir, "figures_dir") or Path("figures")

    _quiet()  # before anything imports transformers or datasets
    from .data import DATA_ENV

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
    return Chapter(full=chapter_full, budget=chapter_budget, seed=chapter_seed, max_steps=steps,
                   workers=n_workers, device=pick_device(), figures=figures)


def checkpoint_name(checkpoint: str | os.PathLike) -> str:
    """A checkpoint as the chapters print it: a Hub id as it is, a cached folder by its short key
    (``mlm-ed54359cd187``), never the machine's path. Chapter 1."""
    path = Path(checkpoint)
    return path.name if path.is_dir() else str(checkpoint)


def _quiet() -> None:
    """Silence the known noise of a chapter's imports, so stored outputs hold results only."""
    import logging
    import warnings

    # Outside a full Jupyter install, importing transformers/datasets warns through tqdm with a
    # message that holds the absolute path of the environment (outputs would depend on it).
    warnings.filterwarnings("ignore", message="IProgress not found")
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
    """The Markdown of a chapter's "Open in Colab" badge, at :data:`COLAB_RELEASE`."""
    return ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"(https://colab.research.google.com/github/{REPOSITORY}/blob/{COLAB_RELEASE}"
            f"/notebooks/{chapter}.ipynb)")
