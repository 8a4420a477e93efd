"""The reproduction: the presets, the arms, the protocol and the evidence it leaves.

* ``registry.py``: the arms and the claims, each named once (label, colour, parent, rule);
* ``settings_tree.py``: the settings as one tree (``Preset``: the model, the stages by name, the
  fine-tuning and STS-b recipes, the protocol's choices), each setting by one path, and the presets
  recorded in results files read back;
* ``presets.py``: the named presets (``micro``, ``tiny``, ``small``, ``colab``, ``paper``) and the
  stages they define;
* ``arms.py``: the arms (BERT, BERT-continued, Condenser, coCondenser, the ablations, a modified
  Condenser and its two controls) and what the protocol does to each;
* ``tasks.py``: the data the arms are evaluated on;
* ``jobs.py``: the job runner (one-thread worker processes, results on disk);
* ``protocol.py``: the whole scaled-down reproduction as one job graph;
* ``protocol_jobs.py``: what the protocol's fine-tuning and STS-b jobs run, and each finished part's line;
* ``run_record.py``: what a protocol run records about how it ran: precisions, seconds per part, workers;
* ``merge.py``: one results file from runs of a preset on different pre-training seeds;
* ``estimate.py``: the projected wall time, measured before long work;
* ``results.py``: the results file as evidence: provenance, headline, reading it back, and the
  readers of what it holds;
* ``health.py``: a reader's pre-training stage against the committed seeds' held-out curves;
* ``rules.py``: the rules that turn numbers into verdicts, the pre-registered ones among them;
* ``mechanism_rules.py``: the mechanism study's pre-registered rules (the modified Condenser, the
  scaling trend);
* ``onset.py``: when the faithful head switches on over a long Condenser stage (the onset rules);
* ``papers.py``: the papers' published numbers behind each claim, read from ``papers.json``;
* ``wording.py``: numbers in words (decimals, p-values, FLOPs, a comparison, the scaling trend);
* ``checks.py``: the scorecard's checks, one per claim, and what each reads in a results file;
* ``scorecard.py``: the papers' claims C0-C8 (and the modified Condenser's C0m-C8m and Am), each
  judged by its check, with the papers' numbers beside ours;
* ``multiplicity.py``: the tests behind the verdicts, their number (BH q-values, Holm) and the
  weak-verdict mark;
* ``claims_table.py``: one row per claim, for chapter 8 and the introduction;
* ``claims_summary.py``: the introduction's two claims tables from those rows;
* ``provenance_summary.py``: where every committed number was made, for the running page;
* ``plots.py``: the legibility rule every figure meets and the figures' shared style;
* ``plots_gauges.py``, ``plots_arms.py``: the figures of the pre-training gauges (chapters 1-2) and of
  the arms' evaluations and the scorecard (chapters 4-8); ``tables.py``: the book's tables;
* ``plots_mechanism.py``, ``plots_study.py``: the mechanism page's and the study page's figures;
* ``diagrams.py``: the book's diagrams;
* ``mechanism_report.py``: the mechanism page's analysis: its tables and the phrases it pastes;
* ``study_report.py``: the study page's opening table of the ``small`` preset's choices;
* ``release.py``: the committed checkpoints of a run.

May import: ``training``, ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
