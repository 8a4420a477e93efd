"""The two pre-training models of the book: a plain MLM baseline and Condenser.

`BertMLM` is BERT's masked-language-model objective on a `BertForMaskedLM`.
`Condenser` (Gao & Callan, EMNLP 2021, section 3) splits the same backbone into
early and late layers and adds a small head that must predict masked tokens from
the *late* CLS vector plus the *early* token vectors, so the CLS has to carry what
the late layers learned about the whole text. Both compute MLM logits only at
masked positions: on a CPU the vocabulary projection over every position is the
most expensive part of a small model's step.

Explained in chapter 2, `notebooks/02_condenser.ipynb`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from torch import nn
from transformers import AutoConfig, AutoModel, BertConfig, BertForMaskedLM, PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer
from transformers.utils import logging as hf_logging

from .errors import CheckpointError

# Paper settings for bert-base-uncased (12 layers): head reads the output of layer 6,
# 2 head layers, backbone MLM kept as the "semantic constraint" (section 3.4).
PAPER_CONDENSER = dict(skip_from=6, n_head_layers=2, late_mlm=True, head_weight=1.0, late_weight=1.0)

HEAD_FILE = "condenser_head.pt"
# The authors' checkpoints (github luyug/Condenser, e.g. Hub `Luyu/co-condenser-marco`)
# store the head as `model.pt` with keys `c_head.<i>....`; we read that name too.
AUTHORS_HEAD_FILE = "model.pt"
CONDENSER_CONFIG_FILE = "condenser_config.json"
# What loading a checkpoint folder reads (weights, configs, Condenser head, tokenizer): its
# content key hashes these and nothing else (logs and records hold timings that differ per run).
MODEL_FILES = ("config.json", CONDENSER_CONFIG_FILE, HEAD_FILE, AUTHORS_HEAD_FILE, "*.safetensors",
               "*.safetensors.index.json", "pytorch_model*.bin", "vocab.txt", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json")
# Weights of a pre-training checkpoint that an encoder or MLM model leaves out on purpose:
# the MLM / NSP heads and BERT's pooler. Their absence is not worth a report.
ENCODER_DROPS = ("cls.", "pooler.", "bert.pooler.")
MLM_DROPS = ("cls.seq_relationship.", "pooler.", "bert.pooler.")


def tiny_bert_config(vocab_size: int = 8192, **overrides) -> BertConfig:
    """A scaled-down BERT that a 2-core CPU pre-trains in minutes.

    4 layers, hidden 128, 4 heads, FFN 512. `max_position_embeddings=128`: BERT's
    position ids start at 0, so 128 rows cover the 128-token blocks we pre-train on;
    a longer input then fails loudly instead of silently using position rows that
    pre-training never touched (pass `max_position_embeddings=...` to change it).
    Any `BertConfig` field can be overridden.

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """
    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=128,
    )
    kwargs.update(overrides)
    if kwargs["hidden_size"] % kwargs["num_attention_heads"]:
        raise ValueError(
            f"hidden_size={kwargs['hidden_size']} must be divisible by "
            f"num_attention_heads={kwargs['num_attention_heads']}; change one of them."
        )
    return BertConfig(**kwargs)


def masked_lm_loss(mlm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over masked tokens, projecting only the masked positions.

    Identical to `BertForMaskedLM(labels=...)` (which projects every position and
    then ignores the -100 labels), at a fraction of the cost.

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """
    selected = labels != -100
    if not bool(selected.any()):
        raise ValueError(
            "labels has no masked position (all -100), so the MLM loss is undefined; "
            "build batches with pretrain_data.MLMCollator, which masks at least one token per sequence."
        )
    logits = mlm_head(hidden[selected])  # [n_masked, vocab]
    return F.cross_entropy(logits.float(), labels[selected])


def checkpoint_key(name_or_dir: str | os.PathLike | None) -> str | None:
    """What names a checkpoint in a cache key: a hash of the content of its folder's
    ``MODEL_FILES`` (with an untied retriever's ``query/`` and ``passage/``), so replacing the
    files at a path gives a new key and two folders holding the same weights share one. A Hub id
    is named by itself: asking the local Hub cache for its revision would give one key before the
    first download and another after it. Chapter 2."""
    from .data import content_id  # data.py imports datasets: only when a key is needed

    if name_or_dir is None:
        return None
    path = Path(name_or_dir).expanduser()
    if not path.is_dir():
        return str(name_or_dir)
    files = {}
    for folder in (path, path / "query", path / "passage"):
        for pattern in MODEL_FILES:
            for f in folder.glob(pattern):
                files[f.relative_to(path).as_posix()] = content_id(f, whole=True)  # every weight counts
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def check_checkpoint(name_or_dir: str | os.PathLike) -> None:
    """Raise ``CheckpointError`` when ``name_or_dir`` is a local path that is not a saved model
    folder (missing, or without ``config.json``); a Hub id passes. Chapter 4."""
    name = str(name_or_dir)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "query" / "config.json").is_file():
            raise CheckpointError(f"{path} has no config.json, so it is not a saved model folder (an unfinished "
                                  "stage, or the wrong folder?); pass a folder written by save_pretrained")
    elif path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CheckpointError(f"no model folder {name!r} (no such directory); pass a folder written by "
                              "save_pretrained, or a Hub id such as bert-base-uncased")


def _not_a_load_report(record: logging.LogRecord) -> bool:
    return "LOAD REPORT" not in str(record.msg)


def _no_bar(factory, args, kwargs):
    return hf_logging.EmptyTqdm(*args, **kwargs)


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide transformers' per-tensor ``Loading weights`` bar and its load report unless the
    library's logger is at DEBUG (the command line's ``--debug``)."""
    if logging.getLogger("condenser_lite").isEnabledFor(logging.DEBUG):
        yield
        return
    # The load report is a table of every unused or missing weight; the caller reports what
    # matters. A filter, not a higher level: at level WARNING or above transformers 5 logs
    # another warning per load (its tensor-parallel plan check).
    report = logging.getLogger("transformers.modeling_utils")
    report.addFilter(_not_a_load_report)
    # A hook on transformers' own bars only: huggingface_hub's download bars of a Hub id stay.
    set_hook = getattr(hf_logging, "set_tqdm_hook", None)  # transformers >= 5.x; before, the bar shows
    previous = set_hook(_no_bar) if set_hook else None
    try:
        yield
    finally:
        report.removeFilter(_not_a_load_report)
        if set_hook:
            set_hook(previous)


def from_checkpoint(model_class, name_or_dir: str | os.PathLike, dropped: tuple[str, ...] = (), **kwargs):
    """``model_class.from_pretrained(name_or_dir, **kwargs)`` with errors that name the checkpoint
    (``CheckpointError``: a missing folder, a damaged weights file), without transformers' loading
    bar (shown with ``--debug``) and without its load report for weights left out on purpose (keys
    starting with ``dropped``, e.g. the MLM head when a retriever loads a pre-trained checkpoint):
    only weights that are really missing (left at random initialisation) or unexpected are
    reported, in one warning. Chapter 4."""
    check_checkpoint(name_or_dir)
    try:
        with _quiet_loading():
            model, info = model_class.from_pretrained(name_or_dir, output_loading_info=True, **kwargs)
    except (SafetensorError, OSError, EOFError, RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise CheckpointError(
            f"cannot load {name_or_dir} as {getattr(model_class, '__name__', model_class)} ({type(err).__name__}: "
            f"{first}). A local folder's weights may be damaged (a copy cut short?): copy them again or re-run "
            "what wrote them; a Hub id needs network access once (or the folder it was saved to)") from err
    missing = sorted(info["missing_keys"])
    unexpected = sorted(k for k in info["unexpected_keys"] if not k.startswith(dropped))
    if missing or unexpected:
        warnings.warn(f"loading {name_or_dir} as {type(model).__name__}: {len(missing)} weights missing from the "
                      f"checkpoint, left at random initialisation {missing[:5]}; {len(unexpected)} unexpected "
                      f"weights ignored {unexpected[:5]}. Is it the right checkpoint?", stacklevel=2)
    return model


def _as_backbone(model: BertForMaskedLM | str | os.PathLike | nn.Module, **load_kwargs) -> BertForMaskedLM:
    """A `BertForMaskedLM` from a path / Hub id, a `BertMLM`, or itself."""
    if isinstance(model, (str, os.PathLike)):
        return from_checkpoint(BertForMaskedLM, model, MLM_DROPS, **load_kwargs)
    if isinstance(model, BertMLM):
        return model.backbone
    if isinstance(model, BertForMaskedLM):
        return model
    raise TypeError(
        f"expected a BertForMaskedLM, a BertMLM, or a checkpoint path / Hub id, got {type(model).__name__}"
    )


def dropout_kwargs(dropout: float | None) -> dict:
    """Config overrides that set a BERT encoder's hidden and attention dropout (``None``: keep
    the checkpoint's). Fine-tuning sets it because the ``small`` book budget pre-trains without
    dropout (as Cramming does) and fine-tunes with BERT's usual 0.1 (chapter 4)."""
    if dropout is None:
        return {}
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout={dropout!r} must be in [0, 1) or None (the checkpoint's own)")
    return {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}


def load_encoder(name_or_dir: str | os.PathLike, **kwargs) -> PreTrainedModel:
    """The plain encoder of a pre-trained checkpoint (a `BertModel` for BERT/Condenser).

    A Condenser checkpoint is an ordinary `BertForMaskedLM` checkpoint, so this is
    just `AutoModel`; the Condenser head is not used after pre-training. BERT's pooler
    is left out (retrieval uses the raw last-layer CLS).

    Dropping a pre-training checkpoint's MLM head is expected here and not reported; weights
    that are really missing are (``from_checkpoint``).

    Explained in chapter 4, `notebooks/04_finetune.ipynb`.
    """
    check_checkpoint(name_or_dir)
    try:
        config = AutoConfig.from_pretrained(name_or_dir)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"cannot read the config of {name_or_dir} ({type(err).__name__}: {err})") from err
    if config.model_type == "bert":
        kwargs.setdefault("add_pooling_layer", False)
    return from_checkpoint(AutoModel, name_or_dir, ENCODER_DROPS, **kwargs)


@dataclass
class MLMOutput:
    """`loss`: mean CE over masked tokens (None without labels); `cls`: last-layer CLS [B, H]."""

    loss: torch.Tensor | None
    cls: torch.Tensor


class BertMLM(nn.Module):
    """Plain masked-language-model pre-training (the "BERT" arm of the experiments).

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """

    def __init__(self, backbone: BertForMaskedLM):
        super().__init__()
        self.backbone = backbone

    @property
    def config(self) -> BertConfig:
        return self.backbone.config

    @classmethod
    def from_config(cls, config: BertConfig) -> "BertMLM":
        return cls(BertForMaskedLM(config))

    @classmethod
    def from_pretrained(cls, name_or_dir: str | os.PathLike, **kwargs) -> "BertMLM":
        return cls(from_checkpoint(BertForMaskedLM, name_or_dir, MLM_DROPS, **kwargs))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> MLMOutput:
        hidden = self.backbone.bert(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        loss = None if labels is None else masked_lm_loss(self.backbone.cls, hidden, labels)
        return MLMOutput(loss=loss, cls=hidden[:, 0])

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """A plain HF `BertForMaskedLM` checkpoint (config + safetensors)."""
        self.backbone.save_pretrained(save_directory, **kwargs)


@dataclass
class CondenserOutput:
    """`loss` = head_weight * head_loss + late_weight * late_loss (None without labels).

    `cls` is the backbone's late (last-layer) CLS [B, H], before any pooler: the
    vector fine-tuning and coCondenser's contrastive loss use.
    """

    loss: torch.Tensor | None
    head_loss: torch.Tensor | None
    late_loss: torch.Tensor | None
    cls: torch.Tensor


class Condenser(nn.Module):
    """Condenser: BERT backbone + a head that sees [late CLS; early tokens].

    backbone layers 1..skip_from are the "early" encoder, the rest the "late" one
    (paper eq. 6-7; ``skip_from=0``, the head reading the embeddings, is a variant the
    mechanism page studies, not the paper's design). The head is `n_head_layers` ordinary BERT layers over the late
    CLS followed by the early token vectors (eq. 8), trained with MLM (eq. 9). With
    `late_mlm` the backbone's own MLM loss is added (eq. 10-11), through the same
    MLM head `backbone.cls`, so the shared projection W of the paper is shared here.

    Two more deviations the mechanism page tries, both off by default: ``detach_early``
    (E3) stops the head's gradient at the early token states, so the early layers learn
    only from the late MLM loss; ``head_input_ids``/``head_labels`` in ``forward`` (E5,
    built by ``pretrain_data.MLMCollator(head_mlm_probability=...)``) give the head the
    early states of a more heavily masked copy of the block and the labels of every
    position masked there, as RetroMAE's decoder (Xiao et al., 2022).

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """

    def __init__(
        self,
        backbone: BertForMaskedLM,
        skip_from: int = 6,
        n_head_layers: int = 2,
        late_mlm: bool = True,
        head_weight: float = 1.0,
        late_weight: float = 1.0,
        detach_early: bool = False,
    ):
        super().__init__()
        if not isinstance(backbone, BertForMaskedLM):
            raise TypeError(f"backbone must be a transformers BertForMaskedLM, got {type(backbone).__name__}")
        n_layers = backbone.config.num_hidden_layers
        # skip_from=0 (the head reads the embeddings) is not the paper's design: the mechanism
        # page's variant E4, where the early token states carry no context of their own
        if not isinstance(skip_from, int) or not 0 <= skip_from < n_layers:
            raise ValueError(
                f"skip_from={skip_from!r} must be an int with 0 <= skip_from < num_hidden_layers={n_layers}: "
                "the head reads the output of layer skip_from (0: the embeddings), and at least one late layer "
                "must follow it."
            )
        if not isinstance(n_head_layers, int) or n_head_layers < 1:
            raise ValueError(f"n_head_layers={n_head_layers!r} must be an int >= 1.")
        if head_weight < 0 or late_weight < 0:
            raise ValueError(f"head_weight={head_weight} and late_weight={late_weight} must be >= 0.")
        self.backbone = backbone
        self.skip_from = skip_from
        self.n_head_layers = n_head_layers
        self.late_mlm = bool(late_mlm)
        self.head_weight = float(head_weight)
        self.late_weight = float(late_weight)
        self.detach_early = bool(detach_early)
        # Same config object as the backbone, so switching the backbone's attention
        # implementation (e.g. to "eager") switches the head too.
        self.head = nn.ModuleList([BertLayer(backbone.config) for _ in range(n_head_layers)])
        # BERT's own init: normal(0, initializer_range) weights, zero biases, LayerNorm 1/0.
        self.head.apply(backbone._init_weights)

    @property
    def config(self) -> BertConfig:
        return self.backbone.config

    def condenser_config(self) -> dict:
        return dict(
            skip_from=self.skip_from,
            n_head_layers=self.n_head_layers,
            late_mlm=self.late_mlm,
            head_weight=self.head_weight,
            late_weight=self.late_weight,
            # a variant's field only where it is on, so the paper's Condenser saves what it always did
            **({"detach_early": True} if self.detach_early else {}),
        )

    # ---- forward -------------------------------------------------------------------

    def head_forward(
        self, late_cls: torch.Tensor, early_tokens: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Run the head over [late CLS; early tokens] (paper eq. 8) -> [B, T, H].

        `late_cls` is [B, H] or [B, 1, H]; `early_tokens` the early layer's vectors at
        positions 1.. ([B, T-1, H]); `attention_mask` the ordinary [B, T] 0/1 mask.
        """
        if late_cls.dim() == 2:
            late_cls = late_cls.unsqueeze(1)
        hidden = torch.cat([late_cls, early_tokens], dim=1)
        # Built for whichever attention implementation is active (additive float
        # mask for eager, boolean for sdpa, None when nothing is padded).
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        for layer in self.head:
            hidden = layer(hidden, mask)  # transformers 5: returns a Tensor, not a tuple
        return hidden

    def early_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The output of layer ``skip_from`` alone (the embeddings and the early layers), for
        the head's own copy of the block (variant E5). [B, T, H]"""
        bert = self.backbone.bert
        hidden = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        for layer in bert.encoder.layer[: self.skip_from]:
            hidden = layer(hidden, mask)
        return hidden

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        head_input_ids: torch.Tensor | None = None,
        head_labels: torch.Tensor | None = None,
    ) -> CondenserOutput:
        out = self.backbone.bert(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, output_hidden_states=True
        )
        # hidden_states[0] is the embedding output, so [skip_from] is the output of layer skip_from.
        early = out.hidden_states[self.skip_from]
        late = out.last_hidden_state
        cls = late[:, 0]
        if labels is None:
            return CondenserOutput(loss=None, head_loss=None, late_loss=None, cls=cls)

        if (head_input_ids is None) != (head_labels is None):
            raise ValueError("pass head_input_ids and head_labels together (MLMCollator(head_mlm_probability=...)).")
        if head_input_ids is not None:  # E5: the head reads a more heavily masked copy of the block
            early = self.early_states(head_input_ids, attention_mask, token_type_ids)
        if self.detach_early:  # E3: the head's loss does not train the early layers
            early = early.detach()
        head_hidden = self.head_forward(late[:, :1], early[:, 1:], attention_mask)
        head_loss = masked_lm_loss(self.backbone.cls, head_hidden, labels if head_labels is None else head_labels)
        loss = self.head_weight * head_loss
        late_loss = None
        if self.late_mlm:
            late_loss = masked_lm_loss(self.backbone.cls, late, labels)
            loss = loss + self.late_weight * late_loss
        return CondenserOutput(loss=loss, head_loss=head_loss, late_loss=late_loss, cls=cls)

    # ---- construction --------------------------------------------------------------

    @classmethod
    def from_config(cls, config: BertConfig, **condenser_kwargs) -> "Condenser":
        """A randomly initialised Condenser with a BERT-shaped `config`."""
        return cls(BertForMaskedLM(config), **condenser_kwargs)

    @classmethod
    def from_bert(
        cls,
        model: BertForMaskedLM | str | os.PathLike | nn.Module,
        skip_from: int,
        n_head_layers: int = 2,
        late_mlm: bool = True,
        head_weight: float = 1.0,
        late_weight: float = 1.0,
        detach_early: bool = False,
        **load_kwargs,
    ) -> "Condenser":
        """Start a Condenser from a plain MLM checkpoint with a fresh head (paper section 3.4).

        `model` is a checkpoint dir / Hub id, a `BertForMaskedLM` or a `BertMLM`
        (used in place, not copied). This is how the "Condenser" arm continues from
        the "BERT" arm.
        """
        backbone = _as_backbone(model, **load_kwargs)
        return cls(backbone, skip_from, n_head_layers, late_mlm, head_weight, late_weight, detach_early)

    @classmethod
    def from_pretrained(
        cls,
        name_or_dir: str | os.PathLike,
        head: str = "load",
        backbone_kwargs: dict | None = None,
        **overrides,
    ) -> "Condenser":
        """Load a Condenser saved by `save_pretrained`, or one of the authors' checkpoints.

        `head="load"` requires the head weights (`condenser_head.pt`, or the authors'
        `model.pt`) and raises if they are missing; `head="random"` starts a fresh head
        on the loaded backbone. `overrides` replace entries of `condenser_config.json`
        (skip_from, n_head_layers, late_mlm, head_weight, late_weight); `backbone_kwargs`
        go to `BertForMaskedLM.from_pretrained` (e.g. `attn_implementation="eager"`). Without that
        file (the authors' checkpoints), n_head_layers is read from the head weights
        and skip_from defaults to half the layers (6 for bert-base, the paper's value).
        """
        if head not in ("load", "random"):
            raise ValueError(f"head={head!r} must be 'load' or 'random'.")
        allowed = {*PAPER_CONDENSER, "detach_early"}
        unknown = set(overrides) - allowed
        if unknown:
            raise TypeError(f"unknown Condenser argument(s) {sorted(unknown)}; allowed: {sorted(allowed)}")

        backbone = from_checkpoint(BertForMaskedLM, name_or_dir, MLM_DROPS, **(backbone_kwargs or {}))
        settings = dict(_read_condenser_config(name_or_dir) or {})
        state = None
        if head == "load":
            state = _read_head_state(name_or_dir)
            if state is None:
                raise CheckpointError(
                    f"no Condenser head weights ({HEAD_FILE} or {AUTHORS_HEAD_FILE}) found for {name_or_dir!r}. "
                    "A plain BERT checkpoint has no head: pass head='random' to start a fresh one "
                    "(or use Condenser.from_bert)."
                )
            settings.setdefault("n_head_layers", 1 + max(int(k.split(".")[0]) for k in state))
        settings.update(overrides)
        settings.setdefault("skip_from", backbone.config.num_hidden_layers // 2)
        settings.setdefault("n_head_layers", PAPER_CONDENSER["n_head_layers"])
        model = cls(backbone, **settings)
        if state is not None:
            missing, unexpected = model.head.load_state_dict(state, strict=False)
            if missing or unexpected:
                raise ValueError(
                    f"head weights in {name_or_dir!r} do not fit n_head_layers={model.n_head_layers}: "
                    f"missing {missing[:4]}..., unexpected {unexpected[:4]}...; "
                    "pass the right n_head_layers, or head='random'."
                )
        return model

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Backbone as a plain `BertForMaskedLM` checkpoint + `condenser_head.pt` + `condenser_config.json`.

        `AutoModel` / `AutoModelForMaskedLM` load the directory with no custom code;
        `Condenser.from_pretrained` loads all of it.
        """
        self.backbone.save_pretrained(save_directory, **kwargs)
        if not kwargs.get("is_main_process", True):
            return
        head_state = {f"head.{k}": v.detach().cpu() for k, v in self.head.state_dict().items()}
        torch.save(head_state, os.path.join(save_directory, HEAD_FILE))
        with open(os.path.join(save_directory, CONDENSER_CONFIG_FILE), "w") as f:
            json.dump(self.condenser_config(), f, indent=2)


def _hub_file(name_or_dir: str | os.PathLike, filename: str) -> str | None:
    """Path of `filename` in a local checkpoint dir, or downloaded from a Hub repo; None if absent."""
    if os.path.isdir(name_or_dir):
        path = os.path.join(name_or_dir, filename)
        return path if os.path.isfile(path) else None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return hf_hub_download(str(name_or_dir), filename)
    except (EntryNotFoundError, LocalEntryNotFoundError):
        return None


def has_head(name_or_dir: str | os.PathLike) -> bool:
    """Whether a checkpoint (folder or Hub id) carries Condenser head weights (ours or the
    authors' file). The authors' `Luyu/condenser` does not: their README says the heads "will be
    added soon". Explained in chapter 3, `notebooks/03_cocondenser.ipynb`."""
    return any(_hub_file(name_or_dir, f) is not None for f in (HEAD_FILE, AUTHORS_HEAD_FILE))


def _read_condenser_config(name_or_dir: str | os.PathLike) -> dict | None:
    path = _hub_file(name_or_dir, CONDENSER_CONFIG_FILE)
    if path is None:
        return None
    with open(path) as f:
        return json.load(f)


def _read_head_state(name_or_dir: str | os.PathLike) -> dict[str, torch.Tensor] | None:
    """Head weights keyed like our `nn.ModuleList` ("0.attention..."), or None if absent."""
    for filename in (HEAD_FILE, AUTHORS_HEAD_FILE):
        path = _hub_file(name_or_dir, filename)
        if path is None:
            continue
        try:
            raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for a cut-short or garbled file
            raise CheckpointError(f"{path} cannot be read ({type(err).__name__}: {err}); the file is damaged "
                                  "(a copy cut short?): copy it again, or re-run the stage that wrote it") from err
        state = {}
        for key, value in raw.items():
            # ours: "head.<i>..."; the authors': "c_head.<i>...". Other keys (none in
            # the authors' files we know of) are not head weights and are skipped.
            for prefix in ("head.", "c_head."):
                if key.startswith(prefix):
                    state[key[len(prefix):]] = value
        if not state:
            raise ValueError(f"{path} holds no Condenser head weights (no 'head.' or 'c_head.' keys).")
        return state
    return None
