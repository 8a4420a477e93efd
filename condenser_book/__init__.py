"""The book's side: the figures, tables, diagrams and reports the chapters show.

Only the chapters (``notebooks/``), the pages they generate and their tests import these modules;
the library (``condenser_lite``) never does. Each reads committed evidence through
``condenser_lite.reproduction`` and draws or words it.

* ``plots.py``: the legibility rule every figure meets and the figures' shared style;
* ``plots_gauges.py``, ``plots_arms.py``: the figures of the pre-training gauges (chapters 1-2) and
  of the arms' evaluations and the scorecard (chapters 4-8); ``tables.py``: the book's tables;
* ``plots_mechanism.py``, ``plots_study.py``: the mechanism page's and the study page's figures;
* ``diagrams.py``: the book's diagrams;
* ``mechanism_report.py``: the mechanism page's analysis: its tables and the phrases it pastes;
* ``study_report.py``: the study page's opening table of the ``small`` preset's choices;
* ``claims_summary.py``: the introduction's two claims tables (``book/claims_table.md``);
* ``provenance_summary.py``: where every committed number was made (``book/provenance.md``).

May import: all of ``condenser_lite``.
"""
