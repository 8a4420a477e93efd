"""Training: one loop for everything, and what runs on it.

* ``loop.py``: the training loop on accelerate (seeded per step, resumable, checkpointed);
* ``epochs.py``: what each epoch draws from the run's seed: its data, its order, its batches;
* ``prepare.py``: the accelerator, AdamW and its schedule, the model made ready to train or resume;
* ``progress.py``: the loop's bookkeeping: counters, clocks, log records, ``TrainResult``;
* ``checkpoint.py``: the loop's atomic, resumable checkpoint;
* ``update.py``: one update's gradients and metrics, and the held-out evaluation the loop calls;
* ``threads.py``: the loop's thread count, two threads only while they pay (chapter 2);
* ``pretraining_config.py``: a pre-training stage's settings (``ModelConfig``,
  ``StageRecipe``, ``Stages``, ``StageConfig``) (chapters 2, 3);
* ``stage_cache.py``: a stage's cache key, folder and tokenizer (chapter 2);
* ``pretraining_data.py``: what a stage reads (blocks, span pairs) and the held-out set and
  gauges it logs (chapters 2, 3);
* ``pretraining.py``: running a stage (MLM, Condenser, coCondenser): its model, its step, cached
  by its key (chapters 2, 3);
* ``finetune.py``: the papers' two-round fine-tuning recipe (chapter 4);
* ``similarity.py``: the STS-b bi-encoder (chapter 7);
* ``accounting.py``: what each stage cost: tokens, FLOPs, CPU and wall seconds (chapter 4).

May import: ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
