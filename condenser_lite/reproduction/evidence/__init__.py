"""The reproduction's evidence: what a run leaves and what the papers published.

* ``results.py``: the results file as evidence: provenance, headline, reading it back, and the
  readers of what it holds;
* ``papers.py``: the papers' published numbers behind each claim, read from ``papers.json``.

May import: ``configuration``, ``statistics`` and the pipeline.
"""
