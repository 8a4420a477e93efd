"""The reproduction's runs: the arms, the protocol's job graph and what it records.

* ``tasks.py``: the data the arms are evaluated on;
* ``arms.py``: the arms (BERT, BERT-continued, Condenser, coCondenser, the ablations, a modified
  Condenser and its two controls) and what the protocol does to each;
* ``jobs.py``: the job runner (one-thread worker processes, results on disk);
* ``protocol.py``: the whole scaled-down reproduction as one job graph;
* ``protocol_jobs.py``: what the protocol's fine-tuning and STS-b jobs run, and each finished
  part's line;
* ``run_record.py``: what a protocol run records about how it ran: precisions, seconds per part,
  workers;
* ``estimate.py``: the projected wall time, measured before long work;
* ``health.py``: a reader's pre-training stage against the committed seeds' held-out curves;
* ``merge.py``: one results file from runs of a preset on different pre-training seeds;
* ``release.py``: the committed checkpoints of a run.

May import: ``configuration``, ``statistics``, ``evidence``, ``claims`` and the pipeline.
"""
