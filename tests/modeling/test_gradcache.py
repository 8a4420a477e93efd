"""The gradient cache gives the full-batch gradient (coCondenser eq. 8-12), dropout included."""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from _dist_worker import (
    build_model,
    chunk_slices,
    grads,
    make_batch,
    max_grad_diff,
    reference_step,
)

from condenser_lite.modeling import gradcache
from condenser_lite.modeling.gradcache import RandContext, cocondenser_step
from condenser_lite.utils.distributed import gather_with_grad

N_ROWS = 12
SEED = 1234


def compute_once(chunk_size, dropout=0.1, accelerator=None, **kw):
    model = build_model(dropout=dropout)
    torch.manual_seed(SEED)
    metrics = cocondenser_step(model, make_batch(N_ROWS), accelerator=accelerator, chunk_size=chunk_size, **kw)
    return grads(model), metrics


def run_reference(chunk_size, dropout=0.1, autocast=contextlib.nullcontext, **kw):
    model = build_model(dropout=dropout)
    loss = reference_step(model, make_batch(N_ROWS), [(SEED, chunk_slices(0, N_ROWS, chunk_size))],
                          autocast=autocast, **kw)
    return grads(model), loss


@pytest.mark.parametrize("chunk_size", [None, 4, 5, 12, 1])
def test_cache_matches_full_batch_gradient_with_dropout(chunk_size):
    g_ref, loss_ref = run_reference(chunk_size)
    g, metrics = compute_once(chunk_size)
    assert max_grad_diff(g, g_ref) < 5e-6
    assert metrics["loss"] == pytest.approx(loss_ref, abs=1e-5)
    assert metrics["loss"] == pytest.approx(metrics["mlm_loss"] + metrics["co_loss"], abs=1e-6)


def test_weights_enter_the_same_way_with_and_without_cache():
    g_ref, loss_ref = run_reference(5, mlm_weight=0.3, co_weight=2.0)
    g, metrics = compute_once(5, mlm_weight=0.3, co_weight=2.0)
    assert max_grad_diff(g, g_ref) < 5e-6
    assert metrics["loss"] == pytest.approx(loss_ref, abs=1e-5)


def test_without_dropout_cache_equals_plain_step():
    # No randomness: the plain full-batch step itself is the reference, for every chunking.
    g_plain, m_plain = compute_once(None, dropout=0.0)
    assert m_plain["head_loss"] + m_plain["late_loss"] == pytest.approx(m_plain["mlm_loss"], abs=1e-5)
    for chunk_size in (3, 4, 5, 7):
        g, m = compute_once(chunk_size, dropout=0.0)
        assert max_grad_diff(g, g_plain) < 5e-6, chunk_size
        for k in ("loss", "mlm_loss", "co_loss", "co_acc", "head_loss", "late_loss"):
            assert m[k] == pytest.approx(m_plain[k], abs=1e-5), k


def test_without_rng_replay_gradients_differ():
    # Proves the dropout test above can fail: without replay pass 2 sees other dropout masks.
    g_ref, _ = run_reference(4)
    g_replay, _ = compute_once(4)
    g_noreplay, _ = compute_once(4, replay_rng=False)
    assert max_grad_diff(g_replay, g_ref) < 5e-6
    assert max_grad_diff(g_noreplay, g_ref) > 1e-3


def test_no_op_randcontext_breaks_exactness(monkeypatch):
    class NoReplay:
        def __init__(self, device=None):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(gradcache, "RandContext", NoReplay)
    g_ref, _ = run_reference(5)
    g, _ = compute_once(5)
    assert max_grad_diff(g, g_ref) > 1e-3


class FakeBf16Accelerator:
    """The three accelerate.Accelerator methods cocondenser_step uses, with CPU bf16 autocast
    (a real Accelerator's mixed-precision setting is process-global, so tests avoid changing it)."""

    def autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16)

    def backward(self, loss):
        loss.backward()

    def no_sync(self, model):
        return contextlib.nullcontext()


@pytest.mark.parametrize("chunk_size", [4, 5])
def test_cache_under_bf16_autocast(chunk_size):
    acc = FakeBf16Accelerator()
    g_ref, loss_ref = run_reference(chunk_size, autocast=acc.autocast)
    g, metrics = compute_once(chunk_size, accelerator=acc)
    error = max_grad_diff(g, g_ref)
    assert error < 1e-4
    assert metrics["loss"] == pytest.approx(loss_ref, rel=1e-4)
    # bf16 really was used: it moves the gradient far more than the cache's own error does.
    g32, _ = run_reference(chunk_size)
    assert max_grad_diff(g32, g_ref) > 10 * error


def test_bf16_cache_equals_plain_step_without_dropout():
    acc = FakeBf16Accelerator()
    g_plain, m_plain = compute_once(None, dropout=0.0, accelerator=acc)
    g, m = compute_once(5, dropout=0.0, accelerator=acc)
    assert max_grad_diff(g, g_plain) < 2e-2
    assert m["loss"] == pytest.approx(m_plain["loss"], rel=1e-2)


def test_real_accelerator_as_step_fn():
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    step_fn = functools.partial(cocondenser_step, chunk_size=5)
    model = build_model()
    torch.manual_seed(SEED)
    metrics = step_fn(model, make_batch(N_ROWS), accelerator)
    g_ref, loss_ref = run_reference(5)
    assert max_grad_diff(grads(model), g_ref) < 5e-6
    assert metrics["loss"] == pytest.approx(loss_ref, abs=1e-5)
    assert set(metrics) >= {"loss", "mlm_loss", "co_loss", "co_acc"}
    assert all(isinstance(v, float) for v in metrics.values())


def test_gradients_accumulate_like_backward():
    # step_fn contract: it adds to .grad (the loop zeroes), so two calls give twice the gradient.
    model = build_model(dropout=0.0)
    batch = make_batch(N_ROWS)
    cocondenser_step(model, batch, chunk_size=5)
    once = grads(model)
    cocondenser_step(model, batch, chunk_size=5)
    twice = grads(model)
    assert max_grad_diff({k: 2 * v for k, v in once.items()}, twice) < 5e-6


def test_randcontext_replays_and_restores_cpu_state():
    torch.manual_seed(0)
    ctx = RandContext()
    first = torch.rand(5)
    after_first = torch.rand(3)
    torch.manual_seed(0)
    torch.rand(5)
    with ctx:
        replayed = torch.rand(5)
    assert torch.equal(replayed, first)
    # Leaving the context restores the state from before entering it.
    assert torch.equal(torch.rand(3), after_first)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_randcontext_replays_cuda_state():
    torch.manual_seed(0)
    ctx = RandContext()
    first = torch.rand(5, device="cuda")
    with ctx:
        replayed = torch.rand(5, device="cuda")
    assert torch.equal(replayed, first)


def test_gather_with_grad_is_identity_on_one_process():
    x = torch.randn(4, 3, requires_grad=True)
    assert gather_with_grad(x) is x


def test_bad_inputs_raise_clear_errors():
    model = build_model()
    batch = make_batch(N_ROWS)
    odd = {k: v[:5] for k, v in batch.items()}
    with pytest.raises(ValueError, match="even"):
        cocondenser_step(model, odd)
    with pytest.raises(ValueError, match="chunk_size"):
        cocondenser_step(model, batch, chunk_size=0)


def test_training_loop_runs_cocondenser_with_fresh_spans(tmp_path):
    # The contract with training.train: data = SpanPairs (epoch -> documents), collate_fn =
    # SpanPairCollator(MLMCollator), step_fn = cocondenser_step with a cache.
    from condenser_lite.data.tokenizer import train_wordpiece
    from condenser_lite.modeling.condenser import Condenser
    from condenser_lite.training.pretraining_config import ModelConfig
    from condenser_lite.modeling.masking import MLMCollator
    from condenser_lite.modeling.spans import SpanPairCollator, SpanPairs
    from condenser_lite.training.loop import TrainConfig, train

    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(words[int(j)] for j in torch.randint(0, 40, (int(n),), generator=g))
             for n in torch.randint(10, 60, (12,), generator=g)]
    tok = train_wordpiece(texts, vocab_size=80, min_frequency=1)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    torch.manual_seed(0)
    model = Condenser.from_config(
        ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_len=32).bert_config(vocab_size=len(tok)),
        skip_from=1, n_head_layers=1)
    cfg = TrainConfig(max_steps=3, batch_size=4, lr=1e-3)
    result = train(model, SpanPairs(ids, max_len=24, min_span=4), cfg, output_dir=tmp_path, resume=False,
                   progress=False, collate_fn=SpanPairCollator(MLMCollator(tok)),
                   step_fn=functools.partial(cocondenser_step, chunk_size=3))
    assert [r["step"] for r in result.history] == [1, 2, 3]
    for r in result.history:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["co_loss"], rel=1e-5)
        assert 0.0 <= r["co_acc"] <= 1.0


class FakeXLA:
    """Stands in for ``devices.xla`` (torch_xla) on a CPU: an integer random state per device that
    every "random op" advances, and a log of the calls, so the branching can be checked here."""

    def __init__(self):
        self.state, self.calls = 100, []

    def get_rng_state(self, device):
        self.calls.append(("get", str(device), self.state))
        return self.state

    def set_rng_state(self, state, device):
        self.calls.append(("set", str(device), state))
        self.state = state


def test_gradient_cache_replays_the_xla_random_state(monkeypatch):
    """On a TPU dropout draws from the XLA device's state: pass 2 of each chunk must run from the
    state recorded before its pass 1, and the state after the cache is what it was before replay."""
    from condenser_lite.utils import devices

    fake = FakeXLA()
    monkeypatch.setattr(devices, "xla", fake)
    seen = []

    def forward(chunk, with_grad):
        seen.append((chunk, with_grad, fake.state))  # the state this chunk's dropout would use
        fake.state += 1  # a random op advances the device's state
        x = torch.full((1, 2), float(chunk), requires_grad=with_grad)
        return x * 2, None

    gradcache.gradient_cache([1, 2, 3], forward, lambda reps: torch.cat(reps).pow(2).sum(), device="xla:0")
    first = {c: st for c, g, st in seen if not g}
    second = {c: st for c, g, st in seen if g}
    assert first == {1: 100, 2: 101, 3: 102} and second == first  # replayed, chunk by chunk
    assert fake.state == 103  # each replay restores the state it found, so later randomness is untouched
    assert ("set", "xla:0", 100) in fake.calls
    # a CPU or CUDA device never touches the XLA calls
    fake.calls.clear()
    gradcache.gradient_cache([1, 2], forward, lambda reps: torch.cat(reps).sum(), device="cpu")
    assert fake.calls == []
