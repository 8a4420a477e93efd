"""Shared pytest configuration, and the fixtures that tests in several folders use.

Tiers: every test is exactly one of

* ``unit``: a function on small inputs, about 2 s at most (``pytest -m unit``: under a minute);
* ``protocol``: runs a pre-training stage, a fine-tuning, the protocol or a benchmark's smoke run,
  or uses the session fixtures ``micro_run`` or ``tokenizer_dir``, or takes more than about 2 s;
* ``book``: checks or builds the book (test_book.py, test_portability.py, test_colab_install.py)
  and the chapters that ``pytest --nbval`` re-executes.

``pytest_collection_modifyitems`` gives each test the tier of its file and fixtures (``TIERS``
below); a test or module marked with a tier itself keeps that one (``@pytest.mark.protocol`` where
the rule is wrong: a short stage through the command line, or a slow unit test).
tests/test_tiers.py fails when a collected test has no tier or two.

``pytest --nbval`` runs on every core (pyproject.toml: ``-n logical --dist loadfile``,
pytest-xdist): each test file, and each notebook with its cells in order, runs whole in one worker
process. The session fixtures that train (``tokenizer_dir``, ``micro_run``) are built once per
run in the folder all workers share (``locations.run_folder``) by whichever worker needs them
first; the others wait for it and read the result. ``pytest -n 0`` runs all in one process.
"""

import json
import os
from pathlib import Path

import pytest
from locations import MIRROR as _MIRROR, run_folder

REQUIRE_MIRROR = "CONDENSER_LITE_REQUIRE_MIRROR"  # CI sets it: a missing mirror is an error there
pytest.register_assert_rewrite("command_line")  # its one_error_line asserts for the tests that call it


def pytest_configure(config):
    # without the mirror about a dozen integration tests skip; in CI that would pass a run that
    # tested much less than it says, so there the missing mirror stops the run instead
    if os.environ.get(REQUIRE_MIRROR) == "1" and not _MIRROR.is_dir():
        raise pytest.UsageError(f"{REQUIRE_MIRROR}=1 but the local data mirror {_MIRROR} is missing: put the "
                                "shared/ folder beside the repository, or unset the variable to skip those tests")
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the cores are shared out among the workers
        import torch

        from condenser_lite.reproduction.runs.jobs import threads_per_worker

        # two threads per worker beside another busy worker wait on each other (see the unit-test
        # fixture below); run_protocol's own job processes share out the cores the same way
        torch.set_num_threads(threads_per_worker(config.workerinput["workercount"]))


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """accelerate keeps one state per process: a test that trained in bf16 (a preset's "auto" on a
    CPU with bf16 units) must not hand it to the next test's ``Accelerator()``."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()


@pytest.fixture(autouse=True)
def _quiet_libraries_restored():
    """``book.setup`` silences datasets, transformers and the library's logger for the rest of the
    process, as a chapter's kernel wants; a test that calls it must not hand the silence to the
    tests its worker runs after it (pytest-xdist runs them in another order than one process)."""
    import logging

    import datasets
    import transformers

    ours = logging.getLogger("condenser_lite")
    before = (datasets.is_progress_bar_enabled(), datasets.logging.get_verbosity(),
              transformers.utils.logging.is_progress_bar_enabled(), transformers.logging.get_verbosity(), ours.level)
    yield
    bars, ds_level, tf_bars, tf_level, our_level = before
    datasets.enable_progress_bars() if bars else datasets.disable_progress_bars()
    datasets.logging.set_verbosity(ds_level)
    transformers.utils.logging.enable_progress_bar() if tf_bars else transformers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity(tf_level)
    ours.setLevel(our_level)


@pytest.fixture(autouse=True)
def _one_thread_for_unit_tests(request):
    """A unit test runs on one thread: its toy-sized tensors gain nothing from a second, and on a
    CPU whose cores are busy the second thread mostly waits (80 steps of the gauges' toy Condenser:
    0.7 s on one thread, 25 s on two while two other processes held both cores)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, pytestconfig):
    """A 600-piece WordPiece trained on 300 SciFact abstracts of the local mirror: small and quick,
    for the pre-training and protocol tests (their modules skip when the mirror is absent). One
    per test run, shared by the xdist workers."""
    from condenser_lite.data.beir import load_beir
    from condenser_lite.data.tokenizer import train_wordpiece
    from condenser_lite.utils.cache import build_once

    def build(out: Path) -> None:
        texts = [r["text"] for r in load_beir("scifact", data_dir=_MIRROR).corpus.select(range(300))]
        train_wordpiece(texts, vocab_size=600, save_dir=out)

    return str(build_once(run_folder(tmp_path_factory, pytestconfig) / "tok", build))


@pytest.fixture(scope="session")
def micro_run(tmp_path_factory, pytestconfig, tokenizer_dir):
    """The whole protocol on the micro preset, once per test run (the xdist workers share it), in
    its own cache: ``(preset, results file, results as read back from it, root)``; the cache is
    ``root / "cache"`` (tests that read it set ``CONDENSER_LITE_CACHE`` themselves). Skips without
    the local data mirror."""
    if not _MIRROR.exists():
        pytest.skip("local data mirror ../shared/data not found")
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.runs.protocol import run_protocol
    from condenser_lite.utils.cache import build_once

    budget = get_preset("micro", tokenizer=tokenizer_dir)

    def build(root: Path) -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CONDENSER_LITE_CACHE", str(root / "cache"))
            mp.setenv("CONDENSER_LITE_DATA", str(_MIRROR))
            # two worker processes: the default path on a CPU (one thread each)
            run_protocol(budget, out_path=root / "results.json", verbose=False, workers=2,
                         command="python -m condenser_lite experiments --preset micro")

    root = build_once(run_folder(tmp_path_factory, pytestconfig) / "exp", build)
    out = root / "results.json"
    return budget, out, json.loads(out.read_text()), root


@pytest.fixture(scope="session")
def beir(tmp_path_factory):
    """A 12-document BEIR set in the SciFact mirror layout (``toy_data.write_beir``): pass it as
    ``--data-dir``; tests that change a file change a copy."""
    from toy_data import write_beir

    return write_beir(tmp_path_factory.mktemp("beir"))


@pytest.fixture(scope="session")
def retriever(tmp_path_factory):
    """A tiny random BERT with its WordPiece, saved as one folder (trained on the text of ``beir``)."""
    from tiny_checkpoint import make_checkpoint
    from toy_data import tiny_rows

    corpus, queries = tiny_rows("corpus.jsonl"), tiny_rows("train.jsonl")
    texts = [f"{r['title']} {r['text']}" for r in corpus] + [r["query"] for r in queries]
    return make_checkpoint(tmp_path_factory.mktemp("retriever"), texts * 3)


@pytest.fixture(scope="session")
def pseudo_tokenizer():
    """A 100-piece WordPiece over made-up words (``toy_data.pseudo_text``), many ## pieces: the
    packing tests (data/) and the masking tests (modeling/) read it."""
    from toy_data import pseudo_tokenizer

    return pseudo_tokenizer()


# ---- tiers ------------------------------------------------------------------------------------

TIERS = ("unit", "protocol", "book")
BOOK_FILES = {"test_book.py", "test_portability.py", "test_colab_install.py"}  # and the notebooks nbval collects
PROTOCOL_FIXTURES = {"micro_run", "tokenizer_dir"}
PROTOCOL_FILES = {"test_fullscale_path.py"}  # the full-scale rehearsal: each of its tests pre-trains or fine-tunes
TIER_MARKS = pytest.StashKey[dict]()


def tier_marks(item) -> list[str]:
    """The tier marks a collected test carries: its own, its class's and its module's."""
    return sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})


def automatic_tier(item) -> str:
    """The tier the rule gives a test without a tier mark: ``book`` by file, ``protocol`` by the
    session fixtures it uses (directly or through other fixtures) or by file, else ``unit``."""
    if item.path.suffix == ".ipynb" or item.path.name in BOOK_FILES:
        return "book"
    if PROTOCOL_FIXTURES & set(getattr(item, "fixturenames", ())) or item.path.name in PROTOCOL_FILES:
        return "protocol"
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if not tier_marks(item):
            item.add_marker(automatic_tier(item))
    config.stash[TIER_MARKS] = {item.nodeid: tier_marks(item) for item in items}


@pytest.fixture
def collected_tiers(request) -> dict[str, list[str]]:
    """Every test this session collected, before ``-m`` selected among them, and its tier marks."""
    return request.config.stash[TIER_MARKS]
