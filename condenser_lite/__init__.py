"""condenser_lite: a small, readable reproduction of Condenser and coCondenser.

Gao & Callan, "Condenser: a Pre-training Architecture for Dense Retrieval" (EMNLP 2021) and
"Unsupervised Corpus Aware Language Model Pre-training for Dense Passage Retrieval" (ACL 2022).

One module per idea (see DESIGN.md): ``data``, ``tokenizer``, ``pretrain_data``, ``model``,
``spans``, ``losses``, ``gradcache``, ``training``, ``retrieval``, ``metrics``, ``similarity``,
``analysis``, ``plots``, ``config``, ``experiments``. Modules are imported explicitly
(``from condenser_lite.model import Condenser``) so that ``import condenser_lite`` stays cheap.
"""

__version__ = "0.1.0"
