"""The mechanism study's pre-registered rules (condenser_lite/studies/mechanism_rules.py):
the choice of a modified Condenser and the book's description of a head that has started to use
its [CLS], on made-up numbers. The scaling trend is tests/test_mechanism_scaling.py's; the
pre-registered values are checked against their commits in test_rules.py."""

from condenser_lite.studies.mechanism_rules import MODIFIED_FLOOR, choose_modified, reliance_above_noise
from condenser_lite.reproduction.statistics.rules import c0_rule


def test_reliance_above_noise_is_strictly_above_twice_the_noise_and_false_where_undefined():
    assert reliance_above_noise({"cls_reliance": 0.093, "cls_reliance_noise": 0.014})
    assert not reliance_above_noise({"cls_reliance": 0.02, "cls_reliance_noise": 0.01})  # exactly twice
    assert not reliance_above_noise({"cls_reliance": -0.05, "cls_reliance_noise": 0.001})
    assert not reliance_above_noise({"cls_reliance": None, "cls_reliance_noise": 0.01})
    assert reliance_above_noise({"cls_reliance": 0.02, "cls_reliance_noise": 0.01}, times=1.5)


def _part(reliances, late=(4.40, 4.40), control=(4.40, 4.40)):
    return c0_rule(list(reliances), list(late), list(control))


def test_choose_modified_takes_the_best_candidate_that_meets_c0():
    parts = {"e3": _part([0.25, 0.30]), "e4": _part([0.21, 0.90]), "e5": _part([0.5, 0.15]),
             "e1": _part([0.9, 0.9])}  # E1 is no candidate: the faithful head, longer
    choice = choose_modified(parts)
    assert choice["part"] == "e3" and choice["meets_c0"] and choice["rule"] == 2  # largest smallest-seed reliance
    assert choice["smallest_reliance"] == 0.25


def test_choose_modified_falls_back_only_above_the_floor_with_the_late_loss_matched():
    below = {"e3": _part([0.05, 0.4]), "e4": _part([0.15, 0.5]), "e5": _part([0.3, 0.3], late=(4.5, 4.4))}
    choice = choose_modified(below)
    assert choice["part"] == "e4" and choice["meets_c0"] is False and choice["rule"] == 3
    assert choose_modified({"e4": _part([MODIFIED_FLOOR, 0.5])})["part"] == "e4"  # the floor is inclusive
    nothing = choose_modified({"e3": _part([0.05, 0.4]), "e5": _part([0.3, 0.3], late=(4.5, 4.4)),
                               "e4": _part([None, 0.5])})
    assert nothing["part"] is None and nothing["rule"] == 4
