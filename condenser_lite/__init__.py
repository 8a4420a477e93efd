"""condenser_lite: a small, readable reproduction of Condenser and coCondenser.

Gao & Callan, "Condenser: a Pre-training Architecture for Dense Retrieval" (EMNLP 2021) and
"Unsupervised Corpus Aware Language Model Pre-training for Dense Passage Retrieval" (ACL 2022).

Folders along the pipeline, each importing only from the ones listed after it (DESIGN.md has
the map, one line per file; ``tests/test_layering.py`` keeps the order):

* ``book.py``, ``cli.py``, ``parameters.py``: the chapters' setup and the command line;
* ``reproduction/``: presets, arms, the protocol, the results, the scorecard, the figures;
* ``training/``: the loop, pre-training stages, fine-tuning, STS-b;
* ``retrieval/``: the bi-encoder, BM25, search, run files, metrics;
* ``modeling/``: **the papers' ideas**: the Condenser, masking, spans, the losses, the gradient
  cache, the gauges (start here);
* ``data/``: the data sets, from the Hub or a local mirror, the tokenizer, packing;
* ``utils/``: errors, settings checks, the cache, devices.

Every name has one import path, its module's
(``from condenser_lite.modeling.condenser import Condenser``), so that ``import condenser_lite``
stays cheap and a reader always knows where a name lives.
"""

from __future__ import annotations

__version__ = "0.2.0"
