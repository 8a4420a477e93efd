"""coCondenser's training step, with the exact gradient cache (Gao & Callan 2022, section 3.3).

The batch loss (eq. 7/8) of ``n`` documents' ``2n`` spans is

    L = mlm_weight * L_mlm + co_weight * (1/2n) sum_ij L^co_ij

with ``L^co_ij`` the span contrastive loss (eq. 6, ``losses.span_contrastive_loss``) and ``L_mlm``
the Condenser MLM loss of the whole batch (head MLM + backbone MLM, each a mean over all masked
tokens of the batch, exactly what ``Condenser.forward`` returns for the full batch). With both
weights 1 this is eq. 7 read the way the authors' code computes it. Taken literally, eq. 5 makes a
span's MLM loss a *sum* over its masked tokens, so ``(1/2n) sum_ij L^mlm_ij`` would be the token
mean times the average number of masked tokens per span (about 19 for 128-token spans); the code
uses the mean over all masked tokens of the batch, and so do we. The contrastive term is the mean
over the ``2n`` spans. The loss is the same number with and without the cache (the authors' code
doubles the MLM weight when its cache is on; we do not copy that quirk).

The contrastive loss ties every span to every other span, so its gradient normally needs the
whole batch's activations in memory at once. The gradient cache (eq. 9-12) splits the work:

1. pass 1, no grad: encode the batch chunk by chunk, keeping only the late CLS vectors ``h``;
   compute ``L^co`` on them and its gradient ``v = dL^co/dh`` (eq. 9), the *cache*;
2. pass 2, per chunk: re-encode with grad and back-propagate the surrogate ``<h, v>`` plus the
   chunk's share of the MLM loss (eq. 12). The parameter gradients add up over chunks to exactly
   ``dL/dtheta`` (eq. 10-11), while only one chunk's activations live at a time.

Two details make it *exact*. Dropout: pass 2 must see the same random masks as pass 1, so each
chunk's RNG state is recorded before its pass-1 forward and replayed in pass 2 (``RandContext``,
CPU *and* CUDA states). MLM: ``Condenser`` returns a token mean over *its* input, so a chunk's
MLM loss is weighted by (masked tokens in the chunk) / (masked tokens in the batch); the weighted
sum over chunks is then the full-batch token mean. (Weighting chunks equally would over-weight
chunks with few masked tokens, and a chunk size that does not divide the batch would weight its
last, smaller chunk wrongly.)

The two passes are one primitive, ``gradient_cache``, for any loss of the representations: the
coCondenser step (``cocondenser_step``) and the retrieval fine-tuning step
(``biencoder.retrieval_step``, GC-DPR) both run it.

Explained on page 3b, ``notebooks/03_gradient_cache.ipynb``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..utils import devices
from ..utils.devices import is_xla
from ..utils.distributed import all_reduce_sum, check_same_size, gather_with_grad, step_hooks, world_info
from .losses import span_contrastive_accuracy, span_contrastive_loss

__all__ = ["RandContext", "gradient_cache", "cocondenser_step"]


class RandContext:
    """Records the RNG state at construction and replays it inside ``with ctx:``.

    Captures the CPU generator, every CUDA device's generator (when CUDA is available) and, when
    ``device`` is an XLA device (TPU), that device's random state (``devices.xla``); on entry it
    forks the RNG (like ``torch.random.fork_rng``), loads the recorded states, and on exit
    restores what was there before, so replaying does not disturb later randomness. Used so that
    dropout draws the same masks in the gradient cache's two passes. (Restoring only the CPU state,
    a pitfall seen upstream, leaves GPU dropout masks different and the "cached" gradient wrong;
    on a TPU dropout draws from the XLA state, so it is replayed too.)
    Other generators (Python's ``random``, numpy, MPS) are not captured.
    Explained on page 3b, ``notebooks/03_gradient_cache.ipynb``.
    """

    def __init__(self, device: Any = None) -> None:
        self.cpu_state = torch.get_rng_state()
        self.cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
        self.xla_device = device if is_xla(device) else None
        self.xla_state = devices.xla.get_rng_state(device) if self.xla_device is not None else None
        self._fork: contextlib.AbstractContextManager | None = None
        self._xla_before: int | None = None

    def __enter__(self) -> "RandContext":
        self._fork = torch.random.fork_rng(devices=list(range(len(self.cuda_states))))
        self._fork.__enter__()
        torch.set_rng_state(self.cpu_state)
        if self.cuda_states:
            torch.cuda.set_rng_state_all(self.cuda_states)
        if self.xla_device is not None:
            self._xla_before = devices.xla.get_rng_state(self.xla_device)
            devices.xla.set_rng_state(self.xla_state, self.xla_device)
        return self

    def __exit__(self, *exc) -> None:
        assert self._fork is not None
        self._fork.__exit__(*exc)
        self._fork = None
        if self.xla_device is not None:
            devices.xla.set_rng_state(self._xla_before, self.xla_device)


def gradient_cache(
    chunks: Sequence[Any],
    forward: Callable[[Any, bool], tuple[torch.Tensor, torch.Tensor | None]],
    loss_fn: Callable[[list[torch.Tensor]], torch.Tensor],
    backward: Callable[[torch.Tensor], Any] | None = None,
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    replay_rng: bool = True,
    device: Any = None,
) -> torch.Tensor:
    """The exact gradient cache (coCondenser eq. 9-12) for any loss of per-chunk representations.

    ``forward(chunk, with_grad)`` encodes one chunk and returns ``(reps, extra)``: its float
    representations and, in pass 2 (``with_grad=True``), an optional loss term of the chunk alone
    (coCondenser's share of the MLM loss) that is back-propagated with it. ``loss_fn(reps)`` gets
    one leaf tensor per chunk and returns the scalar whose gradient is cached.

    Pass 1 encodes every chunk without a graph, recording its RNG state (``RandContext``); the
    loss and its gradient ``v`` with respect to each chunk's representations are computed on the
    detached vectors (eq. 9). Pass 2 re-encodes each chunk with grad under the recorded RNG state
    (same dropout masks) and back-propagates ``<reps, v> + extra`` (eq. 12); all but the last
    backward run under ``no_sync()`` so DDP all-reduces once. Returns the loss (detached).
    ``replay_rng=False`` skips the replay: only to show that dropout then breaks exactness.
    ``device``: where the model runs; on an XLA device (TPU) its random state is replayed too.
    Explained on page 3b, ``notebooks/03_gradient_cache.ipynb``.
    """
    backward = backward or (lambda loss: loss.backward())
    states, reps = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RandContext(device))
            reps.append(forward(chunk, False)[0])
    leaves = [r.detach().requires_grad_() for r in reps]
    loss = loss_fn(leaves)
    cache = torch.autograd.grad(loss, leaves)
    for i, (chunk, state, v) in enumerate(zip(chunks, states, cache)):
        last = i == len(chunks) - 1
        with contextlib.nullcontext() if last else no_sync():
            with state if replay_rng else contextlib.nullcontext():
                rep, extra = forward(chunk, True)
            surrogate = (rep * v).sum()
            backward(surrogate if extra is None else surrogate + extra)
    return loss.detach()


def _forward(model: torch.nn.Module, chunk: dict[str, torch.Tensor], with_labels: bool, autocast) -> Any:
    labels = chunk.get("labels") if with_labels else None
    if labels is not None and not bool((labels != -100).any()):
        labels = None  # a chunk without masked tokens has no MLM loss (its share is 0), only CLS vectors
    with autocast():
        return model(input_ids=chunk["input_ids"], attention_mask=chunk.get("attention_mask"), labels=labels)


def cocondenser_step(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    accelerator: Any = None,
    chunk_size: int | None = None,
    mlm_weight: float = 1.0,
    co_weight: float = 1.0,
    temperature: float | None = None,
    replay_rng: bool = True,
) -> dict[str, float]:
    """Forward + backward of coCondenser's loss for one batch; returns float metrics.

    ``batch``: ``input_ids``, ``attention_mask``, ``labels`` (-100 = not masked) for ``2n`` spans,
    partners adjacent (``SpanPairCollator``). ``model(input_ids=, attention_mask=, labels=)`` returns
    an object with ``.cls`` (late CLS, ``[B, H]``) and ``.loss`` (token-mean MLM), e.g. ``Condenser``.
    Gradients are *accumulated* into ``.grad``; the caller steps and zeroes the optimiser, so this
    is a ``step_fn`` for ``loop.train`` via ``functools.partial(cocondenser_step, chunk_size=32)``.

    Loss (eq. 7/8): ``L = mlm_weight * L_mlm + co_weight * mean_ij L^co_ij`` (module docstring).

    * ``chunk_size=None`` (or >= batch size): one forward and one backward of ``L``.
    * otherwise the gradient cache (eq. 9-12) with chunks of ``chunk_size`` sequences (a chunk may
      split a partner pair and need not divide the batch): same loss and, up to float rounding, same
      gradient, with activation memory of one chunk. ``replay_rng=False`` skips the RNG replay (for
      demonstrating that dropout then breaks exactness; never useful in training).

    ``accelerator`` (an ``accelerate.Accelerator``, optional): each forward runs in its ``autocast()``
    (mixed precision per forward, never around the whole procedure), backward goes through
    ``accelerator.backward`` (loss scaling), and all but the last chunk's backward run under
    ``accelerator.no_sync`` so DDP all-reduces gradients once. Losses are computed on float32 CLS.

    Distributed (``torch.distributed`` initialised, ``world`` processes, each holding ``2n/world``
    spans of the global batch, the model wrapped in DDP, which *averages* gradients): the CLS
    vectors of all processes are gathered, so every span has all ``2n - 2`` global negatives, and
    each process computes the *global* contrastive mean with gradient flowing into its own slice
    only; summed over processes those slice gradients are the full gradient. Likewise each process
    weights its MLM by its masked tokens / all masked tokens. Each process then back-propagates
    ``world *`` that loss, because DDP divides the summed gradients by ``world``: the averaged
    gradient equals the one-process gradient of the same global batch (the authors' "multiply by
    world size"). Returned metrics are global values, identical on every process.

    Returns ``{"loss", "mlm_loss", "co_loss", "co_acc"}`` (+ ``"head_loss"``/``"late_loss"`` when the
    model reports them).
    Explained in chapter 3 (the loss) and on page 3b (the chunks), ``notebooks/03_gradient_cache.ipynb``.
    """
    n_rows = _check_span_batch(batch, chunk_size)
    device = batch["input_ids"].device
    world, _ = world_info()
    check_same_size(n_rows, device)

    hooks = step_hooks(model, accelerator)  # autocast, backward, no_sync
    n_masked_total = _masked_total(batch, device)
    loss = _SpanBatchLoss(mlm_weight, co_weight, temperature, world,
                          n_masked_total if batch.get("labels") is not None else None, device)
    if chunk_size is None or chunk_size >= n_rows:
        mlm, parts, co_value, co_acc = _whole_batch_step(model, batch, hooks, loss)
    else:
        chunks = [
            {k: v[s : s + chunk_size] for k, v in batch.items() if torch.is_tensor(v)}
            for s in range(0, n_rows, chunk_size)
        ]
        mlm, parts, co_value, co_acc = _cached_step(model, chunks, hooks, loss, replay_rng)
    return _global_metrics(mlm, parts, co_value, co_acc, mlm_weight, co_weight, device)


@dataclass
class _SpanBatchLoss:
    """The batch loss (eq. 7/8) in the pieces one process computes: a forward piece's share of the
    MLM term and the contrastive term over every process's spans. ``world`` scales what is
    back-propagated, because DDP divides the summed gradients by it. ``n_masked_total``: the masked
    tokens of the global batch, None where the batch has no labels (no MLM term)."""

    mlm_weight: float
    co_weight: float
    temperature: float | None
    world: int
    n_masked_total: torch.Tensor | None
    device: torch.device

    def mlm_share(self, chunk: dict[str, torch.Tensor], out: Any) -> tuple[torch.Tensor, dict[str, float]]:
        return _mlm_share(chunk, out, self.n_masked_total, self.device)

    def contrastive(self, reps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every process's spans (the gradient flowing into this process's rows only) and ``L^co``
        over them (eq. 6)."""
        all_reps = gather_with_grad(reps)
        return all_reps, span_contrastive_loss(all_reps, temperature=self.temperature)


def _whole_batch_step(model: torch.nn.Module, batch: dict[str, torch.Tensor], hooks: tuple,
                      loss: _SpanBatchLoss) -> tuple[float, dict[str, float], float, float]:
    """One forward and one backward of ``L`` over the whole batch, without the cache: this
    process's MLM share, its parts, ``L^co`` and the contrastive accuracy."""
    autocast, backward, _ = hooks
    out = _forward(model, batch, loss.n_masked_total is not None, autocast)
    all_reps, co_loss = loss.contrastive(out.cls.float())
    mlm, parts = loss.mlm_share(batch, out)
    backward(loss.world * (loss.mlm_weight * mlm + loss.co_weight * co_loss))
    return float(mlm.detach()), parts, float(co_loss.detach()), span_contrastive_accuracy(all_reps.detach())


def _cached_step(model: torch.nn.Module, chunks: list[dict[str, torch.Tensor]], hooks: tuple,
                 loss: _SpanBatchLoss, replay_rng: bool) -> tuple[float, dict[str, float], float, float]:
    """The gradient cache (eq. 9-12) over ``chunks``: pass 1 keeps each chunk's CLS vectors, the
    cache is the gradient of ``L^co`` with respect to them, pass 2 re-encodes each chunk and
    back-propagates it with the chunk's share of the MLM loss. Returns what ``_whole_batch_step``
    returns, the same numbers up to float rounding."""
    autocast, backward, no_sync = hooks
    mlm_sum, parts_sum = 0.0, {}
    all_reps = co_loss = torch.empty(0)

    def forward(chunk: dict[str, torch.Tensor], with_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        nonlocal mlm_sum
        # pass 1 needs only the CLS vectors; pass 2 adds the chunk's share of the MLM loss
        out = _forward(model, chunk, loss.n_masked_total is not None and with_grad, autocast)
        if not with_grad:
            return out.cls.float(), None
        mlm, parts = loss.mlm_share(chunk, out)
        mlm_sum += float(mlm.detach())
        for k, val in parts.items():
            parts_sum[k] = parts_sum.get(k, 0.0) + val
        return out.cls.float(), loss.world * loss.mlm_weight * mlm

    def co_term(reps: list[torch.Tensor]) -> torch.Tensor:
        nonlocal all_reps, co_loss
        # the cached v is d(world * co_weight * L^co)/dh (eq. 9; why world: _SpanBatchLoss)
        all_reps, co_loss = loss.contrastive(torch.cat(reps))
        return loss.world * loss.co_weight * co_loss

    gradient_cache(chunks, forward, co_term, backward, no_sync, replay_rng, device=loss.device)
    return mlm_sum, parts_sum, float(co_loss.detach()), span_contrastive_accuracy(all_reps.detach())


def _check_span_batch(batch: dict[str, torch.Tensor], chunk_size: int | None) -> int:
    """The number of rows of a coCondenser batch, refused unless it holds span pairs."""
    if "input_ids" not in batch:
        raise ValueError(f"batch has no 'input_ids' (keys: {sorted(batch)}); build it with SpanPairCollator")
    n_rows = batch["input_ids"].shape[0]
    if n_rows % 2 or n_rows < 2:
        raise ValueError(
            f"a coCondenser batch holds span pairs (rows 2i, 2i+1), so its size must be even and >= 2, got {n_rows}; "
            "build it with SpanPairCollator"
        )
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 (or None for no gradient cache), got {chunk_size}")
    return n_rows


def _masked_total(batch: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """Masked tokens in the whole (global) batch: what each forward piece's MLM loss is weighted
    against (zero without labels)."""
    labels = batch.get("labels")
    if labels is None:
        return torch.zeros((), device=device)
    n_masked_total = all_reduce_sum((labels != -100).sum())
    if int(n_masked_total) == 0:
        raise ValueError("labels mask no token in the whole batch; build batches with an MLM collator")
    return n_masked_total


def _mlm_share(chunk: dict[str, torch.Tensor], out: Any, n_masked_total: torch.Tensor | None,
               device: torch.device) -> tuple[torch.Tensor, dict[str, float]]:
    """A piece's share of the batch-level token-mean MLM loss (0 without labels or masked tokens),
    and its shares of the head's and the backbone's losses, for the metrics."""
    if n_masked_total is None or out.loss is None:
        return torch.zeros((), device=device), {}
    frac = (chunk["labels"] != -100).sum() / n_masked_total
    parts = {k: float(getattr(out, k).detach()) * float(frac) for k in ("head_loss", "late_loss")
             if getattr(out, k, None) is not None}
    return out.loss.float() * frac, parts


def _global_metrics(mlm: float, parts: dict[str, float], co_value: float, co_acc: float, mlm_weight: float,
                    co_weight: float, device: torch.device) -> dict[str, float]:
    """The step's metrics over every process: the MLM shares summed (the contrastive loss is
    already global)."""
    local = torch.tensor([mlm] + [parts.get(k, 0.0) for k in ("head_loss", "late_loss")],
                         dtype=torch.float32, device=device)
    mlm_value, head_value, late_value = (float(x) for x in all_reduce_sum(local))
    metrics = {"loss": mlm_weight * mlm_value + co_weight * co_value, "mlm_loss": mlm_value,
               "co_loss": co_value, "co_acc": co_acc}
    if "head_loss" in parts:
        metrics["head_loss"] = head_value
    if "late_loss" in parts:
        metrics["late_loss"] = late_value
    return metrics
