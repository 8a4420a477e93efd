"""Tests for condenser_lite.estimate: the projected wall time printed before long work."""

from __future__ import annotations

import pytest
from locations import MIRROR, ROOT

from condenser_lite.cli import main
from condenser_lite.reproduction.runs.estimate import Estimate, Part, format_estimate


def test_total_shares_the_jobs_over_the_workers():
    parts = [Part("setup", 1, 10.0, "-", serial=True), Part("first stage", 1, 100.0, "-", serial=True),
             Part("stage", 2, 50.0, "-"), Part("fine-tune", 10, 20.0, "-")]
    assert Estimate("x", parts, 2, "bf16", 1.0).total_seconds == 110 + (100 + 200) / 2
    assert Estimate("x", parts, 1, "bf16", 1.0).total_seconds == 110 + 300
    # a part longer than the shared-out rest is the floor: one stage cannot be split
    long = [Part("stage", 1, 500.0, "-"), Part("fine-tune", 2, 10.0, "-")]
    assert Estimate("x", long, 2, "no", 1.0).total_seconds == 500
    text = format_estimate(Estimate("x", parts, 2, "no", 1.0))
    assert "fp32" in text and "total, wall time: about 4.3 min" in text


def test_a_stage_counted_in_epochs_needs_a_number_of_updates():
    from condenser_lite.reproduction.runs.estimate import _updates
    from condenser_lite.reproduction.configuration.presets import paper_condenser
    from condenser_lite.utils.errors import ConfigError

    with pytest.raises(ConfigError, match="--set stages.condenser.max_steps=N to time it"):
        _updates(paper_condenser())


@pytest.fixture
def two_threads():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # as the command line starts (the unit tests run on one)
    yield
    torch.set_num_threads(before)


def busy(monkeypatch, load: float) -> None:
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (load, 1.0, 0.5))


@pytest.mark.parametrize("load, threads", [(2.3, 1), (0.2, 2)])
def test_the_dry_run_times_the_first_stage_on_the_threads_the_run_takes(monkeypatch, two_threads, load, threads):
    """``experiments --dry-run`` at a 1-minute load of 2.3 times the first stage on one thread, as
    the protocol then runs it; on a quiet machine on the caller's two (the loop's policy then
    manages them, in the probe as in the run)."""
    import torch

    from condenser_lite.reproduction.runs import estimate

    seen = []

    def time_stage(cfg, folder, data_dir):
        seen.append(torch.get_num_threads())
        raise RuntimeError("timed")
    busy(monkeypatch, load)
    monkeypatch.setattr(estimate, "time_stage", time_stage)
    monkeypatch.setattr(estimate, "load_task", lambda preset, data_dir: None)
    monkeypatch.setattr(estimate, "sts_data", lambda preset, data_dir: (None, None))
    monkeypatch.setattr(estimate, "cached_stages", lambda *a: [])
    with pytest.raises(RuntimeError, match="timed"):
        estimate.estimate_protocol("micro", workers=2)
    assert seen == [threads]
    assert torch.get_num_threads() == 2  # given back


def test_a_busy_machine_is_one_line_of_the_estimate(monkeypatch, two_threads):
    """Above a 1-minute load of 0.5 the estimate says, in one line, the load and what to do; the
    part shows the threads its probe ended on."""
    from condenser_lite.reproduction.runs import estimate
    from condenser_lite.reproduction.configuration.presets import stage_config

    timing = {"per_update": 0.2, "setup": 1.0, "evaluation": 0.0, "threads": 1, "checkpoint": "-"}
    monkeypatch.setattr(estimate, "time_stage", lambda cfg, folder, data_dir: timing)
    cfg = stage_config("micro", "mlm")
    busy(monkeypatch, 2.3)
    text = format_estimate(estimate.estimate_stage(cfg))
    notes = [line for line in text.splitlines() if "busy" in line]
    assert len(notes) == 1 and "1-minute load average 2.3" in notes[0] and "run the dry run again" in notes[0]
    assert "s/update x 2, 1 thread)" in text
    busy(monkeypatch, 0.3)
    assert "busy" not in format_estimate(estimate.estimate_stage(cfg))

    def no_load():
        raise OSError("no load average here")
    monkeypatch.setattr("os.getloadavg", no_load)
    assert estimate.load_warning() is None


def test_the_studys_dry_run_says_when_the_machine_is_busy(monkeypatch, tmp_path, capsys):
    from condenser_lite.studies import mechanism

    seen = {}

    def rows(parts, data_dir, workers, control=True):
        seen["workers"] = workers
        return [("e0", "stage 1", 1, 60.0)]
    monkeypatch.setattr(mechanism, "estimate", rows)
    busy(monkeypatch, 1.8)
    mechanism.main(["--dry-run", "--only", "e0", "--out", str(tmp_path / "x.json")])
    out = capsys.readouterr().out
    assert seen == {"workers": 2} and "note: the machine is busy (1-minute load average 1.8" in out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    if not MIRROR.exists():
        pytest.fail(f"the data mirror {MIRROR} is missing: put ../shared/data beside the repository")
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.protocol  # the estimate times a few steps of each stage on the real code path
def test_experiments_dry_run_prints_every_part_and_trains_nothing(cache, capsys):
    main(["experiments", "--preset", "micro", "--dry-run"])
    out = capsys.readouterr().out
    for part in ("pre-train bert (first stage)", "pre-train condenser", "pre-train cocondenser",
                 "fine-tune, round 1", "fine-tune, round 2", "STS-b", "total, wall time"):
        assert part in out
    assert "scorecard" not in out.lower()  # it stopped before the run
    assert not list((cache / "checkpoints").glob("*")) if (cache / "checkpoints").exists() else True
    assert not (cache / "experiments").exists() or not list((cache / "experiments").glob("results-*"))
    assert not (cache / "finetune").exists() and not (cache / "sts").exists()


@pytest.mark.protocol  # the estimate times a few steps of each stage on the real code path
def test_pretrain_dry_run_leaves_no_stage(cache, tmp_path, capsys):
    main(["pretrain", "--preset", "micro", "--method", "mlm", "--output-dir", str(tmp_path / "stage"), "--dry-run"])
    out = capsys.readouterr().out
    assert "mlm stage" in out and "s/update x 2, " in out and " thread" in out
    assert not (tmp_path / "stage").exists()


def test_cached_stages_follows_each_seeds_chain(micro_run, monkeypatch, tmp_path):
    """Every stage of a finished run is found in its cache (continuations through their cached
    parents), and none in an empty one: the estimate counts only what will train."""
    from condenser_lite.reproduction.runs.arms import needed_arms
    from condenser_lite.reproduction.runs.estimate import cached_stages
    from condenser_lite.reproduction.runs.protocol import arm_pretrain_seeds

    preset, _, _, root = micro_run
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    plan = needed_arms(preset.arms, {})
    everything = {(arm, ps) for arm in plan for ps in arm_pretrain_seeds(preset, arm)}
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(root / "cache"))
    found = cached_stages(preset, plan)
    assert set(found) == everything and all(f.is_dir() for f in found.values())
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "empty"))
    assert cached_stages(preset, plan) == {}


def test_forward_flops_are_torchs_flop_count_of_the_encoder():
    """The per-sequence cost ``estimate_by_flops`` multiplies out (``accounting.forward_flops``)
    is what torch's own FLOP counter sees in a BERT forward pass (every matmul: the layers'
    weights and attention)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BertConfig, BertModel

    from condenser_lite.training.accounting import forward_flops

    shape = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3}
    model = BertModel(BertConfig(vocab_size=100, num_attention_heads=4, attn_implementation="eager", **shape),
                      add_pooling_layer=False).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(input_ids=torch.ones(5, 24, dtype=torch.long))
    assert counter.get_total_flops() == forward_flops(shape, rows=5, length=24)


def test_the_colab_budget_fits_one_free_colab_session(cache):
    """The ``colab`` preset is sized to fit a free Colab session by computation: at the assumed
    T4 rate its parts take under two hours; three times the epochs would not fit, and a preset
    that pre-trains is sent to ``--dry-run``, which measures."""
    from condenser_lite.reproduction.runs.estimate import T4_TFLOPS, estimate_by_flops
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.utils.errors import ConfigError

    est = estimate_by_flops("colab")
    assert est.total_seconds < 2 * 3600 and f"{T4_TFLOPS:g} TFLOP/s" in est.basis
    runs = {p.name: p.count for p in est.parts}
    assert runs["fine-tune, round 1, 100 queries"] == runs["fine-tune, round 2, 809 queries"] == 3 * 3  # arms x seeds
    assert runs["STS-b, 500 pairs"] == 9 and runs["attention entropy"] == 3
    longer = get_preset("colab").replace(**{"finetune.epochs_round1": 15.0, "finetune.epochs_round2": 15.0})
    assert estimate_by_flops(longer).total_seconds > 2 * 3600
    assert "computed from the FLOPs" in format_estimate(est)
    quoted = f"about {est.total_seconds / 3600:.1f} hours"  # what the README and "Running the book" say
    for page in ("README.md", "book/running.md"):
        assert quoted in " ".join((ROOT / page).read_text().split()), page
    with pytest.raises(ConfigError, match="--dry-run"):
        estimate_by_flops("small")
    for rate in (0, -1, float("nan")):
        with pytest.raises(ConfigError, match="a positive number"):
            estimate_by_flops("colab", tflops=rate)
