"""The two pre-training models of the book: a plain MLM baseline and Condenser.

`BertMLM` is BERT's masked-language-model objective on a `BertForMaskedLM`.
`Condenser` (Gao & Callan, EMNLP 2021, section 3) splits the same backbone into
early and late layers and adds a small head that must predict masked tokens from
the *late* CLS vector plus the *early* token vectors, so the CLS has to carry what
the late layers learned about the whole text. Both train on the MLM loss at masked
positions only (``mlm.py``).

Explained in chapter 2, `notebooks/02_condenser.ipynb`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
from torch import nn
from transformers import BertConfig, BertForMaskedLM
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer

from ..utils.errors import CheckpointError
from ..utils.loading import (
    AUTHORS_HEAD_FILE,
    CONDENSER_CONFIG_FILE,
    HEAD_FILE,
    MLM_DROPS,
    from_checkpoint,
    read_condenser_config,
    read_head_state,
)
from .mlm import masked_lm_loss

# Paper settings for bert-base-uncased (12 layers): head reads the output of layer 6,
# 2 head layers, backbone MLM kept as the "semantic constraint" (section 3.4).
PAPER_CONDENSER = dict(skip_from=6, n_head_layers=2, late_mlm=True, head_weight=1.0, late_weight=1.0)


def as_backbone(model: BertForMaskedLM | str | os.PathLike | nn.Module, **load_kwargs) -> BertForMaskedLM:
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

    The mechanism page's deviations and chapter 8's control without a bottleneck live apart, in
    `CondenserVariant` (``variant.py``); `from_pretrained` gives one back where the saved
    ``condenser_config.json`` names its switches.

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """

    SETTINGS = tuple(PAPER_CONDENSER)  # what condenser_config.json holds

    def __init__(
        self,
        backbone: BertForMaskedLM,
        skip_from: int = 6,
        n_head_layers: int = 2,
        late_mlm: bool = True,
        head_weight: float = 1.0,
        late_weight: float = 1.0,
    ):
        super().__init__()
        if not isinstance(backbone, BertForMaskedLM):
            raise TypeError(f"backbone must be a transformers BertForMaskedLM, got {type(backbone).__name__}")
        n_layers = backbone.config.num_hidden_layers
        # skip_from=0 (the head reads the embeddings) is not the paper's design: the mechanism
        # page's variant that reads the embeddings, whose token states carry no context of their own
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

    def early_and_late(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                       token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's early token states (the output of layer ``skip_from``, eq. 6) and its
        late ones (the last layer, eq. 7), each [B, T, H], from one pass."""
        out = self.backbone.bert(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, output_hidden_states=True
        )
        # hidden_states[0] is the embedding output, so [skip_from] is the output of layer skip_from.
        return out.hidden_states[self.skip_from], out.last_hidden_state

    def condenser_loss(self, early: torch.Tensor, late: torch.Tensor, attention_mask: torch.Tensor | None,
                       head_labels: torch.Tensor, late_labels: torch.Tensor) -> CondenserOutput:
        """The head over [late CLS; early tokens] (eq. 8), its MLM loss (eq. 9) and, with
        ``late_mlm``, the backbone's own (eq. 10), weighted into the total (eq. 11). In the
        paper both losses predict the same masked tokens: ``head_labels`` is ``late_labels``."""
        head_hidden = self.head_forward(late[:, :1], early[:, 1:], attention_mask)
        head_loss = masked_lm_loss(self.backbone.cls, head_hidden, head_labels)
        loss = self.head_weight * head_loss
        late_loss = None
        if self.late_mlm:
            late_loss = masked_lm_loss(self.backbone.cls, late, late_labels)
            loss = loss + self.late_weight * late_loss
        return CondenserOutput(loss=loss, head_loss=head_loss, late_loss=late_loss, cls=late[:, 0])

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> CondenserOutput:
        early, late = self.early_and_late(input_ids, attention_mask, token_type_ids)
        if labels is None:
            return CondenserOutput(loss=None, head_loss=None, late_loss=None, cls=late[:, 0])
        return self.condenser_loss(early, late, attention_mask, labels, labels)

    # ---- construction --------------------------------------------------------------

    @classmethod
    def from_config(cls, config: BertConfig, **condenser_kwargs) -> "Condenser":
        """A randomly initialised Condenser with a BERT-shaped `config`."""
        return cls(BertForMaskedLM(config), **condenser_kwargs)

    @classmethod
    def from_bert(cls, model: BertForMaskedLM | str | os.PathLike | nn.Module, skip_from: int,
                  backbone_kwargs: dict | None = None, **condenser_kwargs) -> "Condenser":
        """Start a Condenser from a plain MLM checkpoint with a fresh head (paper section 3.4).

        `model` is a checkpoint dir / Hub id, a `BertForMaskedLM` or a `BertMLM`
        (used in place, not copied). This is how the "Condenser" arm continues from
        the "BERT" arm. `condenser_kwargs`: n_head_layers, late_mlm, head_weight, late_weight;
        `backbone_kwargs` go to `BertForMaskedLM.from_pretrained`.
        """
        return cls(as_backbone(model, **(backbone_kwargs or {})), skip_from, **condenser_kwargs)

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
        cls.class_for(overrides)  # an unknown argument, before any file is read

        backbone = from_checkpoint(BertForMaskedLM, name_or_dir, MLM_DROPS, **(backbone_kwargs or {}))
        settings = dict(read_condenser_config(name_or_dir) or {})
        state = None
        if head == "load":
            state = read_head_state(name_or_dir)
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
        model = cls.class_for(settings)(backbone, **settings)
        if state is not None:
            model.load_head(state, name_or_dir)
        return model

    @classmethod
    def class_for(cls, settings: dict) -> type["Condenser"]:
        """The class that understands ``settings``: this one, or the subclass whose switches they
        turn on (``variant.CondenserVariant``, which the package imports with this module), so a
        saved variant, which names its switches in ``condenser_config.json``, loads back as what
        it was trained as."""
        extra = set(settings) - set(cls.SETTINGS)
        if not extra:
            return cls
        for sub in cls.__subclasses__():
            if not extra - set(sub.SETTINGS):
                return sub
        allowed = {*cls.SETTINGS, *(name for sub in cls.__subclasses__() for name in sub.SETTINGS)}
        raise TypeError(f"unknown Condenser argument(s) {sorted(extra)}; allowed: {sorted(allowed)}")

    def load_head(self, state: dict[str, torch.Tensor], name_or_dir: str | os.PathLike) -> None:
        """The head's weights from ``state`` (``read_head_state``), refused where they do not fit."""
        missing, unexpected = self.head.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"head weights in {name_or_dir!r} do not fit n_head_layers={self.n_head_layers} "
                f"({len(missing)} missing, e.g. {missing[:2]}; {len(unexpected)} unexpected, e.g. "
                f"{unexpected[:2]}); pass the n_head_layers it was saved with, or head='random'"
            )

    def head_state(self) -> dict[str, torch.Tensor]:
        """What ``HEAD_FILE`` holds: the head's weights, keyed ``head.<name>``."""
        return {f"head.{k}": v.detach().cpu() for k, v in self.head.state_dict().items()}

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Backbone as a plain `BertForMaskedLM` checkpoint + `condenser_head.pt` + `condenser_config.json`.

        `AutoModel` / `AutoModelForMaskedLM` load the directory with no custom code;
        `Condenser.from_pretrained` loads all of it.
        """
        self.backbone.save_pretrained(save_directory, **kwargs)
        if not kwargs.get("is_main_process", True):
            return
        torch.save(self.head_state(), os.path.join(save_directory, HEAD_FILE))
        with open(os.path.join(save_directory, CONDENSER_CONFIG_FILE), "w") as f:
            json.dump(self.condenser_config(), f, indent=2)
