"""Shared helpers for the gradient-cache tests, and the worker process of tests/test_distributed.py.

As a script: ``python tests/_dist_worker.py OUT_DIR CHUNKS`` (e.g. ``none,4``) with the usual torch.distributed
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) runs one coCondenser step on this rank's
half of the global batch with a DDP-wrapped model (gloo, CPU) and saves the averaged gradients and
the metrics to ``OUT_DIR/rank{RANK}_{CHUNK}.pt``, for each chunk size in turn.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from condenser_lite.modeling.condenser import Condenser  # noqa: E402
from condenser_lite.training.pretraining_config import ModelConfig  # noqa: E402

VOCAB = 64
SEQ_LEN = 16


def build_model(seed: int = 0, dropout: float = 0.1) -> Condenser:
    """A very small Condenser (2 backbone layers, 1 head layer) with dropout ``dropout``."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_len=SEQ_LEN, dropout=dropout).bert_config()
    model = Condenser.from_config(cfg, skip_from=1, n_head_layers=1)
    model.train()
    return model


def make_batch(n_rows: int = 12, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random span batch: CLS=1 ... SEP=2 then padding, ~15% masked (>= 1 per row), uneven lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(n_rows, SEQ_LEN, dtype=torch.long)
    mask = torch.zeros(n_rows, SEQ_LEN, dtype=torch.long)
    labels = torch.full((n_rows, SEQ_LEN), -100, dtype=torch.long)
    for r in range(n_rows):
        n = int(torch.randint(6, SEQ_LEN + 1, (1,), generator=g))
        body = torch.randint(5, VOCAB, (n - 2,), generator=g)
        ids[r, :n] = torch.cat([torch.tensor([1]), body, torch.tensor([2])])
        mask[r, :n] = 1
        chosen = torch.rand(n - 2, generator=g) < 0.15
        chosen[int(torch.randint(0, n - 2, (1,), generator=g))] = True
        pos = torch.nonzero(chosen).flatten() + 1
        labels[r, pos] = ids[r, pos]
        ids[r, pos] = 3  # [MASK]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def brute_force_co_loss(reps: torch.Tensor) -> torch.Tensor:
    """coCondenser eq. 6 averaged over spans, one term at a time (independent of losses.py)."""
    n = reps.shape[0]
    terms = []
    for r in range(n):
        partner = r + 1 if r % 2 == 0 else r - 1
        others = [k for k in range(n) if k != r]
        denom = torch.logsumexp(torch.stack([reps[r] @ reps[k] for k in others]), dim=0)
        terms.append(denom - reps[r] @ reps[partner])
    return torch.stack(terms).mean()


def reference_step(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    segments: list[tuple[int, list[slice]]],
    mlm_weight: float = 1.0,
    co_weight: float = 1.0,
    autocast=contextlib.nullcontext,
) -> float:
    """The full-batch loss through ONE autograd graph and ONE backward, under the dropout masks
    ``cocondenser_step`` draws: each segment is (seed, chunk slices) -- one per process -- and, as in
    the cache's first pass, every chunk's RNG state is the one left by a no-grad, labels-free forward
    of the previous chunks. Gradients accumulate into the model; returns the loss value."""
    states, order = [], []
    for seed, slices in segments:
        torch.manual_seed(seed)
        with torch.no_grad():
            for s in slices:
                states.append(torch.get_rng_state())
                order.append(s)
                with autocast():
                    model(input_ids=batch["input_ids"][s], attention_mask=batch["attention_mask"][s])
    n_masked = (batch["labels"] != -100).sum()
    reps, mlm = [], 0.0
    for state, s in zip(states, order):
        torch.set_rng_state(state)
        with autocast():
            out = model(input_ids=batch["input_ids"][s], attention_mask=batch["attention_mask"][s],
                        labels=batch["labels"][s])
        reps.append(out.cls.float())
        mlm = mlm + out.loss.float() * (batch["labels"][s] != -100).sum() / n_masked
    loss = mlm_weight * mlm + co_weight * brute_force_co_loss(torch.cat(reps))
    loss.backward()
    return float(loss.detach())


def chunk_slices(start: int, stop: int, chunk_size: int | None) -> list[slice]:
    if chunk_size is None or chunk_size >= stop - start:
        return [slice(start, stop)]
    return [slice(s, min(s + chunk_size, stop)) for s in range(start, stop, chunk_size)]


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference over all parameters, relative to the largest entry of ``b``
    (raw dot-product scores give gradients of order 10 here, so fp32 rounding is ~1e-6 of that)."""
    assert a.keys() == b.keys(), set(a) ^ set(b)
    scale = max(float(v.abs().max()) for v in b.values())
    return max(float((a[k] - b[k]).abs().max()) for k in a) / scale


def main() -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from condenser_lite.modeling.gradcache import cocondenser_step

    out_dir, chunks = Path(sys.argv[1]), sys.argv[2].split(",")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = make_batch()
    per = batch["input_ids"].shape[0] // world
    local = {k: v[rank * per : (rank + 1) * per] for k, v in batch.items()}
    for chunk in chunks:  # one process group, several settings: process start-up dominates the time
        model = DDP(build_model())
        torch.manual_seed(100 + rank)  # each process draws its own dropout masks
        metrics = cocondenser_step(model, local, chunk_size=None if chunk == "none" else int(chunk))
        torch.save({"grads": grads(model.module), "metrics": metrics}, out_dir / f"rank{rank}_{chunk}.pt")
        del model  # DDP's reducer holds the process group: free it while the group is still alive
    # No rank tears the group down while the other still uses it: without these two lines the
    # second rank hung at exit about once in ten runs (gloo, after its peer had gone).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
