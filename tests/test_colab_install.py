"""scripts/colab_install.py: what the chapters' Colab cell installs (the pins of requirements.txt
without torch and the notebook tooling). The install itself is exercised in a fresh venv by hand
(see README, "Colab"); here, its decisions."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("colab_install", ROOT / "scripts" / "colab_install.py")
colab_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(colab_install)


def test_pins_follow_requirements_without_torch_and_tooling():
    pins = colab_install.pins(ROOT / "requirements.txt")
    assert pins["transformers"] and pins["PyStemmer"]  # BM25 with stemming, as in chapter 4
    assert not {"torch", "pytest", "pytest-xdist", "jupyter-book", "ipykernel", "jupyterlab"} & set(pins)
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    for name, version in pins.items():
        assert f"{name}=={version}" in lines


def test_pins_reject_a_loose_requirement(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("numpy==2.4.6\nscipy>=1.0\n-e .\n")
    with pytest.raises(ValueError, match=r"requirements.txt:2: expected an exact pin"):
        colab_install.pins(req)


def test_unmet_and_imported_from():
    import numpy

    assert colab_install.unmet({"numpy": numpy.__version__}) == {}
    assert colab_install.unmet({"numpy": "0.0.1", "no-such-dist-x": "1.0"}) == {
        "numpy": "0.0.1", "no-such-dist-x": "1.0"}
    assert "numpy" in colab_install.imported_from({"numpy"})
    assert colab_install.imported_from({"no-such-dist-x"}) == []


def test_the_badges_tag_is_the_packages_version():
    """The Colab badges open the tag COLAB_RELEASE; a release tags the package's version
    (README, "Colab"), so the two must move together, and pyproject.toml must say the same."""
    import tomllib

    import condenser_lite
    from condenser_lite.book import COLAB_RELEASE

    assert COLAB_RELEASE == f"v{condenser_lite.__version__}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == condenser_lite.__version__
    badge = (ROOT / "notebooks" / "04_finetune.md").read_text()
    assert f"/blob/{COLAB_RELEASE}/notebooks/04_finetune.ipynb" in badge
