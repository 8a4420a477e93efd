"""Root pytest configuration, shared by the unit tests and the notebooks run by ``pytest --nbval``.

When ``CONDENSER_LITE_DATA`` is unset and a local data mirror sits beside the checkout
(``../shared/data``, as on the machines this book is developed on), point the loaders at it, so
``pytest --nbval`` works as typed there; elsewhere the loaders use the Hugging Face Hub.
The variable is inherited by the notebook kernels that nbval starts.
"""

import os
from pathlib import Path

_MIRROR = Path(__file__).resolve().parent.parent / "shared" / "data"
if not os.environ.get("CONDENSER_LITE_DATA") and _MIRROR.is_dir():
    os.environ["CONDENSER_LITE_DATA"] = str(_MIRROR)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
