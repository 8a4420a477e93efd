"""The mechanism study's results file: reading it, judging a part's seeds (C0 and the reliance
over them), and merging runs of the study made elsewhere into it. The study itself is
``studies/mechanism.py`` (``python -m condenser_lite mechanism``); the page "When does the head
need ``[CLS]``?" reads the file.
"""

from __future__ import annotations

import json
from pathlib import Path


def judge(per_seed: dict) -> dict:
    """C0 by the pre-registered rule over the seeds of ``per_seed`` (seed order), from the final
    gauges each summary keeps. C0 pairs each Condenser with its control, so it is judged on the
    seeds that have one (``c0_seeds``); the reliance summary covers every seed."""
    from condenser_lite.reproduction.evidence.results import run_reliance
    from condenser_lite.reproduction.statistics.rules import c0_rule, reliance_summary

    seeds = sorted(per_seed, key=int)
    paired = [s for s in seeds if "bert_cont" in per_seed[s]]
    cond = [per_seed[s]["condenser"]["final"] for s in paired]
    cont = [per_seed[s]["bert_cont"]["final"] for s in paired]
    reliance = [run_reliance(h) for h in cond]
    c0 = c0_rule([r["reliance"] if r else None for r in reliance], [h["mlm_loss"] for h in cond],
                 [h["mlm_loss"] for h in cont], [h["cls_cosine"] for h in cond], [h["cls_cosine"] for h in cont])
    every = [run_reliance(per_seed[s]["condenser"]["final"]) for s in seeds]
    return {"per_seed": {s: per_seed[s] for s in seeds}, "c0": c0,
            **({"c0_seeds": [int(s) for s in paired]} if paired != seeds else {}),
            "reliance": reliance_summary([r or {} for r in every])}


def read_study(out: Path, preset_name: str, rejudge_only: bool) -> dict:
    """The study file ``--out`` names ({} where there is none yet), refused in one line where it is
    a folder, not JSON, another file than this preset's mechanism study, or missing when there is
    nothing to do but re-judge it."""
    from condenser_lite.utils.errors import ConfigError
    from condenser_lite.reproduction.evidence.results import check_out

    if not out.exists() and rejudge_only:
        raise ConfigError(f"--out {out}: no such file; give the study's results file (results/mechanism.json)")
    study = check_out(out, "mechanism")  # a folder, a file of yours or another study's is refused
    if study is None:
        return {}
    if study.get("preset") != preset_name:
        raise ConfigError(f"--out {out} is the mechanism study of preset {study.get('preset')}, not {preset_name}, "
                          "and this would overwrite it; give results/mechanism.json or a new path")
    return study


def merge(study: dict, others, out: Path, preset_name: str, parts) -> None:
    """Add to ``study`` (read from ``out``) the parts (named in ``parts``) of the results files
    ``others`` (the study run on other machines); a part both hold must be the same run, or one must be the other
    joined by new seeds (``grew_from``: the larger is kept), or each must have added its own
    seeds to a common copy (``joined``: the union is kept), or the merge is refused."""
    from condenser_lite.utils.errors import ConfigError

    for other in others:
        try:
            theirs = json.loads(other.read_text())
        except OSError as e:
            raise ConfigError(f"--merge {other}: cannot be read ({e.strerror}); give the file the study "
                              "wrote on the other machine (its --out)") from None
        except ValueError:
            raise ConfigError(f"--merge {other}: not JSON; give the file the study wrote on the other "
                              "machine (its --out)") from None
        if not isinstance(theirs, dict) or theirs.get("study") != "mechanism" or \
                theirs.get("preset") != preset_name:
            raise ConfigError(f"--merge {other}: not a mechanism study of preset {preset_name} (its 'study' "
                              "and 'preset' fields); give the file the study wrote on the other machine (its --out)")
        for part, entry in theirs.items():
            if part not in parts or part in study and grew_from(study[part], entry):
                continue  # not a part, or the file already holds this run
            if part in study and not grew_from(entry, study[part]):
                entry = joined(study[part], entry)
                if entry is None:
                    raise ConfigError(f"{other} and {out} hold different runs of part {part}: keep one "
                                      "file's part (delete it from the other), then merge")
            study[part] = entry


def whole(*parts: dict) -> bool:
    """Whether each part record's seeds are the seeds it holds summaries of."""
    return all(sorted(map(int, p["per_seed"])) == sorted(p["seeds"]) for p in parts)


def runs_of(part: dict) -> list[dict]:
    """The provenance of every run that trained some of ``part``'s seeds, the latest last (a run
    recorded without its seeds trained them all)."""
    return [*part.get("provenance_of_other_seeds", []), {"seeds": part["seeds"], **part["provenance"]}]


def joined(ours: dict, theirs: dict) -> dict | None:
    """Two records of one part that each added their own seeds to a common copy (seeds run side
    by side on two machines, each from a copy of the file), as one record: the seeds both hold
    must have the same summaries. Every run's provenance is kept, the one that finished last as
    the part's ``provenance``; C0 and the reliance summary are judged anew over the union. None
    where the two are not such siblings."""
    shared = ours["per_seed"].keys() & theirs["per_seed"].keys()
    if any(ours[k] != theirs[k] for k in ("what", "modified_condenser")) or \
            any(ours["per_seed"][s] != theirs["per_seed"][s] for s in shared) or not whole(ours, theirs):
        return None
    every = runs_of(ours) + runs_of(theirs)
    runs = [run for i, run in enumerate(every) if run not in every[:i]]  # the common copy's runs once
    trained = [set(r["seeds"]) for r in runs if not r.get("stages_reread_by_the_run_below")]
    if any(a & b for i, a in enumerate(trained) for b in trained[:i]):
        return None  # two runs trained one seed: different runs of it, not siblings
    runs.sort(key=lambda r: r.get("finished") or "")
    per_seed = {**ours["per_seed"], **theirs["per_seed"]}
    return {"what": ours["what"], "seeds": sorted(map(int, per_seed)), "modified_condenser": ours["modified_condenser"],
            **judge(per_seed), "provenance": runs[-1], "provenance_of_other_seeds": runs[:-1]}


def grew_from(larger: dict, smaller: dict) -> bool:
    """Whether part record ``larger`` is ``smaller`` or ``smaller`` joined by new seeds: every seed
    of ``smaller`` kept unchanged, with the run that trained them among ``larger``'s provenance
    (a point run seed by seed on machines that keep nothing, merged back in any order)."""
    if larger == smaller:
        return True
    runs = runs_of(larger)
    return (whole(larger, smaller) and all(larger["per_seed"].get(s) == v for s, v in smaller["per_seed"].items())
            and all(r in runs for r in runs_of(smaller)))
