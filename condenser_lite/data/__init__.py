"""The data, from the Hugging Face Hub or a local mirror through one code path.

* ``sources.py``: the registry of data sets, where they come from (``resolve_mirror``), their
  identity by content, the general pre-training corpus and STS-b (chapter 1);
* ``wikitext.py``: Wikipedia / WikiText markup cleaned into sections;
* ``beir.py``: retrieval data in BEIR's layout: a BEIR name, a folder of your own, your documents;
* ``tevatron.py``: Tevatron's training schema (MS MARCO, NQ) and the low-data samples (chapter 4);
* ``tokenizer.py``: the book's WordPiece, trained once and cached, or a checkpoint's own;
* ``packing.py``: sentences packed into blocks, the held-out split and its fixed blocks (chapter 2).

May import: ``utils`` only.
"""
