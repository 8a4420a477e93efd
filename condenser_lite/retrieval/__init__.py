"""Dense retrieval as the papers evaluate it: the bi-encoder, BM25, search, run files, metrics.

* ``biencoder.py``: the DPR-style bi-encoder, its batches and its loss step (chapter 4);
* ``pooling.py``: how token vectors become one (``[CLS]`` or mean), read from and written to
  sentence-transformers folders (chapter 4);
* ``bm25.py``: BM25, the baseline and the source of round-1 negatives (chapter 4);
* ``search.py``: encoding a corpus and exact inner-product search (FAISS), evaluating a retriever;
* ``runfiles.py``: TREC run files that hold any id, read back with checks;
* ``metrics.py``: ir_measures, nb-recall (coCondenser eq. 17), DPR's top-k accuracy.

May import: ``modeling``, ``data`` and ``utils``.
"""
