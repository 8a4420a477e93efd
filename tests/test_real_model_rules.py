"""studies/real_model.py: the pre-registered rule of the real-model comparison, on made-up numbers
whose answer is known: a clear gain is called better by both tests, a reversal worse, a gain
hidden in noise "not detectable at this power"; BH q over the two tests; the control's steps."""

import pytest

from condenser_lite.reproduction.statistics.rules import NOT_DETECTABLE
from condenser_lite.studies.real_model import control_steps, judge, runs_per_arm

pytestmark = pytest.mark.unit


def runs(co, mlm, none):
    return {"cocondenser": {s: list(v) for s, v in zip(("42", "43", "44"), co)},
            "mlm": {s: list(v) for s, v in zip(("42", "43", "44"), mlm)},
            "none": {str(s): v for s, v in enumerate(none)}}


def test_a_clear_gain_is_called_by_both_tests_and_paired_by_seed():
    out = judge(runs(co=[(0.70, 0.71), (0.72, 0.71), (0.69, 0.70)], mlm=[(0.65, 0.66), (0.67, 0.66), (0.64, 0.65)],
                     none=[0.64, 0.65, 0.645, 0.655]))
    assert out["H1"]["paired"] and out["H1"]["verdict"] == "better" and out["H1"]["reading"] == "better"
    assert not out["H2"]["paired"] and out["H2"]["verdict"] == "better"
    assert out["H1"]["diff"] == pytest.approx(0.05, abs=1e-6)
    for t in ("H1", "H2"):
        assert t in out and out[t]["p"] <= out[t]["q"] <= 1  # BH never lowers a p
    assert "2 tests" in out["family"]


def test_a_reversal_is_worse_and_noise_is_not_detectable():
    worse = judge(runs(co=[(0.60, 0.61), (0.59, 0.60), (0.61, 0.60)], mlm=[(0.66, 0.66), (0.67, 0.66), (0.65, 0.66)],
                       none=[0.66, 0.67, 0.665, 0.66]))
    assert worse["H1"]["reading"] == "worse" and worse["H2"]["reading"] == "worse"
    noisy = judge(runs(co=[(0.60, 0.70), (0.75, 0.62), (0.66, 0.71)], mlm=[(0.70, 0.61), (0.64, 0.69), (0.62, 0.72)],
                       none=[0.60, 0.72, 0.66, 0.69]))
    assert noisy["H1"]["reading"] == NOT_DETECTABLE and noisy["H1"]["mdd"] > abs(noisy["H1"]["diff"])


def test_the_control_spends_the_stages_flops_and_missing_arms_are_refused():
    assert control_steps(162, 7.3, 1.1) == 1075
    with pytest.raises(ValueError, match="positive"):
        control_steps(162, 0.0, 1.1)
    with pytest.raises(ValueError, match="missing: \\['mlm'\\]"):
        judge({"none": {"0": 0.6}, "cocondenser": {"42": [0.6]}})
    assert runs_per_arm() == {"none": 4, "cocondenser": 6, "mlm": 6}


def test_the_stages_are_built_as_registered_and_another_file_is_refused(tmp_path, capsys):
    """The coCondenser stage and the MLM control carry the registered settings (contrastive term
    only, fresh head, 128-token spans and blocks, the papers' rate, the control on SciFact's
    text); the command refuses a results file of another kind before any work."""
    from command_line import cli, one_error_line

    from condenser_lite.studies.real_model import PRETRAIN_SEEDS, finetune_preset, stage_configs
    from condenser_lite.utils.loading import shipped_model

    stages = stage_configs(shipped_model(), PRETRAIN_SEEDS[0], 1075)
    co, mlm = stages["cocondenser"], stages["mlm"]
    assert (co.method, co.mlm_weight, co.co_weight, co.head, co.batch_size, co.max_steps, co.lr, co.model.max_len) == \
        ("cocondenser", 0.0, 1.0, "random", 64, 162, 1e-4, 128)
    assert (mlm.method, mlm.corpus, mlm.batch_size, mlm.max_steps, mlm.lr, mlm.model.max_len) == \
        ("mlm", "scifact", 32, 1075, 1e-4, 128)
    assert co.seed == mlm.seed == PRETRAIN_SEEDS[0] and co.init == mlm.init == shipped_model()
    recipe = finetune_preset().finetune
    assert (recipe.lr, recipe.pooling) == (2e-5, "cls")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert "not JSON" in one_error_line(cli(["real-model", "--out", notes], capsys)) and notes.read_text() == "mine"


def test_a_resume_keeps_finished_units_and_refuses_another_design():
    """The study resumes from its file alone (the cache does not travel between machines), so a
    file written under another recipe or design is refused by name rather than judged as one."""
    import dataclasses

    from condenser_lite.studies.real_model import finetune_preset, resumable, values
    from condenser_lite.utils.errors import ConfigError

    record = {"model": "m", "metric": "nDCG@10", "round": "round2", "design": {"pretrain_seeds": (42, 43)},
              "recipe": dataclasses.asdict(finetune_preset().finetune)}
    assert resumable(None, record) == {}
    prior = {**record, "design": {"pretrain_seeds": [42, 43]}, "units": {"none": {"finetunes": {}}}}
    assert resumable(prior, record) == {"none": {"finetunes": {}}}  # JSON's lists are the design's tuples
    with pytest.raises(ConfigError, match="recipe differs"):
        resumable({**prior, "recipe": {**prior["recipe"], "lr": 1e-3}}, record)
    ft = {"round2": {"nDCG@10": 0.6}}
    units = {"none": {"finetunes": {"0": ft, "1": ft}},
             "42": {arm: {"finetunes": {"0": ft, "1": ft}} for arm in ("cocondenser", "mlm")}}
    assert values({"units": units}) == {"none": {"0": 0.6, "1": 0.6}, "cocondenser": {"42": [0.6, 0.6]},
                                        "mlm": {"42": [0.6, 0.6]}}
