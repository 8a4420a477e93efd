"""One results file from runs of the same preset on different pre-training seeds.

A pre-trained model is the unit of the scorecard's tests (rules version 2), and the `small` run
needs five of them per arm: hours on a 2-core CPU, more than one sitting, and perhaps more than
one machine. Each pre-training seed's models are independent of the others', so the protocol can
run on a few seeds at a time (``experiments --set pretrain_seeds=[44,45] --out part.json``) and
the parts be merged (``python -m condenser_lite merge part*.json --out results/small.json``):
the per-run numbers of every part, in pre-training seed order, with their means and spreads
recomputed, the scorecard judged anew, and a provenance that keeps each part's own (its commit,
command, machine and times). The merged file equals, number for number, the file one call on all
the seeds writes (``tests/reproduction/test_merge.py``). Explained in chapter 8.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...utils.errors import ConfigError
from .protocol import arm_pretrain_seeds, heldout_curve, layer_stats, notes
from ..configuration.settings_tree import Preset, preset_from_record
from ..evidence.results import RESULTS_VERSION, git_state, headline, now
from ..statistics.rules import stats
from ..claims.scorecard import check_judged, scorecard

# parts that must be the same in every part: the task, its BM25 baseline, the held-out set, the sizes
SHARED = ("protocol", "version", "seeds", "task", "bm25", "heldout", "train_sizes", "sts_sizes", "environment")
PER_RUN = ("retrieval", "sts", "nb_recall", "loss_curves", "finetune_wall_time")


def read_part(path: str | os.PathLike) -> dict:
    """A results file a command reads (a part to merge, a run to release), checked where it
    enters: a readable protocol results file. Chapter 8."""
    path = Path(path)
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable results file ({err}); give a file `experiments --out` wrote") from None
    if not isinstance(results, dict) or results.get("protocol") != "condenser_lite.protocol":
        raise ConfigError(f"{path} is not a protocol results file; give a file `experiments --out` wrote")
    check_judged(results, str(path))  # its stored claims are what the rules make of its numbers
    return results


def _preset_without_seeds(results: Mapping, name: str) -> dict:
    """The part's preset as this version writes it (read by ``settings_tree.preset_from_record``),
    without its pre-training seeds."""
    preset = preset_from_record(results.get("preset") or {}, name).to_dict()
    return {k: v for k, v in preset.items() if k != "pretrain_seeds"}


def _check_parts(parts: Sequence[Mapping], names: Sequence[str]) -> None:
    """Refuse parts that are not one preset's runs on disjoint pre-training seeds, naming the part
    and the difference."""
    first, name0 = parts[0], names[0]
    preset0 = _preset_without_seeds(first, name0)
    for part, name in zip(parts[1:], names[1:]):
        preset = _preset_without_seeds(part, name)
        if preset != preset0:
            differ = sorted(k for k in {**preset, **preset0} if preset.get(k) != preset0.get(k))
            raise ConfigError(f"{name} and {name0} are runs of different settings ({', '.join(differ)}): only "
                              "runs of one preset on different pre-training seeds merge")
        for key in SHARED:
            if key == "environment":
                continue  # the machines may differ: each part's provenance keeps its own
            if part.get(key) != first.get(key):
                raise ConfigError(f"{name} and {name0} differ in {key!r}: they did not run the same protocol "
                                  "(another data mirror or library version?); re-run one of them")
        rules = [(p.get("provenance") or {}).get("rules") for p in (first, part)]
        if [(r or {}).get("version") for r in rules] != [(rules[0] or {}).get("version")] * 2:
            raise ConfigError(f"{name} and {name0} were judged by different versions of the rules; re-run one of them")
    seen: dict[int, str] = {}
    for part, name in zip(parts, names):
        for seed in part["pretraining_seeds"]:
            if seed in seen:
                raise ConfigError(f"pre-training seed {seed} is in both {seen[seed]} and {name}: each seed's "
                                  "models are one unit; merge parts on different seeds")
            seen[seed] = name


def _is_stats(d: Any) -> bool:
    return isinstance(d, Mapping) and {"mean", "std", "values", "n"} <= set(d)


def _join(values: Sequence[Any]) -> Any:
    """The parts' entries at one place of the results, joined: ``stats`` from all their values,
    lists one after the other, dicts key by key (keys in the first part's order)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if _is_stats(present[0]):
        return stats([x for v in present for x in v["values"]])
    if isinstance(present[0], list):
        return [x for v in present for x in v]
    if isinstance(present[0], Mapping):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: _join([v.get(k) for v in present]) for k in keys}
    return present[0]


def _entropy(parts: Sequence[Mapping]) -> dict:
    """CLS attention entropy before fine-tuning per pre-training seed (and their mean), after it
    per run, and the change per run, as one call on every seed gives them."""
    out: dict[str, dict] = {}
    for arm in dict.fromkeys(a for p in parts for a in p.get("entropy", {})):
        by_seed: dict[str, list[float]] = {}
        after, change = [], []
        for p in parts:
            e = p.get("entropy", {}).get(arm)
            if not e:
                continue
            seeds = [s for s in p["pretraining_seeds"] if s in _seeds_of(p, arm)]
            by_seed.update(e.get("before_by_pretraining_seed") or {str(seeds[0]): e["before"]})
            if "after" in e:
                after += e["after"]["values"]
            if "mean_abs_change" in e:
                change += e["mean_abs_change"]["values"]
        entry: dict[str, Any] = {"before": np.mean(list(by_seed.values()), axis=0).tolist()}
        if len(by_seed) > 1:
            entry["before_by_pretraining_seed"] = by_seed
        if after:
            entry["after"] = layer_stats(after)
            entry["mean_abs_change"] = stats(change)
        out[arm] = entry
    return out


def _seeds_of(part: Mapping, arm: str) -> list:
    entry = part["arms"][arm]
    return [entry["seed"], *(o["seed"] for o in entry.get("other_pretraining_seeds", []))]


def _with_curve(run: Mapping) -> dict:
    """``run`` with its ``heldout_curve`` (the held-out rows of its log where a part stored only
    the log), so that dropping a later seed's log keeps the evaluations the health band reads."""
    run, rows = dict(run), heldout_curve(run.get("pretrain_log") or [])
    if rows and not run.get("heldout_curve"):
        run["heldout_curve"] = rows
    return run


def _arms(parts: Sequence[Mapping]) -> dict:
    """Each arm's pre-training runs, first seed first: the first keeps its curves (as one call
    keeps the first seed's), the others their gauges and compute."""
    out = {}
    for arm in parts[0]["arms"]:
        runs = [_with_curve(r) for p in parts if p["arms"].get(arm)
                for r in (p["arms"][arm], *p["arms"][arm].get("other_pretraining_seeds", []))]
        first = {k: v for k, v in runs[0].items() if k != "other_pretraining_seeds"}
        others = [{k: v for k, v in r.items() if k not in ("pretrain_log", "other_pretraining_seeds", "parent")}
                  for r in runs[1:]]
        out[arm] = {**first, **({"other_pretraining_seeds": others} if others else {})}
    return out


def _provenance(parts: Sequence[Mapping], names: Sequence[str], preset: Preset, command: str | None) -> dict:
    """The merged file's provenance: this call's commit and command, and each part's own."""
    provs = [p["provenance"] for p in parts]
    first = provs[0]
    return {
        **git_state(),
        "command": command, "preset": preset.name, "settings": preset.to_dict(),
        "started": min(p["started"] for p in provs), "finished": max(p["finished"] for p in provs),
        "merged": now(),
        "wall_seconds": round(sum(p["wall_seconds"] for p in provs), 2),
        "cpu_seconds": round(sum(p["cpu_seconds"] for p in provs), 2),
        "parts": {name: {"pretraining_seeds": part["pretraining_seeds"], **{
            k: part["provenance"].get(k) for k in ("commit", "dirty", "command", "started", "finished",
                                                    "wall_seconds", "cpu_seconds", "parts", "parts_reused",
                                                    "work_cpu_seconds", "machine", "precision")}}
                  for name, part in zip(names, parts)},
        "parts_reused": sum(p["parts_reused"] for p in provs),
        "work_cpu_seconds": round(sum(p["work_cpu_seconds"] for p in provs), 2),
        "machine": first["machine"],
        "machines_differ": len({json.dumps({k: v for k, v in p["machine"].items() if not k.startswith("load")},
                                           sort_keys=True) for p in provs}) > 1,
        "python": first["python"], "condenser_lite": first["condenser_lite"], "packages": first["packages"],
        "pre_registration": first["pre_registration"], "rules": first.get("rules"),
        "precision": {"components": first["precision"]["components"],
                      "stages": {k: v for p in provs for k, v in p["precision"]["stages"].items()},
                      "mixed": len({v for p in provs for v in p["precision"]["stages"].values() if v}) > 1,
                      "cpu_probe": first["precision"]["cpu_probe"]},
    }


def merge_results(parts: Sequence[Mapping], names: Sequence[str] | None = None, command: str | None = None) -> dict:
    """One results file from ``parts``, results files of one preset on disjoint pre-training seeds
    (``names``: where each came from, for the provenance and the errors). The per-run numbers are
    joined in pre-training seed order and their statistics recomputed; the scorecard and the
    headline are judged anew. Explained in chapter 8."""
    if not parts:
        raise ConfigError("nothing to merge: give the results files of the parts")
    names = list(names or [f"part {i + 1}" for i in range(len(parts))])
    parts = [json.loads(json.dumps(p)) for p in parts]  # as read from their files (lists, not tuples)
    order = sorted(range(len(parts)), key=lambda i: min(parts[i]["pretraining_seeds"]))
    parts, names = [parts[i] for i in order], [names[i] for i in order]
    _check_parts(parts, names)
    seeds = tuple(s for p in parts for s in p["pretraining_seeds"])
    preset = preset_from_record(parts[0]["preset"], names[0]).replace(pretrain_seeds=seeds)
    for arm in parts[0]["arms"]:
        have = [s for p in parts if arm in p["arms"] for s in _seeds_of(p, arm)]
        if have != list(arm_pretrain_seeds(preset, arm)):
            raise ConfigError(f"arm {arm!r} has pre-training seeds {have} in the parts, but the merged preset runs it "
                              f"on {list(arm_pretrain_seeds(preset, arm))}; merge parts that together make the preset")
    merged: dict[str, Any] = {k: parts[0][k] for k in SHARED if k in parts[0]}
    merged.update(version=RESULTS_VERSION, preset=preset.to_dict(), pretraining_seeds=list(seeds))
    merged["arms"] = arms = _arms(parts)
    merged.update({key: _join([p.get(key) for p in parts]) for key in PER_RUN})
    merged["entropy"] = _entropy(parts)
    merged["wall_time"] = {"total": round(sum(p["wall_time"]["total"] for p in parts), 2),
                           "parts": {n: p["wall_time"] for n, p in zip(names, parts)}}
    merged["execution"] = {n: p.get("execution") for n, p in zip(names, parts)}
    merged["notes"] = notes(preset, arms, merged.get("heldout"), max(int(s) for s in merged["sts_sizes"]))
    merged["provenance"] = _provenance(parts, names, preset, command)
    merged = {k: merged[k] for k in [*parts[0], *merged] if k in merged}  # the parts' layout
    merged.pop("key", None)
    merged["claims"] = scorecard(merged)
    merged["headline"] = headline(merged)
    return merged
