"""The book's diagrams (condenser_lite.diagrams): each draws a figure, labels what the chapter's
caption points at, and reads its shapes from the preset (the committed run's by default)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from condenser_book import diagrams, plots  # noqa: E402
from condenser_lite.reproduction.configuration.presets import get_preset  # noqa: E402


def _text(fig) -> str:
    return "\n".join(diagrams.texts(fig))


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_each_diagram_is_a_figure_with_readable_text(name, tmp_path):
    fig = diagrams.DIAGRAMS[name]()
    assert isinstance(fig, Figure)
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text()]
    assert sizes and min(sizes) >= 9, f"{name}: text below 9 pt"
    assert plots.save(fig, tmp_path / f"{name}.png").stat().st_size > 10_000
    assert "Shown in chapter" in " ".join(diagrams.DIAGRAMS[name].__doc__.split())


def test_condenser_diagram_labels_its_parts():
    text = _text(diagrams.condenser())
    for must in ("[CLS]", "skip_from = 1", "late MLM loss", "head MLM loss",
                 "one shared MLM head", "early layer 1", "late layers 2–4",
                 "Condenser head: 1 new layer", "dropped after"):
        assert must in text, must


def test_condenser_diagram_follows_the_preset():
    tiny = get_preset("tiny").model
    assert (tiny.skip_from, tiny.n_head_layers) == (2, 2)
    text = _text(diagrams.condenser(get_preset("tiny")))
    assert "skip_from = 2" in text and "early layers 1–2" in text and "late layers 3–4" in text
    assert "Condenser head: 2 new layers" in text
    paper = _text(diagrams.condenser("paper"))
    assert "skip_from = 6" in paper and "late layers 7–12" in paper


def test_cocondenser_diagram_marks_partners_positive():
    fig = diagrams.cocondenser_batch(n_docs=3)
    text = diagrams.texts(fig)
    assert {f"s{i}{j}" for i in (1, 2, 3) for j in (1, 2)} <= set(text)
    assert text.count("+") == 6 and text.count("×") == 6 and text.count("−") == 36 - 12
    joined = "\n".join(text)
    assert "late [CLS]" in joined and "positive" in joined and "negative" in joined
    assert "64 per batch" in joined  # the committed run's batch, from the preset


def test_gradient_cache_diagram_has_both_passes():
    text = _text(diagrams.gradient_cache())
    for must in ("Pass 1", "Pass 2", "no_grad", "the cache", "replay", "v = ∂L/∂h",
                 "one chunk's"):
        assert must in text, must


def test_pipeline_names_every_stage_and_chapter():
    text = _text(diagrams.pipeline())
    small = get_preset("small").stages
    for must in ("stage 1: BERT", "BERT-continued", "Condenser", "coCondenser", "ablations",
                 "round 1", "BM25", "round 2", "mined", "FAISS", "metrics", f"{small.bert.max_steps:,}",
                 "(ch. 1)", "(ch. 2", "(ch. 3)", "(ch. 4", "(ch. 5)", "(ch. 7)", "(ch. 8)"):
        assert must in text, must
    # the small preset has a modified Condenser arm: drawn with its change; a preset without one is not
    assert "modified Condenser" in text and "head: 50%-masked copy" in text
    assert diagrams._change_words({"skip_from": 0}) == "head: embeddings"
    assert "modified Condenser" not in _text(diagrams.pipeline("tiny"))
