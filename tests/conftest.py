"""Shared pytest configuration, and the fixtures that tests in several folders use."""

import os

import pytest
from locations import MIRROR as _MIRROR

REQUIRE_MIRROR = "CONDENSER_LITE_REQUIRE_MIRROR"  # CI sets it: a missing mirror is an error there


def pytest_configure(config):
    # tests/test_distributed.py starts 2 CPU processes; deselect with -m "not distributed".
    config.addinivalue_line("markers", "distributed: launches several processes (gloo, CPU); runs by default")
    # without the mirror about a dozen integration tests skip; in CI that would pass a run that
    # tested much less than it says, so there the missing mirror stops the run instead
    if os.environ.get(REQUIRE_MIRROR) == "1" and not _MIRROR.is_dir():
        raise pytest.UsageError(f"{REQUIRE_MIRROR}=1 but the local data mirror {_MIRROR} is missing: put the "
                                "shared/ folder beside the repository, or unset the variable to skip those tests")


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """accelerate keeps one state per process: a test that trained in bf16 (a preset's "auto" on a
    CPU with bf16 units) must not hand it to the next test's ``Accelerator()``."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A 600-piece WordPiece trained on 300 SciFact abstracts of the local mirror: small and quick,
    for the pre-training and protocol tests (their modules skip when the mirror is absent)."""
    from condenser_lite.data.beir import load_beir
    from condenser_lite.data.tokenizer import train_wordpiece

    texts = [r["text"] for r in load_beir("scifact", data_dir=_MIRROR).corpus.select(range(300))]
    out = tmp_path_factory.mktemp("tok")
    train_wordpiece(texts, vocab_size=600, save_dir=out)
    return str(out)


@pytest.fixture(scope="session")
def micro_run(tmp_path_factory, tokenizer_dir):
    """The whole protocol on the micro preset, once per test session, in its own cache:
    ``(preset, results file, results, root)``; the cache is ``root / "cache"`` (tests that read
    it set ``CONDENSER_LITE_CACHE`` themselves). Skips without the local data mirror."""
    if not _MIRROR.exists():
        pytest.skip("local data mirror ../shared/data not found")
    from condenser_lite.reproduction.presets import get_preset
    from condenser_lite.reproduction.protocol import run_protocol

    root = tmp_path_factory.mktemp("exp")
    budget = get_preset("micro", tokenizer=tokenizer_dir)
    out = root / "results.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONDENSER_LITE_CACHE", str(root / "cache"))
        mp.setenv("CONDENSER_LITE_DATA", str(_MIRROR))
        # two worker processes: the default path on a CPU (one thread each)
        results = run_protocol(budget, out_path=out, verbose=False, workers=2,
                               command="python -m condenser_lite experiments --preset micro")
    return budget, out, results, root


@pytest.fixture(scope="session")
def pseudo_tokenizer():
    """A 100-piece WordPiece over made-up words (``toy_data.pseudo_text``), many ## pieces: the
    packing tests (data/) and the masking tests (modeling/) read it."""
    from toy_data import pseudo_tokenizer

    return pseudo_tokenizer()
