"""Two processes with half the batch each give the one-process gradient of the whole batch.

Launches ``tests/_dist_worker.py`` twice (gloo on CPU, DDP-wrapped Condenser, dropout on): each
rank gathers the other's CLS vectors, scales its loss by the world size and lets DDP average the
gradients. The reference is one process, one graph, one backward over the global batch under the
same dropout masks (rank r's masks come from seed 100 + r). Deselect with ``-m "not distributed"``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _dist_worker import build_model, chunk_slices, grads, make_batch, max_grad_diff, reference_step

WORKER = Path(__file__).with_name("_dist_worker.py")
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHUNKS = ["none", "4"]  # plain step, and the gradient cache with a chunk that splits each rank's 6 rows 4 + 2


def launch(tmp_path: Path) -> dict[str, list[dict]]:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(WORLD),
               OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(tmp_path), ",".join(CHUNKS)],
                         env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(WORLD)
    ]
    try:
        logs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r][-3000:]}"
    return {c: [torch.load(tmp_path / f"rank{r}_{c}.pt", weights_only=True) for r in range(WORLD)] for c in CHUNKS}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return launch(tmp_path_factory.mktemp("dist"))


@pytest.mark.protocol  # starts two processes (about 15 s)
@pytest.mark.distributed
@pytest.mark.parametrize("chunk", CHUNKS)
def test_two_processes_match_one_process_full_batch(results, chunk):
    chunk_size = None if chunk == "none" else int(chunk)
    batch = make_batch()
    per = batch["input_ids"].shape[0] // WORLD
    model = build_model()
    segments = [(100 + r, chunk_slices(r * per, (r + 1) * per, chunk_size)) for r in range(WORLD)]
    loss = reference_step(model, batch, segments)  # one process, global batch, global negatives
    g_ref = grads(model)
    for r, res in enumerate(results[chunk]):
        # DDP leaves the averaged gradient on every rank: it must be the full-batch gradient.
        assert max_grad_diff(res["grads"], g_ref) < 5e-6, r
        assert res["metrics"]["loss"] == pytest.approx(loss, abs=1e-5)
        assert res["metrics"] == results[chunk][0]["metrics"]  # global metrics, identical on each rank
