"""The studies behind the book's two study pages, whose results files are the pages' evidence.

* ``mechanism.py``: when the Condenser head needs [CLS] (``python -m condenser_lite mechanism``;
  the page "When does the head need [CLS]?", ``results/mechanism.json``).
* ``sizing.py``: the pre-training study that chose the ``small`` preset (``python -m condenser_lite
  sizing``; the page "Choosing the scaled-down world", ``results/study.json``); its runs in
  ``sizing_runs.py``, its cost measurements in ``sizing_throughput.py``.

May import: ``reproduction``, ``training``, ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
