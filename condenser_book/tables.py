"""The book's tables of the protocol's results (pandas ``DataFrame``s, or HTML for the scorecard),
and the per-model statistics the tables and figures share: ``fmt`` (mean ± std), ``by_model``
(one number per pre-trained model), ``unit_stat``. Explained in chapters 4-8.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from condenser_lite.reproduction.configuration.registry import CLAIM, label
from condenser_lite.reproduction.evidence.results import arm_seeds, gauge, gauge_defined
from condenser_lite.reproduction.statistics.rules import model_means
from condenser_lite.reproduction.claims.scorecard import claim_rows, scorecard
from condenser_lite.reproduction.statistics.wording import fixed, p_text


def full_size(results: Mapping) -> str:
    """The largest training size of a results file (its last ``train_sizes``), as its keys name it. Chapters 4-7."""
    return str(results["train_sizes"][-1])


def fmt(stat: Mapping | None, digits: int = 3) -> str:
    """``mean ± std`` of a ``rules.stats`` dict, each number by ``wording.fixed`` (``digits``
    decimals, never ``-0.000``), or an empty string. Chapters 4-8."""
    if not stat or stat.get("mean") is None:
        return ""
    # non-breaking spaces: a table cell that wraps keeps "0.123 ± 0.004" on one line
    return f"{fixed(stat['mean'], digits)}\u00a0±\u00a0{fixed(stat.get('std') or 0.0, digits)}"


def by_model(results: Mapping, arm: str, stat: Mapping) -> np.ndarray:
    """One number per pre-trained model of ``arm``: the runs of ``stat`` (a ``rules.stats`` dict,
    its ``values`` in the protocol's order: pre-training seed, then fine-tuning seed) averaged
    over fine-tuning seeds (``rules.model_means``), the unit chapter 8's tests compare. A stat
    without its runs gives its mean. Chapters 4-8."""
    values = stat.get("values") or [stat["mean"]]
    seeds = arm_seeds(results, arm) or [None]
    if len(values) % len(seeds):  # runs of the first pre-trained model only (a published checkpoint)
        seeds = [None]
    return np.asarray(model_means(values, seeds)["means"], dtype=float)


def by_model_rows(results: Mapping, arm: str, runs: Sequence[Sequence[float]]) -> np.ndarray:
    """``runs`` (one row per fine-tuning run, in the protocol's order, e.g. a loss curve or an
    entropy profile each) averaged per pre-trained model: one row per model. Chapters 5 and 6."""
    n = min(len(r) for r in runs)
    a = np.asarray([list(r)[:n] for r in runs], dtype=float)
    seeds = arm_seeds(results, arm) or [None]
    models = len(seeds) if len(a) % len(seeds) == 0 else 1
    return a.reshape(models, -1, n).mean(1)


def unit_stat(results: Mapping, arm: str, stat: Mapping) -> dict:
    """``{"mean", "std", "n"}`` of ``stat`` over ``arm``'s pre-trained models (``by_model``): the
    same mean as over every run, the spread of the unit the tests use. Chapters 4-8."""
    x = by_model(results, arm, stat)
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else 0.0, "n": len(x)}


# ---- tables ------------------------------------------------------------------------------


def retrieval_table(results: Mapping, metrics: Sequence[str] | None = None, digits: int = 3):
    """One row per arm, training size and round; one column per metric: the mean ± std over pre-trained models
    (``unit_stat``: fine-tuning seeds averaged first), with BM25 on top. Chapter 4."""
    import pandas as pd

    metrics = list(metrics or results["preset"]["metrics"])
    rows = []
    bm = results.get("bm25", {})
    for kind in ("full", "truncated"):
        if kind in bm:
            name = "BM25" if kind == "full" else f"BM25, first {bm.get('truncated_tokens')} tokens"
            rows.append({"model": name, "round": "", "train queries": "", **{m: f"{bm[kind][m]:.{digits}f}" for m in metrics}})
    for arm, rounds in results["retrieval"].items():
        for rnd, by_size in rounds.items():
            for size, ms in sorted(by_size.items(), key=lambda kv: int(kv[0])):
                rows.append({"model": label(arm), "round": rnd.replace("round", ""), "train queries": size,
                             **{m: fmt(unit_stat(results, arm, ms[m]), digits) if m in ms else "" for m in metrics}})
    return pd.DataFrame(rows).set_index(["model", "round", "train queries"])


def sts_table(results: Mapping, digits: int = 3):
    """STS-b test Spearman, mean ± std over pre-trained models (``unit_stat``), one row per arm,
    one column per training size. Chapter 7."""
    import pandas as pd

    rows = {label(arm): {size: fmt(unit_stat(results, arm, s), digits) for size, s in by_size.items()}
            for arm, by_size in results["sts"].items()}
    return pd.DataFrame(rows).T.rename_axis("model").rename_axis("training pairs", axis=1)


def compute_table(results: Mapping):
    """What each arm's pre-training cost: its own stage (steps, non-padding tokens, FLOPs estimate, CPU
    seconds) and, cumulative with the stages it continues, tokens, FLOPs and CPU seconds (``accounting``;
    first pre-training seed). CPU seconds, not wall seconds: the stages' wall time depends on what else ran on
    the machine (both are in the results). Chapter 4."""
    import pandas as pd

    rows = []
    for arm, entry in results["arms"].items():
        compute = entry.get("compute") or {}
        own, total = compute.get("stage"), compute.get("cumulative")
        if not own:
            continue
        rows.append({"model": label(arm), "steps": own["steps"],
                     "tokens (M)": round(own["tokens"] / 1e6, 2), "TFLOPs": round(own["flops"] / 1e12, 2),
                     "CPU s": round(own["cpu_seconds"]),
                     "total tokens (M)": round(total["tokens"] / 1e6, 2),
                     "total TFLOPs": round(total["flops"] / 1e12, 2),
                     "total CPU s": round(total["cpu_seconds"])})
    return pd.DataFrame(rows).set_index("model")


GAUGE_NAMES = {"mlm_loss": "held-out MLM loss", "head_loss": "head MLM loss", "cls_swap_gap": "[CLS]-swap gap",
               "cls_swap_noise": "its noise", "cls_reliance": "[CLS] reliance", "cls_cosine": "late [CLS] cosine"}


def gauge_table(results: Mapping, arms: Sequence[str], digits: int = 4):
    """The held-out gauges at the end of each arm's pre-training (``results.gauge``: the mean
    over its pre-training seeds), one column per arm, one row per gauge (``GAUGE_NAMES``), as
    text with ``digits`` decimals (never in exponent form, never "-0.0000"); "undefined on k of
    n seeds" where only some seeds define it (the reliance without a deficit); empty where an
    arm has no such gauge (BERT has no head). Chapters 2 and 3."""
    import pandas as pd

    def text(arm: str, key: str) -> str:
        value = gauge(results, arm, key)
        if value is not None:
            return fixed(value, digits)
        have, runs = gauge_defined(results, arm, key)
        return f"undefined on {runs - have} of {runs} seeds" if have else ""

    return pd.DataFrame({label(a): {name: text(a, key) for key, name in GAUGE_NAMES.items()} for a in arms}
                        ).rename_axis("end of pre-training")


SHORT_LABELS = {"BERT-continued, equal FLOPs": "equal-FLOPs control", "modified Condenser, [CLS] cut": "[CLS]-cut control"}


def model_range(per_seed: Mapping[str, float] | None) -> str:
    """What a test's pre-trained models found, in one short cell: the range of their differences
    and how many are above zero (``+0.003 to +0.021; 5 of 5 > 0``); "unpaired" where the test has
    no model-by-model differences. Each value is in the results file and the chapters' figures.
    Chapter 8."""
    if not per_seed:
        return "unpaired"
    d = list(per_seed.values())
    # the count kept on one line, so a narrow column does not break "5 of 5 > 0"
    return (f"{fixed(min(d), signed=True)} to {fixed(max(d), signed=True)}; "
            f"{sum(x > 0 for x in d)}\u00a0of\u00a0{len(d)}\u00a0>\u00a00")


def claim_table(results: Mapping, ids: Sequence[str]):
    """The comparisons behind the claims ``ids`` as one table (``scorecard.claim_rows``): per claim and
    setting the two models with our numbers, the verdict, and the difference: under rules version 2 the
    mean's with the one-sided test's p (the reverse test's where the call is "worse") and the
    pre-trained models' range (``model_range``), under version 1 the mean's with its spread; the
    pre-registered claims also the smallest difference the run could detect and the paper's effect
    at our scale. Chapters 4, 6, 7 and 8 show their claims with it."""
    import pandas as pd

    claims = {c["id"]: c for c in results.get("claims") or scorecard(results)}
    # a registered claim this run does not make (C1m without a modified Condenser) is left out;
    # an id the book does not know, or one id passed as a bare string, is a mistake
    unknown = [cid for cid in ids if cid not in CLAIM] if not isinstance(ids, str) else [ids]
    if unknown:
        raise ValueError(f"claim_table(ids={ids!r}): {unknown} not among the book's claims {sorted(CLAIM)}; "
                         "pass a list of them, e.g. ['C1', 'C2']")
    from condenser_lite.reproduction.claims.checks import recall_metric
    from condenser_lite.reproduction.claims.multiplicity import decides
    from condenser_lite.reproduction.claims.scorecard import comparison_paths

    recall = recall_metric(results)
    rows = []
    for cid in (i for i in ids if i in claims):
        found = comparison_paths(claims[cid].get("ours", {}))
        for (path, c), r in zip(found, claim_rows(claims[cid])):
            if "p (one-sided)" in r and not decides(cid, path, recall):  # beside the verdict, not behind it
                r = {**r, "verdict": f"{r['verdict']} (not judged)"}
            # a call the other way shows the p of the test it rests on, the reverse one
            turned = c["verdict"] in ("worse", "reversed") and c.get("p_reversed") is not None
            rows.append({"claim": cid, **r, "each model": model_range(c.get("per_seed")),
                         "p shown": "reverse " + p_text(c["p_reversed"]) if turned else p_text(c.get("p"))})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    # four narrow columns, so the table fits the page: who with which number, the verdict, the
    # difference with its spread, and (pre-registered claims) what the run could detect beside
    # the paper's effect at our scale; a dash where a claim has no power analysis (C2-C6)
    if "p (one-sided)" in table:  # rules version 2: each pre-trained model's difference, the test's p
        table["difference (p)"] = ["{} ({})".format(fixed(d, signed=True), p.replace(" ", "\u00a0"))
                                   for d, p in zip(table["difference"], table["p shown"])]
    else:
        table["difference (spread)"] = [f"{fixed(d, signed=True)} ({s:.3f})"
                                        for d, s in zip(table["difference"], table["spread"])]
    if "detectable" in table:
        table["detectable / paper's"] = [
            "–" if pd.isna(m) else f"{m:.3f} / " + ("–" if pd.isna(e) else f"{e:.3f}")
            for m, e in zip(table["detectable"], table["paper's effect here"])]
    # short names, and (rules version 2) the verdict and the test's p first, so they show at the
    # column's width without scrolling; each pre-trained model's difference comes last
    for long, short in (*SHORT_LABELS.items(), ("training queries", "queries"), ("training pairs", "pairs"),
                        (": the gain", ": gain"), (": against the control", ": vs a control"),
                        (": the control's own gain", ": control's gain")):
        table["setting"] = table["setting"].str.replace(long, short, regex=False)
        table["compared"] = table["compared"].str.replace(long, short, regex=False)
    cols = (["claim", "setting", "verdict", "difference (p)", "compared"] if "difference (p)" in table else
            ["claim", "setting", "compared", "verdict", "difference (spread)"])
    cols += ["detectable / paper's", *(["each model"] if "difference (p)" in table else [])]
    return table[[c for c in cols if c in table]].set_index(["claim", "setting"])


def scorecard_table(results: Mapping):
    """The claims (C0-C8, and C0m, C1m, C7m where a run has a modified Condenser) in plain words, one row
    each: ``claim`` (a short name), ``statement`` (what exactly is tested), ``models`` compared (a list),
    ``this run`` (the comparison, a sentence with our numbers), ``papers`` (their numbers) and ``verdict``.
    Chapter 8."""
    import pandas as pd

    claims = results.get("claims") or scorecard(results)
    rows = [{"id": c["id"], "claim": CLAIM[c["id"]].title if c["id"] in CLAIM else c["statement"],
             "statement": c["statement"], "models": list(c["arms"]), "this run": c["comparison"],
             "papers": c["paper"], "verdict": c["verdict"]} for c in claims]
    return pd.DataFrame(rows).set_index("id")


def _lines(text: str, seen: set[str]) -> str:
    # one comparison (or one published source) per line: the claims join them with "; ", which
    # also appears inside a source's parentheses ("(MS MARCO dev; MRR@10 / R@1000)"); codes in
    # words or linked to the glossary (from a chapter's page) at their first use in ``seen``
    from html import escape

    from condenser_lite.reproduction.claims.claims_table import glossed

    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    return "<br>".join(glossed(escape(part), seen, "../glossary.html") for part in [*parts, text[start:]])


def scorecard_html(results: Mapping) -> str:
    """The scorecard as a compact HTML table for the book (class ``scorecard``): per claim its name, the
    models compared and the verdict; the claim's exact statement, this run's numbers and the papers' fold out
    beneath its name, so the table stays narrow and the numbers are one click away. Chapter 8."""
    from html import escape

    from condenser_lite.reproduction.claims.claims_table import headline_rows, verdict_text

    table = scorecard_table(results)
    # the verdict as every findings table says it (its weak mark, "not detected", "the other
    # way", what BH makes of it), where the claim has a row there
    judged = results.get("claims") and all("ours" in c for c in results["claims"])  # a run's, not a sketch's
    said = {r["id"]: verdict_text(r) for r in headline_rows(results)} if judged else {}
    head = "".join(f"<th>{escape(h)}</th>" for h in ("Claim", "Models", "Verdict"))
    rows, seen = [], set()
    for cid, row in table.iterrows():
        claim = (f"<details><summary><b>{escape(cid)}</b> {escape(row['claim'])}</summary>"
                 f"<p>{escape(row['statement'])}</p><p><b>This run:</b><br>{_lines(row['this run'], seen)}</p>"
                 f"<p><b>Papers:</b><br>{_lines(row['papers'], seen)}</p></details>")
        verdict = said.get(cid, row["verdict"])
        css = "verdict-" + ("yes" if verdict.startswith("reproduced") else "partly" if verdict.startswith("partly") else
                            "no" if verdict.startswith("not reproduced") else "other")
        cells = [claim, ", ".join(escape(m) for m in row["models"]), f'<span class="{css}">{escape(verdict)}</span>']
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<table class="scorecard"><thead><tr>{head}</tr></thead><tbody>' + "".join(rows)
            + "</tbody></table>")

