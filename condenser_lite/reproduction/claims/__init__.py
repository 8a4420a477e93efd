"""The reproduction's claims: the papers' claims judged on the evidence.

* ``checks.py``: the scorecard's checks, one per claim, and what each reads in a results file;
* ``scorecard.py``: the papers' claims C0-C8 (and the modified Condenser's C0m-C8m and Am), each
  judged by its check, with the papers' numbers beside ours;
* ``multiplicity.py``: the tests behind the verdicts, their number (BH q-values, Holm) and the
  weak-verdict mark;
* ``claims_table.py``: one row per claim and the findings tables every page shows.

May import: ``configuration``, ``statistics``, ``evidence`` and the pipeline.
"""
