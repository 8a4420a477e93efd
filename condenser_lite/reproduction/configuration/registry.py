"""The arms and the claims of the reproduction, each named once.

An arm is a pre-trained model the protocol compares (``Arm``: its name in the results file, its
label in the book, its colour in figures, the arm it continues and its role); a claim is one of
the papers' findings the scorecard judges (``Claim``: its id, its title and the rule that judges
it). The presets, the protocol, the results file, the scorecard, the figures and the chapters
all read them from here. Explained in chapter 4 (the arms) and chapter 8 (the claims).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arm:
    """One arm: ``parent`` is the arm whose checkpoint it continues (None: from scratch, or a
    published checkpoint); ``role`` is ``"main"`` (pre-trained on every pre-training seed, fine-tuned
    at every training size), ``"ablation"`` (one seed, the full training set), ``"modified"`` (the
    mechanism page's deviation from the paper, run as a main arm) or ``"control"`` (a control of the
    modified Condenser's gain, pre-trained on every seed like a main arm)."""

    name: str
    label: str
    color: str
    parent: str | None
    role: str
    what: str


# Okabe-Ito colours: told apart by readers with colour-blindness too
ARM_LIST = (
    Arm("bert", "BERT", "#7f7f7f", None, "main", "MLM from scratch on the general corpus (stage 1)"),
    Arm("bert_cont", "BERT-continued", "#000000", "bert", "main",
        "stage 1 + as many more MLM updates as the Condenser stage: the equal-step control"),
    Arm("condenser", "Condenser", "#0072b2", "bert", "main", "stage 1 + Condenser pre-training, a fresh head"),
    Arm("cocondenser", "coCondenser", "#d55e00", "condenser", "main",
        "Condenser + coCondenser on the target corpus, the head loaded"),
    Arm("co_contrastive_only", "contrastive only", "#e69f00", "condenser", "ablation",
        "coCondenser without its MLM terms (coCondenser table 4)"),
    Arm("co_mlm_only", "Condenser MLM only", "#009e73", "condenser", "ablation",
        "coCondenser without its contrastive term: Condenser MLM on the target corpus"),
    Arm("condenser_mod", "modified Condenser", "#cc79a7", "bert", "modified",
        "stage 1 + a Condenser stage with the preset's deviation (Preset.modified_condenser)"),
    Arm("bert_cont_flops", "BERT-continued, equal FLOPs", "#56b4e9", "bert", "control",
        "stage 1 + as many MLM updates as spend the modified Condenser's FLOPs: the equal-compute control"),
    Arm("condenser_mod_nocls", "modified Condenser, [CLS] cut", "#882255", "bert", "control",
        "the modified Condenser whose head reads a learned constant instead of the late [CLS]: the "
        "no-bottleneck control (same masked copy, targets and compute)"),
)
ARM = {a.name: a for a in ARM_LIST}
ARMS = tuple(ARM)
MAIN_ARMS = tuple(a.name for a in ARM_LIST if a.role == "main")
ABLATION_ARMS = tuple(a.name for a in ARM_LIST if a.role == "ablation")
CONTROL_ARMS = tuple(a.name for a in ARM_LIST if a.role == "control")
MODIFIED_ARM = next(a.name for a in ARM_LIST if a.role == "modified")
STANDARD_ARMS = MAIN_ARMS + ABLATION_ARMS  # what a preset runs unless it names its arms
PARENT = {a.name: a.parent for a in ARM_LIST}


def label(arm: str) -> str:
    """The arm's name in the book ("BERT-continued"); an unknown name as it is. Chapter 4."""
    return ARM[arm].label if arm in ARM else arm


def color(arm: str) -> str | None:
    """The arm's colour in every figure. Chapter 4."""
    return ARM[arm].color if arm in ARM else None


@dataclass(frozen=True)
class Claim:
    """One of the papers' findings: ``title`` in plain words, ``rule`` the rule that judges it
    (``reproduction/claims/scorecard.py`` holds the rules and the statements with their numbers)."""

    id: str
    title: str
    rule: str


CLAIM_LIST = (
    Claim("C0", "The Condenser head relies on the late [CLS]",
          "pre-registered: reliance >= 0.2 on every pre-training seed, late MLM loss within 0.05 nats of the "
          "equal-step control; cosine below the control's on every seed"),
    Claim("C0m", "The modified Condenser's head relies on the late [CLS]", "as C0, for the modified Condenser"),
    Claim("C1", "Condenser is a better retriever initialiser than BERT, most with little data",
          "pre-registered: difference beyond the spread, with its minimum detectable difference"),
    Claim("C1m", "The modified Condenser is a better retriever initialiser than BERT",
          "as C1, for the modified Condenser"),
    Claim("C2", "coCondenser beats Condenser, and not only by seeing the target corpus",
          "difference beyond the spread"),
    Claim("C3", "Both coCondenser loss terms contribute", "difference beyond the spread, gated on the head's C0"),
    Claim("C4", "Hard negatives mined by the retriever itself help", "difference beyond the spread"),
    Claim("C4m", "Hard negatives mined by the modified Condenser's retriever help it", "as C4, for the modified Condenser"),
    Claim("C5", "Fine-tuning changes BERT's [CLS] attention more than Condenser's", "difference beyond the spread"),
    Claim("C5m", "Fine-tuning changes BERT's [CLS] attention more than the modified Condenser's",
          "as C5, for the modified Condenser"),
    Claim("C6", "Condenser's fine-tuning loss is lower early on", "difference beyond the spread"),
    Claim("C6m", "The modified Condenser's fine-tuning loss is lower early on", "as C6, for the modified Condenser"),
    Claim("C7", "Condenser beats BERT on sentence similarity with little data",
          "pre-registered: difference beyond the spread, with its minimum detectable difference"),
    Claim("C7m", "The modified Condenser beats BERT on sentence similarity with little data",
          "as C7, for the modified Condenser"),
    Claim("C8", "Condenser's neighbourhood recall beats BERT's, coCondenser's beats Condenser's",
          "difference beyond the spread, at the paper's n and every depth k (added after the run)"),
    Claim("C8m", "The modified Condenser's neighbourhood recall beats BERT's", "as C8, for the modified Condenser"),
    Claim("Am", "The modified Condenser's path through [CLS] adds to its gains beyond its compute and its targets",
          "rules version 2: beats BERT-continued for equal FLOPs and itself with the [CLS] path cut, wherever it "
          "beats BERT-continued; one-sided paired t-tests at 5% over pre-training seeds"),
)
CLAIM = {c.id: c for c in CLAIM_LIST}
