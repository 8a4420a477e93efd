"""How a retriever turns a passage's token vectors into one vector, and how a folder says so.

The papers and Tevatron take the last layer's ``[CLS]`` vector and score by the dot product
(coCondenser eq. 13): the Condenser pre-trains exactly that vector. Models trained by
sentence-transformers often average the token vectors instead ("mean pooling") and normalise
the result, so that the dot product is a cosine; all-MiniLM-L6-v2 is one. Each model must be
read the way it was trained: its ``[CLS]`` vector was never asked to stand for the passage.

A sentence-transformers folder declares its pooling in ``modules.json`` (a ``Pooling`` module
with its ``config.json``, and a ``Normalize`` module when the vectors are normalised).
``read_pooling`` reads it; a folder without it (a plain transformers checkpoint, the book's own
models) is pooled by ``[CLS]``. ``write_pooling`` makes every folder this library saves a
sentence-transformers folder too, so ``SentenceTransformer(folder).encode(...)`` gives the
library's own vectors (without it, sentence-transformers would fall back to mean pooling, the
pitfall the authors' Condenser users met). Explained in chapter 4 (``notebooks/04_finetune.ipynb``).

    >>> Pooling.parse("mean+norm")
    Pooling(mode='mean', normalize=True)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..utils.errors import CheckpointError, ConfigError

MODES = ("cls", "mean")
ST_POOLING = "sentence_transformers.models.Pooling"
ST_NORMALIZE = "sentence_transformers.models.Normalize"
ST_TRANSFORMER = "sentence_transformers.models.Transformer"
# sentence-transformers' other pooling modes: the library cannot read a model trained with them
OTHER_ST_MODES = ("max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
# what sentence-transformers' MultipleNegativesRankingLoss divides cosines by (its scale of 20)
NORMALIZED_TEMPERATURE = 0.05


@dataclass(frozen=True)
class Pooling:
    """``mode``: ``"cls"`` (the last layer's first vector, the papers') or ``"mean"`` (the average
    of the real tokens' vectors, padding left out); ``normalize``: scale each vector to length 1."""

    mode: str = "cls"
    normalize: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"pooling mode {self.mode!r}: use one of {', '.join(MODES)}")

    @classmethod
    def parse(cls, text: "str | Pooling") -> "Pooling":
        """``"cls"``, ``"mean"``, ``"cls+norm"`` or ``"mean+norm"`` (a setting's spelling)."""
        if isinstance(text, Pooling):
            return text
        mode, plus, norm = str(text).strip().lower().partition("+")
        if mode not in MODES or (plus and norm != "norm"):
            raise ConfigError(f"pooling {text!r}: use cls, mean, cls+norm or mean+norm (+norm: unit-length vectors)")
        return cls(mode, bool(plus))

    def __str__(self) -> str:
        return self.mode + ("+norm" if self.normalize else "")

    @property
    def default_temperature(self) -> float | None:
        """The contrastive loss's temperature when a recipe gives none: 1 (``None``) for dot
        products, as the papers; sentence-transformers' 0.05 for unit vectors, whose cosines in
        [-1, 1] would give the softmax almost nothing to separate."""
        return NORMALIZED_TEMPERATURE if self.normalize else None

    def __call__(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[B, H]`` from the last layer's ``[B, L, H]`` and the ``[B, L]`` mask."""
        if self.mode == "cls":
            reps = hidden[:, 0]
        else:  # summed in float32: 256 bf16 vectors added in bf16 keep about two digits
            mask = attention_mask.unsqueeze(-1).float()
            reps = (hidden.float() * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(reps, dim=-1) if self.normalize else reps


CLS = Pooling()


def _read_json(path: str | None, where: str) -> object:
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{where}: {path} cannot be read as JSON ({type(err).__name__}); repair or remove "
                              "the sentence-transformers files") from err


def read_pooling(name_or_dir: str | os.PathLike) -> Pooling | None:
    """The pooling a sentence-transformers folder (or Hub id) declares, or ``None`` when it
    declares none (then the papers' ``[CLS]``). A pooling the library cannot compute is refused
    in one line. Chapter 4."""
    from ..utils.loading import hub_file

    modules = _read_json(hub_file(name_or_dir, "modules.json"), str(name_or_dir))
    if not isinstance(modules, list):
        return None
    kinds = {m.get("type"): m for m in modules if isinstance(m, dict)}
    if ST_POOLING not in kinds:
        return None
    folder = kinds[ST_POOLING].get("path") or ""
    config = _read_json(hub_file(name_or_dir, f"{folder}/config.json" if folder else "config.json"), str(name_or_dir))
    if not isinstance(config, dict):
        raise CheckpointError(f"{name_or_dir}: modules.json names a Pooling module in {folder or '.'}/ but its "
                              "config.json is missing; restore it, or pass the pooling as a setting")
    on = [k.removeprefix("pooling_mode_") for k, v in config.items() if k.startswith("pooling_mode_") and v]
    modes = [{"cls_token": "cls", "mean_tokens": "mean"}.get(m, m) for m in on]
    if len(modes) != 1 or modes[0] not in MODES:
        raise CheckpointError(f"{name_or_dir} pools by {' + '.join(on) or 'nothing'}, which this library does not "
                              "compute (it reads cls or mean); pass the pooling as a setting to read it another way")
    return Pooling(modes[0], ST_NORMALIZE in kinds)


def checkpoint_pooling(name_or_dir: str | os.PathLike) -> Pooling:
    """``read_pooling``, or ``[CLS]`` for a folder that declares none. Chapter 4."""
    return read_pooling(name_or_dir) or CLS


def write_pooling(folder: str | os.PathLike, pooling: Pooling = CLS, max_seq_length: int | None = None) -> None:
    """Make a saved model folder a sentence-transformers folder pooled as ``pooling``:
    ``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json`` (and
    ``2_Normalize`` for unit vectors). An untied retriever's ``query/`` and ``passage/`` each get
    their own. Chapter 4."""
    folder = Path(folder)
    if (folder / "query").is_dir() and not (folder / "config.json").is_file():
        for side in ("query", "passage"):
            write_pooling(folder / side, pooling, max_seq_length)
        return
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    hidden, max_seq_length = config["hidden_size"], max_seq_length or config.get("max_position_embeddings")
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_POOLING}]
    if pooling.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": ST_NORMALIZE})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pool = {"word_embedding_dimension": hidden, "pooling_mode_cls_token": pooling.mode == "cls",
              "pooling_mode_mean_tokens": pooling.mode == "mean", "pooling_mode_max_tokens": False,
              "pooling_mode_mean_sqrt_len_tokens": False}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pool, indent=2) + "\n")
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False}, indent=2) + "\n")
