"""Where every committed number was made (``book/provenance.md``, on the running page): per
results file the command, the commit, the machine and the time, read from the file itself:

    python -m condenser_book.provenance_summary > book/provenance.md

The chapters print none of this; they read the numbers, and this page says where they come from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .mechanism_report import provenance_table
from condenser_lite.reproduction.evidence.results import results_dir


def _machine(m: Mapping) -> str:
    return m.get("gpu") or f"{m['cores']}-core {m.get('cpu') or m.get('cpu_model')}"


def _table(header: list, rows) -> list[str]:
    # a Markdown table's lines, a "|" inside a cell escaped
    lines = ["| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |" for cells in (header, *rows)]
    return [lines[0], "|---" * len(header) + "|", *lines[1:]]


def protocol_section(results: Mapping) -> list[str]:
    """The committed run: how it was merged, and each part's seeds, commit, machine and work (CPU-hours: a
    part's last call reused the stages cached by earlier ones, so its wall time says little)."""
    prov = results["provenance"]
    lines = [f"**`results/small.json`**, the {{term}}`committed run`: `{prov['command']}`, judged by rules "
             f"version {prov['rules']['version']} (commit `{prov['rules']['commit'][:7]}`). Its "
             f"{prov['work_cpu_seconds'] / 3600:.1f} CPU-hours of work ran in parts:", ""]
    rows = [[f"`{Path(name).name}`", ", ".join(map(str, part["pretraining_seeds"])), f"`{part['commit'][:7]}`",
             _machine(part["machine"]), f"{part['work_cpu_seconds'] / 3600:.1f}"]
            for name, part in prov["parts"].items()]
    return lines + _table(["part", "pre-training seeds", "commit", "machine", "CPU-hours of work"], rows)


def study_section(name: str, data: Mapping, what: str) -> list[str]:
    """A study's one-call file: its command, commit, machine and time."""
    prov = data["provenance"]
    took = (f"{prov['cpu_seconds_all_runs'] / 3600:.1f} CPU-hours of runs" if "cpu_seconds_all_runs" in prov
            else f"{prov['wall_seconds'] / 60:.0f} min")
    commit = prov["commit"].split("+")[0][:7] + (" (uncommitted changes)" if prov.get("dirty") or
                                                 "+dirty" in prov["commit"] else "")
    return [f"**`results/{name}`**, {what}: `{prov['command']}` at commit `{commit}`, on a "
            f"{_machine(prov['machine'])}, {took}."]


def provenance_markdown(folder: Path | None = None) -> str:
    """The page's Markdown, from the committed results files in ``folder``."""
    folder = folder or results_dir()
    read = lambda name: json.loads((folder / name).read_text())  # noqa: E731
    lines = protocol_section(read("small.json"))
    for name, what in (("study.json", "the sizing study (chapter 9)"),
                       ("health.json", "the health runs (the health page)"),
                       ("zero_shot.json", "all-MiniLM-L6-v2 as it comes (chapter 4)")):
        lines += ["", *study_section(name, read(name), what)]
    table = provenance_table(read("mechanism.json"))
    lines += ["", "**`results/mechanism.json`**, the mechanism study: one row per part, with one worker's "
              "hours per stage summed over its seeds.", "",
              *_table(["part", *table.columns], ([part, *row] for part, row in table.iterrows()))]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(provenance_markdown(), end="")
