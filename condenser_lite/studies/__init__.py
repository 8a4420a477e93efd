"""The studies behind the book's two study pages: long runs of the reproduction's stages, judged by
pre-registered rules, whose results files are the pages' evidence.

* ``mechanism.py``: when the Condenser head needs [CLS] (``python -m condenser_lite mechanism``;
  the page "When does the head need [CLS]?", ``results/mechanism.json``).

May import: ``reproduction``, ``training``, ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
