"""Install condenser_lite from a clone of this repository into the running Python: what the
first cell of every chapter does on Colab (after cloning the repository at a release tag).

    python scripts/colab_install.py            # from a clone, into the current interpreter

It installs the pins of ``requirements.txt`` with two exceptions: ``torch`` (the runtime's own
build stays, e.g. Colab's CUDA build; the pin is the CPU build of the machines the book is
developed on) and the notebook, test and book tooling (the runtime has its own Jupyter stack).
Pins already satisfied are skipped, so a second run installs nothing. Then it installs the
package itself from the clone, without dependencies, into site-packages, where the running
kernel finds it. If an upgraded package was already imported by the running kernel (its old
version stays in memory), it restarts the kernel on Colab, or says to restart elsewhere.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
from pathlib import Path

# Left to the runtime: its torch build, and its own notebook/test/book stack.
KEEP = {"torch", "papermill", "nbval", "pytest", "pytest-xdist", "ipykernel", "jupyterlab",
        "jupyter-book", "jupytext", "sphinx-mathjax-offline"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: Path) -> dict[str, str]:
    """``name -> version`` for every ``name==version`` line except :data:`KEEP`."""
    out = {}
    for number, raw in enumerate(Path(requirements).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-e"):
            continue
        match = _PIN.match(line)
        if not match:
            raise ValueError(f"{requirements}:{number}: expected an exact pin name==version, "
                             f"got {line!r}; pin it exactly as the rest of the file does")
        name, version = match.groups()
        if _norm(name) not in KEEP:
            out[name] = version
    return out


def unmet(wanted: dict[str, str]) -> dict[str, str]:
    """The pins whose installed version differs (or which are missing)."""
    out = {}
    for name, version in wanted.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            out[name] = version
    return out


def imported_from(distributions: set[str]) -> list[str]:
    """Top-level modules already imported in this process that belong to ``distributions``."""
    wanted = {_norm(d) for d in distributions}
    owners = metadata.packages_distributions()
    return sorted(module for module in list(sys.modules)
                  if "." not in module and any(_norm(d) in wanted for d in owners.get(module, ())))


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


def main(root: str | Path | None = None, restart: bool | None = None) -> list[str]:
    """Install the pins and the package from the clone at ``root``; return the distributions
    that changed. ``restart`` (default: on Colab) restarts the kernel when a changed package was
    already imported."""
    root = Path(root or Path(__file__).resolve().parents[1])
    todo = unmet(pins(root / "requirements.txt"))
    stale = imported_from(set(todo))  # read before installing: what this kernel already holds
    if todo:
        print(f"installing {len(todo)} pinned packages:", ", ".join(sorted(todo)))
        _pip(*(f"{name}=={version}" for name, version in todo.items()))
    _pip("--no-deps", "--force-reinstall", str(root))
    importlib.invalidate_caches()
    import condenser_lite

    # the package now lives in site-packages: point it at the clone's committed results
    os.environ["CONDENSER_LITE_RESULTS"] = str(root / "results")
    print(f"condenser_lite {condenser_lite.__version__} from {root.name}; "
          f"torch {metadata.version('torch')} kept")
    if stale:
        message = ("already imported before the install, so their old versions are in memory: "
                   + ", ".join(stale))
        if restart if restart is not None else "google.colab" in sys.modules:
            print(message + ". Restarting the runtime; then run the notebook again.")
            from IPython import get_ipython

            get_ipython().kernel.do_shutdown(True)
        else:
            print(message + ". Restart the kernel, then run the notebook again.")
    return sorted(todo)


if __name__ == "__main__":
    main()
