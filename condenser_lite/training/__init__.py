"""Training: one loop for everything, and what runs on it.

* ``loop.py``: the training loop on accelerate (seeded per step, resumable, checkpointed);
* ``checkpoint.py``: the loop's atomic, resumable checkpoint;
* ``update.py``: one update's gradients and metrics, and the held-out evaluation the loop calls;
* ``threads.py``: the loop's thread count, two threads only while they pay (chapter 2);
* ``pretraining.py``: a pre-training stage (MLM, Condenser, coCondenser) built from its
  settings, cached by them, logging the held-out gauges (chapters 2, 3);
* ``finetune.py``: the papers' two-round fine-tuning recipe (chapter 4);
* ``similarity.py``: the STS-b bi-encoder (chapter 7);
* ``accounting.py``: what each stage cost: tokens, FLOPs, CPU and wall seconds (chapter 4).

May import: ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
