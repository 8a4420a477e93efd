"""Is my pre-training healthy? A stage's held-out gauges against the committed runs (the health page,
``notebooks/11_health.md``).

Every stage of the committed ``small`` run logged, at each held-out evaluation, the held-out MLM
loss and, for the Condenser family, the [CLS] reliance, on several pre-training seeds. For a
reader's stage that trains the same model on the same corpus with the same masking as one of
those arms, ``stage_check`` builds a ``StageCheck``; at each evaluation it says whether the
reader's numbers fall inside the band the committed seeds predict for one more seed, how unusual
they are, and, where they leave the band, which of the reader's training settings differ from the
committed stage's (the first suspects). Where the shape, the corpus, the masking or the starting
model differ, there is no reference, and it says so rather than judge.

The band is built for the whole stage, not for one evaluation. At update ``s`` it is the committed
seeds' mean plus or minus ``t(1 - a/2, n-1) * sd * sqrt(1 + 1/n)`` (``n`` seeds; linear between
evaluations; never narrower than ``FLOOR``, since runs on other CPUs differ in the last digits),
with ``a = 1 - (1 - LEVEL) ** (1/m)`` for a stage judged at ``m`` evaluations: each evaluation is
a prediction interval at confidence ``(1 - LEVEL) ** (1/m)``, so a healthy stage leaves the band
somewhere in at most ``LEVEL`` of cases (Sidak's bound; evaluations that move together only make
it rarer). ``leave_one_out`` measures that rate on the committed seeds themselves.

    >>> check = stage_check(stage_config("small", "mlm"))      # doctest: +SKIP
    >>> check(500, {"mlm_loss": 6.71})["line"]                  # doctest: +SKIP
    'health at update 500: held-out MLM loss 6.710, within the committed runs' band (6.64 to 6.87; ...)'
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy import stats

from .arms import arm_config
from ..configuration.presets import get_preset
from ..configuration.registry import ARMS, PARENT
from ..evidence.results import pretraining_runs, results_dir
from ...training.pretraining_config import ModelConfig, StageConfig
from ...utils.roles import having

REFERENCE_PRESET = "small"  # the committed run whose curves are the reference
GAUGES = {"mlm_loss": "held-out MLM loss", "cls_reliance": "[CLS] reliance"}
FLOOR = {"mlm_loss": 0.02, "cls_reliance": 0.02}  # the narrowest half-width of a band
CONFIDENCE = 0.95  # one evaluation's prediction interval (chapter 11's equation; exercise 1)
# the chance that a healthy stage leaves its band at any evaluation, under the band's model (normal
# spread between seeds). Below 1 in 20 on purpose: with 3-5 seeds the model is rough (one seed
# leaving the loss plateau late is not a normal draw), and leaving committed seeds out must find
# at most 1 healthy stage in 20 flagged (tests/reproduction/test_health.py)
LEVEL = 0.01
# a stage's settings by their health role (utils.roles): those that change how it trains, not what
# it learns from or its shape, ranked as the suspects named first when a run leaves its band; and
# those that change neither (the replicate, where the model starts, checked on its own, the
# bookkeeping, and exact reformulations of the same computation)
_ROLES = {**having(ModelConfig, "health"), **having(StageConfig, "health")}
TRAINING_FIELDS = tuple(sorted((n for n, r in _ROLES.items() if r != "neutral"), key=_ROLES.get))
NEUTRAL_FIELDS = tuple(n for n, r in _ROLES.items() if r == "neutral")
ADVICE = {"above": "check the learning rate, the masking and the corpus",
          "below": "lower than the committed runs: a shorter schedule (its warm-up ends sooner) does this early on; "
                   "where no setting differs, check that no held-out text is in the training data"}


@dataclasses.dataclass
class Band:
    """The committed runs at one update: ``low`` to ``high``, from ``n`` seeds. Each side is ``k``
    times ``sd * sqrt(1 + 1/n)`` from the mean (or ``FLOOR``, if wider), and one more seed falls
    outside with chance ``each``."""
    step: int
    low: float
    high: float
    n: int
    k: float = float("nan")
    each: float = 1 - CONFIDENCE


def prediction_band(values: Sequence[float], gauge: str,
                    confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """``(low, high)``: where one more seed's value should fall with chance ``confidence``, from
    ``values`` (one per seed); None with fewer than two seeds (no spread to go on)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = max(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd * math.sqrt(1 + 1 / n), FLOOR[gauge])
    return mean - half, mean + half


def each_evaluation(evaluations: int, level: float = LEVEL) -> float:
    """The chance ``a`` that one evaluation of a healthy stage leaves its band, such that a stage of
    ``evaluations`` independent evaluations leaves it somewhere with chance ``level`` (Sidak)."""
    return 1 - (1 - level) ** (1 / max(evaluations, 1))


def stage_p(p_each: float, evaluations: int) -> float:
    """How unusual a healthy stage would be with one of its ``evaluations`` this far out: the
    chance that one evaluation or more lies as far, where one does with chance ``p_each``."""
    return 1 - (1 - p_each) ** max(evaluations, 1)


def _curve_rows(run: Mapping) -> list[dict]:
    """A run's held-out evaluations as ``{"step", gauge: value}`` rows."""
    rows = run.get("heldout_curve") or [r for r in run.get("pretrain_log") or []
                                        if any(k.startswith("eval_") for k in r)]
    return [{"step": r["step"], **{k.removeprefix("eval_"): v for k, v in r.items() if k.startswith("eval_")}}
            for r in rows]


def reference_curves(folder: str | Path | None = None,
                     preset: str = REFERENCE_PRESET) -> dict[str, dict[str, list[dict]]]:
    """``{arm: {checkpoint key: rows}}``: every committed held-out curve of the ``preset`` run, one
    per pre-training seed, from ``results/<preset>.json`` (and its parts, ``results/parts/``), the
    curves ``results/health.json`` adds (``committed_curves``: a committed stage re-run, with its
    source) and the mechanism study's ``e0`` part (the preset's own stages), each stage once."""
    folder = Path(folder or results_dir())
    out: dict[str, dict[str, list[dict]]] = {}
    files = [folder / f"{preset}.json", *sorted((folder / "parts").glob(f"{preset}-*.json"))]
    for path in files:
        if not path.is_file():
            continue
        results = json.loads(path.read_text())
        for arm in results.get("arms", {}):
            for run in pretraining_runs(results, arm):
                rows = _curve_rows(run)
                if rows and run.get("checkpoint"):
                    out.setdefault(arm, {})[Path(run["checkpoint"]).name] = rows
    # stages of the committed run whose curve its results file lacks, re-run to every digit of
    # its final held-out loss and kept with where each came from
    extra = folder / "health.json"
    if extra.is_file():
        added = json.loads(extra.read_text()).get("committed_curves", {})
        for arm, per_key in added.get("arms", {}).items() if added.get("preset") == preset else ():
            for key, entry in per_key.items():
                out.setdefault(arm, {}).setdefault(key, entry["curve"])
    study = folder / "mechanism.json"
    if study.is_file():
        data = json.loads(study.read_text())
        if data.get("preset") == preset and "e0" in data:
            for per_arm in data["e0"]["per_seed"].values():
                for arm, run in per_arm.items():
                    if arm in ARMS and run.get("curve"):
                        out.setdefault(arm, {})[run["checkpoint_key"]] = run["curve"]
    return out


def committed_heldout(folder: str | Path | None = None, preset: str = REFERENCE_PRESET) -> dict | None:
    """The committed run's held-out set (``results/<preset>.json``'s ``heldout``: blocks, masked
    tokens, unigram entropy), or None where the file is absent."""
    path = Path(folder or results_dir()) / f"{preset}.json"
    return json.loads(path.read_text()).get("heldout") if path.is_file() else None


def _by_step(curves: Mapping[str, list[dict]], gauge: str) -> dict[int, list[float]]:
    by_step: dict[int, list[float]] = {}
    for rows in curves.values():
        for r in rows:
            if r.get(gauge) is not None:
                by_step.setdefault(r["step"], []).append(r[gauge])
    return {step: v for step, v in sorted(by_step.items()) if len(v) >= 2}


def bands(curves: Mapping[str, list[dict]], gauge: str, evaluations: int | None = None,
          level: float = LEVEL) -> list[Band]:
    """The stage's band at every update where at least two committed seeds evaluated ``gauge``,
    for a stage judged at ``evaluations`` of them (default: as many as the committed stage had),
    left somewhere by a healthy stage with chance ``level`` (``level=0.05, evaluations=1``: one
    evaluation's 95% prediction interval)."""
    by_step = _by_step(curves, gauge)
    each = each_evaluation(evaluations or len(by_step), level)
    ks = {n: float(stats.t.ppf(1 - each / 2, n - 1)) for n in {len(v) for v in by_step.values()}}
    out = []
    for step, values in by_step.items():  # prediction_band at confidence 1 - each, its t once per n
        n, mean = len(values), sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = max(ks[n] * sd * math.sqrt(1 + 1 / n), FLOOR[gauge])
        out.append(Band(step, mean - half, mean + half, n=n, k=ks[n], each=each))
    return out


def band_at(table: Sequence[Band], step: int) -> Band | None:
    """The band at ``step``: as committed where the runs evaluated there, linear between two
    evaluations, None outside them."""
    for lo, hi in zip(table, table[1:]):
        if lo.step <= step <= hi.step:
            w = (step - lo.step) / (hi.step - lo.step)
            fewer = lo if lo.n <= hi.n else hi  # the fewer seeds, the wider: their k
            return Band(step, lo.low + w * (hi.low - lo.low), lo.high + w * (hi.high - lo.high), fewer.n,
                        fewer.k, fewer.each)
    return next((b for b in table if b.step == step), None)


def p_each(band: Band, value: float) -> float:
    """The chance that one more seed lies at least as far from the seeds' mean as ``value`` does,
    on the band's scale (its half-width is ``k`` of it): below ``band.each`` exactly outside."""
    mean, half = (band.low + band.high) / 2, (band.high - band.low) / 2
    return float(2 * stats.t.sf(abs(value - mean) / half * band.k, band.n - 1))


def leave_one_out(curves: Mapping[str, Mapping[str, list[dict]]], **band) -> dict[str, dict]:
    """The false-alarm rate measured on the committed runs: for every arm with three seeds or
    more, each seed's held-out MLM loss judged against the band of the others over its whole
    stage. Returns ``{arm: {"stages", "flagged", "evaluations", "outside", "first"}}`` (``first``:
    ``{checkpoint key: first update outside}``). ``band``: ``StageCheck``'s ``evaluations`` and
    ``level`` (``evaluations=1, level=0.05``: one evaluation's 95% interval, as if each
    evaluation were the only one). Chapter 11."""
    out = {}
    for arm, seeds in curves.items():
        if len(seeds) < 3:
            continue
        counts = {"stages": 0, "flagged": 0, "evaluations": 0, "outside": 0, "first": {}}
        for key, rows in seeds.items():
            check = StageCheck(arm, {k: v for k, v in seeds.items() if k != key}, **band)
            verdicts = [(r["step"], check(r["step"], {"mlm_loss": r["mlm_loss"]})["health"]) for r in rows
                        if r.get("mlm_loss") is not None]
            outside = [step for step, v in verdicts if v in ("above", "below")]
            counts["stages"] += any(v != "none" for _, v in verdicts)
            counts["flagged"] += bool(outside)
            counts["evaluations"] += sum(v != "none" for _, v in verdicts)
            counts["outside"] += len(outside)
            if outside:
                counts["first"][key] = outside[0]
        out[arm] = counts
    return out


def _differences(cfg, ref) -> tuple[list[str], list[str]]:
    """``(training, other)``: the settings of ``cfg`` that differ from ``ref``'s, as
    ``"name value (committed: value)"``, split into training settings and the rest."""
    training, other = [], []
    mine, committed = cfg.settings(), ref.settings()
    for name, a in mine.items():
        b = committed[name]
        # a setting the stage's method never reads (its read_by role) changes nothing it computes
        if name in NEUTRAL_FIELDS or cfg.unread(cfg.method, [name]) or a == b:
            continue
        (training if name in TRAINING_FIELDS else other).append(f"{name} {a!r} (committed: {b!r})")
    training.sort(key=lambda d: TRAINING_FIELDS.index(d.split(" ", 1)[0]))
    return training, other


def _init_config(init: str | None) -> dict | None:
    """The stage settings a starting checkpoint was pre-trained with (its ``pretrain_config.json``),
    or None for a model this library did not pre-train."""
    record = Path(init or "") / "pretrain_config.json"
    if not init or not record.is_file():
        return None
    return json.loads(record.read_text()).get("config")


class StageCheck:
    """A stage's held-out gauges against the committed runs of ``arm`` (None: no reference, and
    ``reason`` says why). Call it with an update and the gauges logged there; it returns
    ``{"health": "within" | "above" | "below" | "none", "line": one line to print}`` and, where
    judged, ``"health_p"`` (how unusual a healthy stage would be with an evaluation this far out:
    ``stage_p``) and, outside the band, ``"health_excess"`` (nats beyond it). The band holds for
    a stage judged at ``evaluations`` evaluations (default: as many as the committed stage had),
    and a healthy one leaves it somewhere with chance ``level``."""

    def __init__(self, arm: str | None, curves: Mapping[str, list[dict]] | None = None,
                 suspects: Sequence[str] = (), reason: str | None = None, heldout: Mapping | None = None,
                 preset: str = REFERENCE_PRESET, evaluations: int | None = None, level: float = LEVEL):
        self.arm, self.suspects, self.reason, self.heldout = arm, list(suspects), reason, heldout
        self.preset, self.level = preset, level
        self.evaluations = evaluations or len(_by_step(curves or {}, "mlm_loss"))
        self.bands = {g: bands(curves, g, self.evaluations, level) for g in GAUGES} if curves else {}
        self.seeds = len(curves or {})
        self._said_none = False

    def check_heldout(self, info: Mapping | None) -> None:
        """No reference where the stage's held-out set is not the committed one (another corpus,
        another split, another tokenizer): its blocks, masked tokens or unigram entropy differ."""
        committed = self.heldout
        if self.arm is None or not committed:
            return
        keys = ("n_blocks", "n_masked", "unigram_entropy")
        if not info or any(info.get(k) is None or not math.isclose(info[k], committed[k], rel_tol=1e-9)
                           for k in keys):
            seen = ", ".join(f"{k} {(info or {}).get(k)} (committed: {committed.get(k)})" for k in keys)
            self.arm, self.reason = None, f"the held-out set is not the committed run's ({seen})"

    def __call__(self, step: int, gauges: Mapping[str, float]) -> dict[str, Any]:
        if self.arm is None:
            line = None if self._said_none else f"health: no committed run to compare with: {self.reason}"
            self._said_none = True
            return {"health": "none", "line": line}
        parts, verdict, excess, p = [], "within", 0.0, None
        for gauge, name in GAUGES.items():
            value = gauges.get(gauge)
            band = band_at(self.bands.get(gauge, []), step) if value is not None else None
            if band is None:
                continue
            where = "within" if band.low <= value <= band.high else "above" if value > band.high else "below"
            text = f"{name} {value:.3f}, {where} the committed runs' band ({band.low:.3f} to {band.high:.3f}"
            if where != "within":
                gap = value - band.high if where == "above" else band.low - value
                text += f"; {gap:.3f} {'nats ' if gauge == 'mlm_loss' else ''}{where} it"
            if gauge == "mlm_loss":  # the loss decides the verdict; reliance is reported beside it
                p = stage_p(p_each(band, value), self.evaluations)
                shown = "< 0.0001" if p < 1e-4 else f"= {p:.2g}"  # two significant digits, none below 1e-4
                text += f"; p {shown} that a healthy stage strays this far"
                if where != "within":
                    verdict, excess = where, value - band.high if where == "above" else value - band.low
            parts.append(text + ")")
        if not parts:
            steps = [b.step for b in self.bands.get("mlm_loss", [])]
            return {"health": "none", "line": f"health at update {step:,}: no committed evaluation at this update "
                                              f"(the committed {self.arm} stage evaluated every "
                                              f"{steps[1] - steps[0] if len(steps) > 1 else 0} updates up to "
                                              f"{max(steps, default=0):,})"}
        line = (f"health at update {step:,}: " + "; ".join(parts)
                + f" [{self.arm} stage, {self.seeds} seeds of `{self.preset}`; a healthy stage of "
                f"{self.evaluations} evaluations leaves this band 1 time in {round(1 / self.level):,}]")
        if verdict != "within":
            line += f": {ADVICE[verdict]}"
            if self.suspects:
                line += "; first suspects, settings that differ from the committed stage: " + ", ".join(self.suspects)
        elif self.suspects:
            line += "; settings that differ from the committed stage: " + ", ".join(self.suspects)
        out = {"health": verdict, "line": line}
        if p is not None:
            out["health_p"] = float(f"{p:.3g}")
        if verdict != "within":
            out["health_excess"] = round(float(excess), 4)
        return out


def planned_evaluations(cfg, curves: Mapping[str, list[dict]]) -> int | None:
    """How many of the stage ``cfg``'s held-out evaluations fall where the committed ``curves``
    have a band (every ``eval_every`` updates and after the last), so the band holds for the
    evaluations it judges; None where the stage's length is not fixed in updates."""
    steps = list(_by_step(curves, "mlm_loss"))
    if not cfg.max_steps or not steps:
        return None
    mine = set(range(cfg.eval_every, cfg.max_steps + 1, cfg.eval_every)) if cfg.eval_every else set()
    return sum(steps[0] <= s <= steps[-1] for s in mine | {cfg.max_steps}) or None


def stage_check(cfg, folder: str | Path | None = None, preset: str = REFERENCE_PRESET) -> StageCheck:
    """The ``StageCheck`` for a stage's settings ``cfg`` (``pretraining_config.StageConfig``): against the
    committed arm of ``preset`` (the ``small`` run) whose stage differs from it in training
    settings at most (and, for a continuation, whose starting model is one of that preset's), or
    without a reference. ``folder``: the results folder (default: the repository's)."""
    curves = reference_curves(folder, preset)
    name, preset = preset, get_preset(preset)
    init = _init_config(cfg.init)
    best: tuple[int, str, list[str]] | None = None
    closest: tuple[int, str, list[str]] | None = None
    for arm in ARMS:
        if arm not in curves or (PARENT[arm] is None) != (cfg.init is None):
            continue
        ref = arm_config(arm, preset, None if PARENT[arm] is None else "init")
        training, other = _differences(cfg, ref)
        if PARENT[arm] is not None:  # a continuation: it must start from a stage like the committed parent's
            parent = arm_config(PARENT[arm], preset, None if PARENT[PARENT[arm]] is None else "init")
            if init is None:
                other.append(f"init {cfg.init} (not a stage this library pre-trained)")
            else:
                started = type(cfg)().replace(**{k: v for k, v in init.items() if k in cfg.setting_names()})
                other += [f"init: {d}" for d in sum(_differences(started, parent), [])]
        if not other and (best is None or len(training) < best[0]):
            best = (len(training), arm, training)
        if closest is None or len(other) < closest[0]:
            closest = (len(other), arm, other)
    if best is not None:
        return StageCheck(best[1], curves[best[1]], best[2], heldout=committed_heldout(folder, name), preset=name,
                          evaluations=planned_evaluations(cfg, curves[best[1]]))
    if closest is None:
        return StageCheck(None, reason="the committed results hold no held-out curve of such a stage "
                                       f"({'from scratch' if cfg.init is None else 'a continuation'})")
    return StageCheck(None, reason=f"closest committed stage {closest[1]} differs in " + "; ".join(closest[2][:3]))
