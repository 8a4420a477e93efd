"""The reproduction's statistics: the rules that turn numbers into verdicts.

* ``rules.py``: the rules, the pre-registered ones among them, and the paired tests they use
  (a study's own rules sit with the study, in ``studies/``);
* ``wording.py``: numbers in words (decimals, p-values, FLOPs, a comparison, the scaling trend).

May import: ``configuration`` and the pipeline (``training``, ``retrieval``, ``modeling``,
``data``, ``utils``).
"""
