"""condenser_lite: a small, readable reproduction of Condenser and coCondenser.

Gao & Callan, "Condenser: a Pre-training Architecture for Dense Retrieval" (EMNLP 2021) and
"Unsupervised Corpus Aware Language Model Pre-training for Dense Passage Retrieval" (ACL 2022).

One module per idea (DESIGN.md has the map): the data (``data``, ``wikitext``, ``tevatron``,
``tokenizer``, ``pretrain_data``, ``spans``), the papers' ideas (``model``, ``losses``,
``gradcache``), training (``training``, ``pretraining``, ``biencoder``, ``finetune``,
``similarity``), search and evaluation (``bm25``, ``search``, ``metrics``, ``analysis``), the
settings (``presets``, ``config``), the reproduction (``arms``, ``tasks``, ``jobs``,
``protocol``, ``scorecard``, ``plots``) and the command line (``cli``). Modules are imported
explicitly (``from condenser_lite.model import Condenser``) so that ``import condenser_lite``
stays cheap.
"""

__version__ = "0.1.0"
