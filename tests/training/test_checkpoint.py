"""Tests for condenser_lite.training.checkpoint: the random states a resumed run restores."""

import torch


def test_rng_states_come_back_from_new_and_older_checkpoints(tmp_path):
    """rng.pt holds tensors, lists and numbers (read with weights_only=True); an rng.pt of an
    older version (a pickle with NumPy's ndarray) is still read, safely, as it was written."""
    import random

    import numpy as np

    from condenser_lite.training.checkpoint import restore_rng, rng_state

    def draws():
        return random.random(), random.gauss(0, 1), np.random.rand(), np.random.randn(), torch.rand(2).tolist()

    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    random.gauss(0, 1), np.random.randn()  # leave a cached Gaussian in both
    for name, saved in (("new", rng_state()), ("old", {"python": random.getstate(), "numpy": np.random.get_state(),
                                                       "torch": torch.get_rng_state(), "cuda": []})):
        ckpt = tmp_path / name
        ckpt.mkdir()
        torch.save(saved, ckpt / "rng.pt")
        expected = draws()
        draws()  # move on
        restore_rng(ckpt)
        assert draws() == expected, name
        restore_rng(ckpt)  # leave the state as saved for the next format
    assert isinstance(torch.load(tmp_path / "new" / "rng.pt", weights_only=True), dict)
