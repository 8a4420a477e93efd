"""Chapter 4 from a real checkpoint: ``papermill notebooks/04_finetune.ipynb out.ipynb -p init
<folder>`` with the shipped all-MiniLM-L6-v2 runs the whole chapter, fine-tuning it live on the
SciFact slice with the recipe for pre-trained checkpoints. What ``-p full true`` adds beyond this
(MS MARCO, bert-base from the Hub, a GPU) is the only part of the full path no test runs."""

import json

import pytest
from locations import MIRROR, ROOT

from condenser_lite.utils.loading import shipped_model

pytestmark = [pytest.mark.book, pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror not found")]


def test_chapter_4_fine_tunes_a_real_checkpoint(tmp_path, monkeypatch):
    import papermill

    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    out = tmp_path / "out.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / "04_finetune.ipynb"), str(out), cwd=str(tmp_path),
                               parameters={"init": shipped_model()}, progress_bar=False, kernel_name="python3")
    printed = "".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                      for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "the pretrained recipe: the checkpoint was not trained by this library" in printed
    assert "site-packages" not in printed  # no machine path in a chapter's output
