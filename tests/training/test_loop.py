"""Tests for condenser_lite.training.loop: exact resume, accumulation, schedule, decay, errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from toy_models import masking_collate, tiny_bert, token_data

from condenser_lite.reproduction.runs.jobs import num_threads
from condenser_lite.training.loop import TrainConfig, set_step_seed, train
from condenser_lite.training.prepare import param_groups
from condenser_lite.utils.errors import CheckpointError


# ---- tiny models and data -------------------------------------------------------------------

class TinyRegressor(nn.Module):
    """Linear -> LayerNorm -> dropout -> Linear, MSE loss, plus a logged extra metric."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.lin1, self.norm, self.drop, self.lin2 = nn.Linear(4, 16), nn.LayerNorm(16), nn.Dropout(dropout), nn.Linear(16, 1)

    def forward(self, x, y):
        pred = self.lin2(self.drop(torch.relu(self.norm(self.lin1(x))))).squeeze(-1)
        return SimpleNamespace(loss=F.mse_loss(pred, y), mae=(pred - y).abs().mean(), pred=pred)


def regressor(dropout: float = 0.0) -> TinyRegressor:
    torch.manual_seed(0)
    return TinyRegressor(dropout)


def regression_data(n: int = 16, offset: float = 0.0) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(n, 4, generator=g) + offset
    return [{"x": x, "y": float(x.sum())} for x in xs]


def regression_collate(examples: list[dict]) -> dict:
    return {"x": torch.stack([e["x"] for e in examples]), "y": torch.tensor([e["y"] for e in examples])}


def log_steps(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@pytest.fixture
def one_thread():
    # float sums differ between thread counts; bitwise comparisons need a fixed one
    with num_threads(1):
        yield


# ---- determinism and resume -----------------------------------------------------------------

def test_set_step_seed_depends_on_seed_step_and_rank():
    def draw(*args):
        set_step_seed(*args)
        return torch.rand(3)

    assert torch.equal(draw(1, 5), draw(1, 5))
    assert not torch.equal(draw(1, 5), draw(1, 6))
    assert not torch.equal(draw(1, 5), draw(2, 5))
    assert not torch.equal(draw(1, 5, 0), draw(1, 5, 1))


def test_ctrl_c_in_the_middle_of_an_update_says_from_where_the_next_run_resumes(tmp_path, one_thread, monkeypatch,
                                                                               capsys):
    """A Ctrl-C between the optimiser's step and the step counter's update saves nothing (the
    weights hold half an update), and says so: the next run resumes from the last checkpoint, and
    the updates since will be trained again."""
    calls, real_step = {"n": 0}, torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        calls["n"] += 1
        out = real_step(self, *args, **kwargs)
        if calls["n"] == 5:  # update 5 applied, its counter not yet moved on
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    cfg = TrainConfig(max_steps=6, batch_size=4, lr=5e-3, seed=7, save_every=3)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_bert(), token_data(), cfg, output_dir=str(tmp_path / "run"), collate_fn=masking_collate)
    said = capsys.readouterr().err
    assert "interrupted in the middle of an update: the next run resumes from step 3" in said, said
    assert "updates 4-5 will be trained again" in said, said
    assert json.loads((tmp_path / "run/checkpoint/state.json").read_text())["step"] == 3


@pytest.mark.parametrize("crash", [KeyboardInterrupt, RuntimeError])
def test_resume_replays_the_uninterrupted_run_exactly(tmp_path, one_thread, crash):
    data = token_data()
    base = dict(max_steps=6, batch_size=4, grad_accum=2, lr=5e-3, warmup_ratio=0.3, seed=7)
    model_a = tiny_bert()
    torch.manual_seed(123)  # A and B start from different global RNG states: only reseeding aligns them
    res_a = train(model_a, data, TrainConfig(**base), output_dir=str(tmp_path / "a"), collate_fn=masking_collate)
    assert res_a.step == 6 and res_a.resumed_from is None

    calls = {"n": 0}

    def flaky_collate(examples):
        calls["n"] += 1
        if calls["n"] == 10:  # step 5's second micro-batch (its first left gradients behind), once
            raise crash("simulated interruption")
        return masking_collate(examples)

    cfg_b = TrainConfig(save_every=3, **base)
    b_dir = str(tmp_path / "b")
    model_b = tiny_bert()
    with pytest.raises(crash):
        train(model_b, data, cfg_b, output_dir=b_dir, collate_fn=flaky_collate)
    state = json.loads((tmp_path / "b/checkpoint/state.json").read_text())
    # Ctrl-C saves the 4 completed steps; a crash leaves the step-3 checkpoint (log has 1..4)
    assert state["step"] == (4 if crash is KeyboardInterrupt else 3)
    assert log_steps(tmp_path / "b/log.jsonl") == [1, 2, 3, 4]

    # Resume must not lean on saved RNG states: drop them and scramble the global RNG.
    (tmp_path / "b/checkpoint/rng.pt").unlink()
    torch.manual_seed(999)
    res_b = train(model_b, data, cfg_b, output_dir=b_dir, collate_fn=flaky_collate)  # same model object, stale grads
    assert res_b.resumed_from == state["step"] and res_b.step == 6
    for (name, pa), pb in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert log_steps(tmp_path / "b/log.jsonl") == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in res_b.history] == [1, 2, 3, 4, 5, 6]
    timing = ("elapsed", "cpu")  # seconds differ between runs; everything else must not
    strip = lambda h: [{k: v for k, v in r.items() if k not in timing} for r in h]  # noqa: E731
    assert strip(res_b.history) == strip(res_a.history)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [".lock", "checkpoint", "log.jsonl", "train_state.json"]

    # Already at the final step: returns the stored result and loads the final weights.
    model_c = tiny_bert()
    res_c = train(model_c, data, cfg_b, output_dir=b_dir, collate_fn=lambda ex: pytest.fail("should not train"))
    assert res_c.step == 6 and res_c.resumed_from == 6 and len(res_c.history) == 6
    assert all(torch.equal(a, c) for a, c in zip(model_a.state_dict().values(), model_c.state_dict().values()))
    assert json.loads((tmp_path / "b/train_state.json").read_text())["step"] == 6


def test_dropout_and_masking_really_vary_between_steps():
    # Guards the test above: if randomness were off, resume equality would prove nothing.
    set_step_seed(7, 1)
    a = masking_collate(token_data(4))
    set_step_seed(7, 2)
    b = masking_collate(token_data(4))
    assert not torch.equal(a["labels"], b["labels"])
    assert tiny_bert().config.hidden_dropout_prob > 0


def test_config_mismatch_on_resume_names_the_field(tmp_path):
    data, out = regression_data(), str(tmp_path)
    train(regressor(), data, TrainConfig(max_steps=2, batch_size=4, lr=1e-3),
          output_dir=out, collate_fn=regression_collate)
    with pytest.raises(CheckpointError, match=r"lr: checkpoint 0.001 vs now 0.002.*resume=False.*--restart"):
        train(regressor(), data, TrainConfig(max_steps=2, batch_size=4, lr=2e-3),
              output_dir=out, collate_fn=regression_collate)
    with pytest.raises(CheckpointError, match="data_size"):
        train(regressor(), data[:8], TrainConfig(max_steps=2, batch_size=4, lr=1e-3),
              output_dir=out, collate_fn=regression_collate)
    res = train(regressor(), data, TrainConfig(max_steps=2, batch_size=4, lr=2e-3),
                output_dir=out, resume=False, collate_fn=regression_collate)
    assert res.resumed_from is None and log_steps(tmp_path / "log.jsonl") == [1, 2]


# ---- the update itself ----------------------------------------------------------------------

def test_grad_accum_matches_one_big_batch(tmp_path):
    data = regression_data()
    results = {}
    for accum in (1, 2, 4):
        model = regressor()
        res = train(model, data, TrainConfig(max_steps=3, batch_size=8, grad_accum=accum, lr=1e-2, warmup_ratio=0.0),
                    output_dir=str(tmp_path / str(accum)), collate_fn=regression_collate)
        results[accum] = (model, res)
    m1, r1 = results[1]
    for accum in (2, 4):
        m, r = results[accum]
        for p1, p in zip(m1.parameters(), m.parameters()):
            torch.testing.assert_close(p, p1, rtol=1e-5, atol=1e-6)
        for key in ("loss", "grad_norm"):  # grad_norm catches a missing /grad_accum (Adam would hide it)
            assert [h[key] for h in r.history] == pytest.approx([h[key] for h in r1.history], rel=1e-5)
    assert "mae" in r1.history[0] and "grad_norm" in r1.history[0] and "pred" not in r1.history[0]


def test_step_fn_replaces_forward_backward(tmp_path):
    def step_fn(model, batch, accelerator):
        out = model(**batch)
        accelerator.backward(out.loss)  # no /grad_accum: the loop averages step_fn gradients
        return {"loss": out.loss.detach(), "custom": 2.0}

    data = regression_data()
    cfg = dict(max_steps=2, batch_size=8, grad_accum=2, lr=1e-2, warmup_ratio=0.0)
    m_default, m_step = regressor(), regressor()
    ref = train(m_default, data, TrainConfig(**cfg), output_dir=str(tmp_path / "d"), collate_fn=regression_collate)
    res = train(m_step, data, TrainConfig(**cfg),
                output_dir=str(tmp_path / "s"), collate_fn=regression_collate, step_fn=step_fn)
    for p, q in zip(m_default.parameters(), m_step.parameters()):
        torch.testing.assert_close(p, q)
    assert res.history[0]["custom"] == 2.0
    for key in ("loss", "grad_norm"):
        assert [h[key] for h in res.history] == pytest.approx([h[key] for h in ref.history], rel=1e-5)
    with pytest.raises(ValueError, match="'loss'"):
        train(regressor(), data, TrainConfig(**cfg),
              output_dir=str(tmp_path / "x"), collate_fn=regression_collate, step_fn=lambda m, b, a: {"other": 1.0})


def test_lr_warms_up_then_decays_linearly(tmp_path):
    res = train(regressor(), regression_data(), TrainConfig(max_steps=10, batch_size=4, lr=0.01, warmup_ratio=0.3),
                output_dir=str(tmp_path), collate_fn=regression_collate)
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    # step k uses the rate after k-1 scheduler steps: k/3 during 3 warmup steps, then (10-k)/7
    expected = [0.01 * (k / 3 if k < 3 else (10 - k) / 7) for k in range(10)]
    assert lrs == pytest.approx(expected)
    assert lrs.index(max(lrs)) == 3 and res.epoch == 2  # 4 steps per epoch: steps 9-10 in epoch 2


def test_weight_decay_spares_biases_and_layernorm(tmp_path):
    class ZeroGrad(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.lin, self.norm = nn.Embedding(5, 4), nn.Linear(4, 4), nn.LayerNorm(4)

        def forward(self, x):
            # zero gradients: AdamW's Adam part moves nothing, so only decoupled decay acts
            return SimpleNamespace(loss=sum(p.sum() for p in self.parameters()) * 0.0)

    model = ZeroGrad()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train(model, [0] * 4, TrainConfig(max_steps=1, batch_size=2, lr=0.1, weight_decay=0.5, warmup_ratio=0.0),
          output_dir=str(tmp_path), collate_fn=lambda ex: {"x": torch.tensor(ex)})
    after = model.state_dict()
    for name in ("emb.weight", "lin.weight"):
        torch.testing.assert_close(after[name], before[name] * (1 - 0.1 * 0.5))
    for name in ("lin.bias", "norm.weight", "norm.bias"):
        assert torch.equal(after[name], before[name]), name

    bert = tiny_bert()
    decay, plain = param_groups(bert, 0.01)
    names = {id(p): n for n, p in bert.named_parameters()}
    assert all("LayerNorm" in names[id(p)] or names[id(p)].endswith("bias") for p in plain["params"])
    assert not any(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in decay["params"])


# ---- data handling and errors ---------------------------------------------------------------

def test_callable_data_is_fresh_each_epoch(tmp_path):
    asked, seen = [], []

    def data(epoch):
        asked.append(epoch)
        return regression_data(8, offset=10.0 * epoch)

    def collate(examples):
        seen.append([round(float(e["x"].mean()) / 10) for e in examples])  # recovers the epoch
        return regression_collate(examples)

    res = train(regressor(), data, TrainConfig(epochs=2, batch_size=4), output_dir=str(tmp_path), collate_fn=collate)
    assert asked == [0, 1] and res.step == 4
    assert [r["epoch"] for r in res.history] == [0, 0, 1, 1]
    assert seen == [[0] * 4, [0] * 4, [1] * 4, [1] * 4]


def test_epoch_order_is_a_seeded_permutation_dropping_the_last_partial_batch(tmp_path):
    def run(seed):
        seen = []
        train(regressor(), list(range(10)), TrainConfig(epochs=1, batch_size=4, seed=seed),
              output_dir=str(tmp_path), resume=False,
              collate_fn=lambda ex: seen.extend(ex) or {"x": torch.randn(len(ex), 4), "y": torch.zeros(len(ex))})
        return seen

    a = run(1)
    assert len(a) == 8 and len(set(a)) == 8  # 2 full batches of 4; the last 2 examples dropped
    assert a == run(1) and a != run(2)


def test_nan_loss_stops_with_the_step(tmp_path):
    calls = {"n": 0}

    def collate(examples):
        calls["n"] += 1
        batch = regression_collate(examples)
        if calls["n"] == 3:
            batch["y"][0] = float("nan")
        return batch

    model = regressor()
    with pytest.raises(FloatingPointError, match=r"at step 3 .*checkpoint.*\(step 2\).*--restart") as err:
        train(model, regression_data(), TrainConfig(max_steps=5, batch_size=4, save_every=2),
              output_dir=str(tmp_path), collate_fn=collate)
    assert "good" not in str(err.value)  # finite loss does not make the checkpoint's weights good
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the bad update was not applied


def test_bad_inputs_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"10 examples.*batch_size=16"):
        train(regressor(), regression_data(10), TrainConfig(batch_size=16),
              output_dir=str(tmp_path), collate_fn=regression_collate)
    with pytest.raises(ValueError, match="grad_accum"):
        TrainConfig(batch_size=6, grad_accum=4)
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainConfig(mixed_precision="fp8")
    class NoLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x, y):
            return SimpleNamespace(pred=self.lin(x))

    with pytest.raises(ValueError, match=r"\.loss"):
        train(NoLoss(), regression_data(), TrainConfig(max_steps=1, batch_size=4),
              output_dir=str(tmp_path / "l"), collate_fn=regression_collate)


# ---- schedules, evaluation, CPU time, throughput options -------------------------------------

def test_constant_schedule_warms_up_then_holds(tmp_path):
    train(regressor(), regression_data(), TrainConfig(max_steps=8, batch_size=4, lr=0.01, warmup_ratio=0.25, schedule="constant"),
          output_dir=str(tmp_path), collate_fn=regression_collate)
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([0.0, 0.005] + [0.01] * 6)


def test_eval_fn_runs_every_n_steps_in_eval_mode_and_joins_the_log(tmp_path):
    seen = []

    def eval_fn(model):
        seen.append((model.training, torch.is_grad_enabled()))
        return {"w": float(model.lin1.weight.sum())}

    model = regressor()
    res = train(model, regression_data(), TrainConfig(max_steps=7, batch_size=4, log_every=5, eval_every=3),
                output_dir=str(tmp_path), collate_fn=regression_collate, eval_fn=eval_fn)
    assert [r["step"] for r in res.history] == [3, 5, 6, 7]  # an eval step always writes a line
    assert [r["step"] for r in res.history if "eval_w" in r] == [3, 6, 7]
    assert seen == [(False, False)] * 3 and model.training
    assert res.history[-1]["eval_w"] == pytest.approx(float(model.lin1.weight.sum()))
    cpu = [r["cpu"] for r in res.history]
    assert cpu == sorted(cpu) and cpu[-1] > 0  # training CPU seconds, growing
    # without eval_every, after the last step only; without eval_fn, eval_every evaluates nothing
    last = train(regressor(), regression_data(), TrainConfig(max_steps=3, batch_size=4), output_dir=tmp_path / "b",
                 collate_fn=regression_collate, eval_fn=eval_fn)
    assert [r["step"] for r in last.history if "eval_w" in r] == [3]
    none = train(regressor(), regression_data(), TrainConfig(max_steps=3, batch_size=4, eval_every=1),
                 output_dir=tmp_path / "c", collate_fn=regression_collate)
    assert not any("eval_w" in r for r in none.history)


def test_eval_runs_in_full_precision_during_bf16_training(tmp_path):
    dtypes = []

    def eval_fn(model):
        dtypes.append(model(**masking_collate(token_data(4))).loss.dtype)
        out = model.bert(torch.tensor(token_data(2))).last_hidden_state
        dtypes.append(out.dtype)
        return {}

    model = tiny_bert()
    train(model, token_data(), TrainConfig(max_steps=1, batch_size=4, mixed_precision="bf16", eval_every=1),
          output_dir=str(tmp_path), collate_fn=masking_collate, eval_fn=eval_fn)
    assert dtypes == [torch.float32, torch.float32]


def _bert_losses(tmp_path, name: str, **changes) -> list[float]:
    cfg = TrainConfig(max_steps=4, batch_size=8, lr=1e-3, **changes)
    return [r["loss"] for r in train(tiny_bert(), token_data(), cfg, output_dir=tmp_path / name,
                                     collate_fn=masking_collate).history]


def test_bf16_autocast_steps_track_full_precision(tmp_path, one_thread):
    fp32 = _bert_losses(tmp_path, "fp32")
    bf16 = _bert_losses(tmp_path, "bf16", mixed_precision="bf16")
    assert bf16 != fp32  # really a different precision ...
    assert bf16 == pytest.approx(fp32, abs=0.02)  # ... on the same path (bf16 keeps ~3 significant digits)


@pytest.mark.protocol  # torch.compile: seconds of compiling
def test_compiled_steps_equal_eager_ones(tmp_path, one_thread):
    eager = _bert_losses(tmp_path, "eager")
    compiled = _bert_losses(tmp_path, "compiled", compile=True)
    assert compiled == pytest.approx(eager, abs=1e-4)
