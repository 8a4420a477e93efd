"""The reproduction: the presets, the arms, the protocol and the evidence it leaves, in layers.

Each sub-folder imports only from those above it in this list (and from the pipeline below):

* ``configuration/``: the arms and claims by name, the settings tree and the named presets;
* ``statistics/``: the rules that turn numbers into verdicts, and numbers in words;
* ``evidence/``: the results file (provenance, reading it back) and the papers' published numbers;
* ``claims/``: the scorecard's checks, the claims judged by them, their multiplicity and one row
  per claim;
* ``runs/``: the arms' jobs, the protocol's job graph, its runner, estimates and merges.

The figures, tables and reports the chapters show are the book's, in ``condenser_book``.

May import: ``training``, ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
