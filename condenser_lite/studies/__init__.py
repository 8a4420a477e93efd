"""The studies behind the book's study pages and its health check, whose results
files are the pages' evidence.

* ``health_runs.py``: a reader's short pre-training runs, healthy and broken, judged by the
  health check (``python -m condenser_lite health-runs``; the page "Is my pre-training
  healthy?", ``results/health.json``).
* ``mechanism.py``: when the Condenser head needs [CLS] (``python -m condenser_lite mechanism``;
  the page "When does the head need [CLS]?", ``results/mechanism.json``); reading, judging and
  merging that file in ``mechanism_files.py``; its pre-registered rules (the modified Condenser,
  the scaling trend) in ``mechanism_rules.py``, and when the faithful head switches on over a long
  stage (the onset rules) in ``onset.py``.
* ``real_model.py``: does coCondenser's corpus-aware pre-training help a real retriever
  (all-MiniLM-L6-v2 on SciFact)? The comparison's design and its rule, fixed before its runs
  (chapter 4).
* ``sizing.py``: the pre-training study that chose the ``small`` preset (``python -m condenser_lite
  sizing``; the page "Choosing the scaled-down world", ``results/study.json``); its runs in
  ``sizing_runs.py``, its cost measurements in ``sizing_throughput.py``.

May import: ``reproduction``, ``training``, ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
