"""Compute accounting: what each pre-training stage and arm cost, in tokens, steps, FLOPs and CPU seconds.

The arms of the protocol take *equal steps* of the same batch size on the same data order, which
is not equal compute: a Condenser step also runs the head and a second MLM output layer, and a
coCondenser step reads two spans per document (and, with the gradient cache, encodes them twice).
Each stage logs, per step, what its batches held (``tokens``: non-padding tokens; ``positions``:
rows x padded length, what the layers compute on; ``pairs``: rows x padded length squared, what
attention computes on; ``masked``: masked tokens, where the MLM output layer runs); this module
turns those counts into a FLOPs estimate (:func:`stage_flops`), totals per stage
(:func:`stage_compute`) and totals per arm including the stages it continues
(:func:`cumulative`). Explained in chapter 4, ``notebooks/04_finetune.ipynb`` ("Cost").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

COUNTS = ("tokens", "positions", "pairs", "masked")  # per-step batch counts a stage logs
ADDITIVE = ("steps", "sequences", *COUNTS, "flops", "cpu_seconds", "wall_seconds")


def layer_params(hidden_size: int, intermediate_size: int) -> int:
    """Weights of one transformer layer that multiply every position: Q, K, V, O (4 d^2) and the
    feed-forward pair (2 d f); biases and LayerNorms are left out (a rounding error). Chapter 4."""
    return 4 * hidden_size**2 + 2 * hidden_size * intermediate_size


def layer_flops(hidden_size: int, intermediate_size: int, positions: float, pairs: float) -> float:
    """Forward FLOPs of one transformer layer over ``positions`` (rows x padded length) with
    attention over ``pairs`` (rows x length^2): 2 per weight per position, plus attention's two
    T x T products, 4 d per pair. Chapter 4."""
    return 2 * layer_params(hidden_size, intermediate_size) * positions + 4 * hidden_size * pairs


def forward_flops(shape: Mapping, rows: int, length: int) -> float:
    """Forward FLOPs of the encoder's ``num_hidden_layers`` on ``rows`` sequences padded to
    ``length`` tokens (encoding, or a fine-tuning step's forward pass). Chapter 4."""
    layers = int(shape["num_hidden_layers"])
    return float(layers * layer_flops(int(shape["hidden_size"]), int(shape["intermediate_size"]),
                                      rows * length, rows * length**2))


def stage_flops(method: str, shape: Mapping, counts: Mapping, grad_cache_passes: int = 0) -> float:
    """Training FLOPs of a stage (forward + backward) from its batch ``counts`` (``COUNTS``,
    summed over steps) and the model ``shape`` (``num_hidden_layers`` L, ``hidden_size`` d,
    ``intermediate_size`` f, ``vocab_size`` V, and for a Condenser ``n_head_layers`` h).

    A forward pass costs 2 FLOPs per weight per position it touches, plus attention's two
    T x T products (4 d T^2 per row and layer); the backward pass about twice the forward, so

        FLOPs ~ 3 x [ (L + h + c) x (2 (4d^2 + 2df) x positions + 4 d x pairs)
                      + 2 (d^2 + dV) x (masked + m_head) ]
                + g x L x (2 (4d^2 + 2df) x positions + 4 d x pairs)

    with h = c = m_head = 0 for plain MLM; for ``condenser`` and ``cocondenser`` h =
    ``n_head_layers`` and m_head the masked tokens of the head's MLM loss (both losses go through
    the shared output layer, d^2 transform + dV decoder, at masked positions only): the same
    tokens as the late loss (``counts["head_masked"]`` absent), or those of the head's own, more
    heavily masked copy of the block (the modified Condenser), whose early layers then run
    too: c = ``shape["head_copy_layers"]`` (its ``skip_from``). g = ``grad_cache_passes``: the
    gradient cache's extra forward pass without gradients (coCondenser eq. 10), 1 when it is on.
    The embedding lookup and the contrastive loss ((2n)^2 d per step) are negligible and left
    out. Explained in chapter 4.
    """
    d, f, L, V = (int(shape[k]) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"))
    h = int(shape.get("n_head_layers", 0)) if method != "mlm" else 0
    c = int(shape.get("head_copy_layers", 0)) if method != "mlm" else 0
    head_masked = 0 if method == "mlm" else counts.get("head_masked", counts["masked"])
    per_layer = layer_flops(d, f, counts["positions"], counts["pairs"])
    outputs = 2 * (d * d + d * V) * (counts["masked"] + head_masked)
    return float(3 * ((L + h + c) * per_layer + outputs) + grad_cache_passes * L * per_layer)


def stage_compute(log: Iterable[Mapping], method: str, shape: Mapping, sequences_per_step: int,
                  grad_cache: bool = False, wall_seconds: float | None = None) -> dict:
    """A stage's totals from its training log (``loop.train``'s records, which carry the
    per-step ``COUNTS`` and the cumulative training ``cpu`` seconds): ``steps``, ``sequences``
    (``sequences_per_step`` per step: blocks for MLM/Condenser, 2 spans per document for
    coCondenser), the ``COUNTS``, ``flops`` (:func:`stage_flops`), ``cpu_seconds`` (process CPU
    time in training steps, all threads, evaluation excluded) and ``wall_seconds``. A log line may
    average several steps (``log_every``); its counts are weighted by the steps it covers.
    Explained in chapter 4."""
    totals = dict.fromkeys(COUNTS, 0.0)
    head_masked = 0.0  # the head's own masked copy, where the stage logs one
    steps, cpu = 0, 0.0
    for rec in log:
        if "tokens" not in rec:
            raise ValueError(f"log line of step {rec.get('step')} has no batch counts ({', '.join(COUNTS)}); "
                             "it comes from a stage run before compute accounting: re-run the stage")
        covered = rec["step"] - steps
        for k in COUNTS:
            totals[k] += rec[k] * covered
        head_masked += rec.get("head_masked", rec["masked"]) * covered
        steps, cpu = rec["step"], rec.get("cpu", cpu)
    out = {"steps": steps, "sequences": steps * sequences_per_step, **{k: int(round(v)) for k, v in totals.items()}}
    if any("head_masked" in rec for rec in log):
        totals["head_masked"] = out["head_masked"] = int(round(head_masked))
    out["flops"] = stage_flops(method, shape, totals, grad_cache_passes=1 if grad_cache else 0)
    out["cpu_seconds"] = round(cpu, 2)
    out["wall_seconds"] = None if wall_seconds is None else round(wall_seconds, 2)
    return out


def cumulative(stages: Iterable[Mapping | None]) -> dict | None:
    """The sum of several stages' ``stage_compute`` totals (an arm and the stages it continues);
    None when any stage is unknown (a published checkpoint). Explained in chapter 4."""
    stages = list(stages)
    if not stages or any(s is None for s in stages):
        return None
    out = {}
    for k in ADDITIVE:
        values = [s.get(k) for s in stages]
        out[k] = None if any(v is None for v in values) else round(sum(values), 2)
    return out
