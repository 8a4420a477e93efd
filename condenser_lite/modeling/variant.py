"""Not the paper's design: the Condenser with the switches the book tries beside it.

``CondenserVariant`` is the mechanism page's deviations (the head reading the embeddings, no
gradient into the early layers, a head reading a more heavily masked copy of the block) and
chapter 8's control without a bottleneck (a head reading a learned constant instead of the
late [CLS]). ``deviations`` names the switches a setting turns on; with none on, the variant
computes exactly what ``condenser.Condenser`` does.

Explained on the mechanism page (`notebooks/10_mechanism.md`) and in chapter 8.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn
from transformers import BertForMaskedLM
from transformers.masking_utils import create_bidirectional_mask

from ..utils.errors import CheckpointError
from ..utils.loading import HEAD_FILE, hub_file
from .condenser import Condenser, CondenserOutput

# what the head reads in the late CLS's place: the late CLS (the paper), or a learned constant (a control)
HEAD_CLS_SOURCES = ("late", "constant")
CONSTANT_KEY = "head_cls_constant"  # its entry in the head's weights file
# The switches of the mechanism page and chapter 8 at the values that make a Condenser stage the
# paper's. ``head_mlm_probability`` is the masking of the head's own copy, which the collator
# makes (``masking.MLMCollator``); the others are `CondenserVariant`'s arguments.
PAPER_SWITCHES = {"detach_early": False, "head_cls": "late", "head_mlm_probability": None}


def deviations(settings) -> dict:
    """The switches of ``settings`` (a mapping or an object with those attributes) that differ
    from the paper's design. A saved head's config and a stage's cache key name these only, so
    the paper's Condenser has one description whatever switches the book adds beside it.

    >>> deviations({"detach_early": True, "head_cls": "late"})
    {'detach_early': True}
    """
    get = settings.get if isinstance(settings, Mapping) else lambda k, d: getattr(settings, k, d)
    return {k: get(k, v) for k, v in PAPER_SWITCHES.items() if get(k, v) != v}


class CondenserVariant(Condenser):
    """A `Condenser` with the switches the book tries beside the paper's design; with every switch
    off it computes exactly what `Condenser` does.

    * ``detach_early`` (a variant on the mechanism page) stops the head's gradient at the early token
      states, so the early layers learn only from the late MLM loss.
    * ``head_input_ids``/``head_labels`` in ``forward`` (built by
      ``masking.MLMCollator(head_mlm_probability=...)``) give the head the early states of a more
      heavily masked copy of the block and the labels of every position masked there, as
      RetroMAE's decoder (Xiao et al., 2022). The modified Condenser of chapters 4 and 8 is this variant.
    * ``head_cls="constant"`` feeds the head a learned, input-independent vector where it reads
      the late CLS: the head keeps its targets and its compute but can learn nothing from the
      late layers (the control without a bottleneck, chapter 8).

    >>> from transformers import BertConfig
    >>> config = BertConfig(vocab_size=100, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    >>> cut = CondenserVariant.from_config(config, skip_from=1, n_head_layers=1, head_cls="constant")
    >>> cut.condenser_config()["head_cls"]
    'constant'

    Explained on the mechanism page (`notebooks/10_mechanism.md`) and in chapter 8.
    """

    SETTINGS = (*Condenser.SETTINGS, "detach_early", "head_cls")

    def __init__(
        self,
        backbone: BertForMaskedLM,
        skip_from: int = 6,
        n_head_layers: int = 2,
        late_mlm: bool = True,
        head_weight: float = 1.0,
        late_weight: float = 1.0,
        detach_early: bool = False,
        head_cls: str = "late",
    ):
        if head_cls not in HEAD_CLS_SOURCES:
            raise ValueError(f"head_cls={head_cls!r} must be one of {HEAD_CLS_SOURCES}")
        super().__init__(backbone, skip_from, n_head_layers, late_mlm, head_weight, late_weight)
        self.detach_early = bool(detach_early)
        self.head_cls = head_cls
        if head_cls == "constant":  # drawn like an embedding row: what a [CLS] input looks like at the start
            self.head_cls_constant = nn.Parameter(
                torch.randn(backbone.config.hidden_size) * backbone.config.initializer_range)

    def condenser_config(self) -> dict:
        # a variant with every switch off saves what Condenser does
        return dict(super().condenser_config(), **deviations(self))

    def head_forward(self, late_cls: torch.Tensor, early_tokens: torch.Tensor,
                     attention_mask: torch.Tensor | None) -> torch.Tensor:
        if self.head_cls == "constant":  # the control without a bottleneck: nothing of the input reaches it
            late_cls = self.head_cls_constant.to(early_tokens.dtype).expand(early_tokens.shape[0], 1, -1)
        return super().head_forward(late_cls, early_tokens, attention_mask)

    def early_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The output of layer ``skip_from`` alone (the embeddings and the early layers), for
        the head's own copy of the block. [B, T, H]"""
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
        early, late = self.early_and_late(input_ids, attention_mask, token_type_ids)
        if labels is None:
            return CondenserOutput(loss=None, head_loss=None, late_loss=None, cls=late[:, 0])
        if (head_input_ids is None) != (head_labels is None):
            raise ValueError("pass head_input_ids and head_labels together (MLMCollator(head_mlm_probability=...)).")
        if head_input_ids is not None:  # the head reads a more heavily masked copy of the block
            early = self.early_states(head_input_ids, attention_mask, token_type_ids)
        if self.detach_early:  # the head's loss does not train the early layers
            early = early.detach()
        return self.condenser_loss(early, late, attention_mask, labels if head_labels is None else head_labels, labels)

    def load_head(self, state: dict[str, torch.Tensor], name_or_dir: str | os.PathLike) -> None:
        if self.head_cls == "constant":  # read_head_state keeps only "head." keys: the constant is read apart
            raw = torch.load(hub_file(name_or_dir, HEAD_FILE), map_location="cpu", weights_only=True)
            if CONSTANT_KEY not in raw:
                raise CheckpointError(f"{name_or_dir!r} has no learned [CLS] constant ({CONSTANT_KEY}): it was not "
                                      "trained with head_cls='constant'; load it with head_cls='late'")
            self.head_cls_constant.data.copy_(raw[CONSTANT_KEY])
        super().load_head(state, name_or_dir)

    def head_state(self) -> dict[str, torch.Tensor]:
        state = super().head_state()
        if self.head_cls == "constant":
            state[CONSTANT_KEY] = self.head_cls_constant.detach().cpu()
        return state
