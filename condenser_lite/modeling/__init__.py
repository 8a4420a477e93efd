"""The papers' ideas: what the book builds step by step, in the order a reader meets them.

* ``condenser.py``: the plain MLM baseline (``BertMLM``) and ``Condenser``, the backbone split
  at layer ``skip_from`` with a head that reads the *late* [CLS] beside the *early* token states
  (Condenser section 3; chapter 2);
* ``variant.py``: not the paper's design, ``CondenserVariant``: the mechanism page's deviations
  and chapter 8's control without a bottleneck;
* ``mlm.py``: the MLM loss at masked positions only, which both train on, and the encoder and MLM
  head inside any model of the book (chapter 2);
* ``masking.py``: whole-word MLM masking, the objective both share (chapter 2);
* ``spans.py``: coCondenser's two random spans per document (coCondenser section 3.2; chapter 3);
* ``losses.py``: the losses the papers write down: span contrastive, retrieval, cosine (chapters 3, 4, 7);
* ``gradcache.py``: the exact gradient cache and the coCondenser update on it (section 3.3; page 3b);
* ``gauges.py``: the lenses that ask whether [CLS] does its job: attention entropy, held-out MLM
  loss, the [CLS]-swap gap and reliance (chapters 1, 2, 5).

May import: ``utils`` only. Everything else in the library builds on these.
"""

from . import variant  # noqa: F401  (so that Condenser.from_pretrained knows the variant's switches)
