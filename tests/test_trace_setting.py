"""scripts/trace_setting.py, which lists the functions a setting's value passes: what it counts as
holding the value, and its usage line when called without a command."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "trace_setting.py"
sys.path.insert(0, str(SCRIPT.parent))

from trace_setting import holds  # noqa: E402


@dataclasses.dataclass
class Recipe:
    lr: float
    steps: int = 2


def test_a_value_is_held_directly_or_one_level_deep_only():
    assert holds(1.5e-4, 1.5e-4) and not holds(2e-4, 1.5e-4)
    assert holds(Recipe(1.5e-4), 1.5e-4) and holds({"lr": 1.5e-4}, 1.5e-4) and holds([0.1, 1.5e-4], 1.5e-4)
    assert not holds({"stage": Recipe(1.5e-4)}, 1.5e-4)  # two levels deep: another function's business
    assert not holds("1.5e-4", 1.5e-4) and not holds(None, 1.5e-4)


def test_without_a_command_it_prints_its_usage():
    run = subprocess.run([sys.executable, str(SCRIPT), "1e-4"], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "trace_setting.py 1.23457e-4 -- pretrain" in run.stderr
