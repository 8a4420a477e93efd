"""Diagrams of the papers' ideas, drawn by code: boxes and arrows in matplotlib.

One function per diagram; each returns a matplotlib ``Figure`` that a chapter saves with
``plots.save`` and shows under a numbered caption. The diagrams read the shapes they draw
(which layer the head reads, how many head layers, the batch, the stage lengths) from a
``settings_tree.Preset``, by default the committed run's ``small``, so they show the split the
book's results were made with. Colours come from the Okabe-Ito palette, which stays
distinguishable with the common colour-vision deficiencies; no text is smaller than 9 pt.
Explained in chapters 2, 3 and 4 (``notebooks/02_condenser.ipynb`` ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from condenser_lite.reproduction.configuration.registry import MODIFIED_ARM

# Okabe & Ito's colour-blind-safe palette (the light tints are for box fills)
ORANGE, SKY, GREEN, YELLOW = "#E69F00", "#56B4E9", "#009E73", "#F0E442"
BLUE, VERMILION, PURPLE, GREY = "#0072B2", "#D55E00", "#CC79A7", "#999999"
FILL = {BLUE: "#cfe3f1", SKY: "#dcf0fb", ORANGE: "#fbecc8", GREEN: "#c8ebe0",
        VERMILION: "#f6d6c2", PURPLE: "#f3dfea", GREY: "#ececec", YELLOW: "#fcf8cf"}
FONT = 10  # points; the smallest text in a diagram is SMALL
SMALL = 9


def _preset(preset):
    from condenser_lite.reproduction.configuration.presets import get_preset

    if preset is None or isinstance(preset, str):
        return get_preset(preset or "small")
    return preset


def _canvas(width: float, height: float, inches_per_unit: float = 0.6):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width * inches_per_unit, height * inches_per_unit))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.subplots_adjust(0, 0, 1, 1)
    return fig, ax


def _box(ax, x, y, w, h, text="", color=BLUE, fill=None, size=FONT, weight="normal", dashed=False):
    """A rounded box with centred text; ``(x, y)`` is the lower-left corner."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.08",
                                linewidth=1.8 if dashed else 1.4, edgecolor=color,
                                facecolor="none" if fill is False else (fill or FILL.get(color, "white")),
                                linestyle=(0, (5, 3)) if dashed else "-", zorder=2))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size,
                weight=weight, color="black", zorder=4, linespacing=1.25)


def _arrow(ax, points: Sequence[tuple[float, float]], color="black", lw=1.6, label=None, label_at=None,
           bridge=False):
    """An arrow along the polyline ``points`` (head at the last point), ``label`` at ``label_at`` (the last
    segment's middle by default); with ``bridge`` a white halo lets it cross another line visibly on top."""
    import matplotlib.patheffects as pe
    from matplotlib.patches import FancyArrowPatch

    effects = [pe.withStroke(linewidth=lw + 5, foreground="white")] if bridge else None
    xs, ys = zip(*points)
    if len(points) > 2:
        ax.plot(xs[:-1], ys[:-1], color=color, lw=lw, zorder=3, solid_capstyle="butt", path_effects=effects)
    ax.add_patch(FancyArrowPatch(points[-2], points[-1], arrowstyle="-|>", mutation_scale=14,
                                 color=color, lw=lw, zorder=3, shrinkA=0, shrinkB=0, path_effects=effects))
    if label:
        x, y = label_at or ((xs[-2] + xs[-1]) / 2, (ys[-2] + ys[-1]) / 2)
        ax.text(x, y, label, ha="center", va="center", fontsize=SMALL, color=color, zorder=5,
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"))


def _layers(first: int, last: int) -> str:
    return f"layer {first}" if first == last else f"layers {first}–{last}"


def condenser(preset=None):
    """The Condenser (Condenser paper, figure 1 and eqs. 6-11) with the preset's split: the early layers
    1..``skip_from``, the late layers after them, and the head, which reads the **late** ``[CLS]`` next to the
    **early** token states (the skip connection from layer ``skip_from``); the head's MLM loss and the late
    MLM loss go through one shared MLM head (``backbone.cls``), and the head is dropped after pre-training.
    Shown in chapter 2, ``notebooks/02_condenser.ipynb``."""
    m = _preset(preset).model
    L, k, n_head = m.num_hidden_layers, m.skip_from, m.n_head_layers
    fig, ax = _canvas(12.4, 13.7, inches_per_unit=0.56)
    left, cls_w, right = 0.3, 1.5, 5.9  # the backbone's column: [CLS] cell, token cell
    tok_x = left + cls_w + 0.2
    hx, hcls_w, hright = 7.0, 1.5, 12.1  # the head's column

    # the backbone, bottom to top
    ax.text(left, 0.05, "input: a block of text, 15% of its words masked", fontsize=SMALL, va="bottom")
    _box(ax, left, 0.6, cls_w, 0.7, "[CLS]", GREY)
    _box(ax, tok_x, 0.6, right - tok_x, 0.7, "w₁  [MASK]  w₃  …  [SEP]", GREY)
    _arrow(ax, [(3.1, 1.3), (3.1, 1.7)])
    _box(ax, left, 1.7, right - left, 1.0, f"embeddings + early {_layers(1, k)}\n(skip_from = {k})", BLUE)
    _arrow(ax, [(3.1, 2.7), (3.1, 3.1)])
    _box(ax, left, 3.1, cls_w, 0.7, "early\n[CLS]", BLUE, size=SMALL)
    _box(ax, tok_x, 3.1, right - tok_x, 0.7, f"early token states (layer {k})", BLUE)
    _arrow(ax, [(3.1, 3.8), (3.1, 4.2)])
    _box(ax, left, 4.2, right - left, 1.0, f"late {_layers(k + 1, L)}", SKY)
    _arrow(ax, [(3.1, 5.2), (3.1, 5.6)])
    _box(ax, left, 5.6, cls_w, 0.7, "late\n[CLS]", VERMILION, size=SMALL, weight="bold")
    _box(ax, tok_x, 5.6, right - tok_x, 0.7, f"late token states (layer {L})", SKY)

    # the head, top right: reads [late CLS ; early tokens]
    _box(ax, hx, 7.2, hcls_w, 0.7, "late\n[CLS]", VERMILION, size=SMALL, weight="bold")
    _box(ax, hx + hcls_w + 0.2, 7.2, hright - hx - hcls_w - 0.2, 0.7, "early token states", BLUE)
    _arrow(ax, [(9.6, 7.9), (9.6, 8.3)])
    layers = "layer" if n_head == 1 else "layers"
    _box(ax, hx, 8.3, hright - hx, 1.0, f"Condenser head: {n_head} new {layers}", ORANGE, weight="bold")
    _arrow(ax, [(9.6, 9.3), (9.6, 9.7)])
    _box(ax, hx, 9.7, hright - hx, 0.7, "head token states", ORANGE)
    _box(ax, hx - 0.2, 7.0, hright - hx + 0.4, 3.6, "", ORANGE, fill=False, dashed=True)
    ax.text(hx - 0.1, 6.55, "dashed: dropped after\npre-training; the retriever\n"
            "is the backbone's late [CLS]", ha="left", va="top", fontsize=SMALL, color="black")

    # the skip connection: early token states -> the head's token inputs
    _arrow(ax, [(right, 3.45), (11.6, 3.45), (11.6, 7.2)], color=BLUE, lw=2.0,
           label=f"skip connection from layer skip_from = {k}", label_at=(8.7, 3.45))
    # the late [CLS] -> the head (crosses the late MLM path on a bridge)
    _arrow(ax, [(1.05, 6.3), (1.05, 6.75), (7.75, 6.75), (7.75, 7.2)], color=VERMILION, lw=2.2, bridge=True)
    ax.text(1.25, 6.85, "the late [CLS]: the head's only\nview of the late layers",
            fontsize=SMALL, color=VERMILION, ha="left", va="bottom", zorder=6)
    # both MLM losses through ONE shared MLM head
    _box(ax, 2.4, 11.0, 7.6, 0.8, "one shared MLM head W (backbone.cls)", PURPLE, weight="bold")
    _arrow(ax, [(5.5, 6.3), (5.5, 11.0)], color=SKY, lw=2.0)
    _arrow(ax, [(9.6, 10.4), (9.6, 11.0)], color=ORANGE, lw=2.0)
    _arrow(ax, [(3.6, 11.8), (3.6, 12.2)])
    _arrow(ax, [(8.8, 11.8), (8.8, 12.2)])
    _box(ax, left, 12.2, 5.6, 0.95, "late MLM loss Lᶜ_mlm (eq. 10)", SKY)
    _box(ax, 6.5, 12.2, 5.6, 0.95, "head MLM loss L_mlm (eq. 9)", ORANGE)
    ax.text(6.2, 11.95, "+", fontsize=14, ha="center", va="center")
    ax.text(6.2, 13.3, "pre-training loss L = L_mlm + Lᶜ_mlm (eq. 11)", fontsize=FONT, ha="center", va="center")
    return fig


def cocondenser_batch(preset=None, n_docs: int = 3):
    """coCondenser's span pairs and its contrastive batch (coCondenser eq. 6): ``n_docs`` documents, two
    random spans of each, each span's late ``[CLS]``, and the in-batch similarity matrix in which a span's
    partner is its positive, every other span a negative and the span itself is left out. The preset gives the
    committed batch size. Shown in chapter 3, ``notebooks/03_cocondenser.ipynb``."""
    p = _preset(preset)
    colors = [ORANGE, SKY, GREEN, PURPLE, YELLOW][:n_docs]
    n = 2 * n_docs
    fig, ax = _canvas(13.6, 10.6, inches_per_unit=0.5)
    ax.set_ylim(-2.0, 8.6)
    top = 7.0
    ax.text(0.2, 8.3, f"{n_docs} documents (the committed run: {p.stages.cocondenser.batch_size} "
            f"per batch, so {2 * p.stages.cocondenser.batch_size} spans)", fontsize=SMALL)
    names = []
    for i, c in enumerate(colors):
        y = top - i * 2.3
        _box(ax, 0.2, y - 1.0, 2.6, 1.6, "", c)
        ax.text(0.35, y + 0.5, f"document {i + 1}", ha="left", va="top", fontsize=SMALL)
        # two non-overlapping spans, at different places in each document
        spans = [(1.45 - 0.1 * i, 2.65, y - 0.25), (0.35 + 0.15 * i, 1.3, y - 0.85)]
        for j, (a, b, ry) in enumerate(spans):
            ax.add_patch(_rect(a, ry, b - a, 0.35, c))
            name = f"s{i + 1}{j + 1}"
            names.append((name, c))
            sy = y - 0.95 + (1 - j) * 1.1
            _arrow(ax, [(2.8, ry + 0.17), (3.5, sy + 0.25)], color="black", lw=1.1)
            _box(ax, 3.5, sy, 1.1, 0.5, name, c, size=SMALL)
            _arrow(ax, [(4.6, sy + 0.25), (5.2, sy + 0.25)], lw=1.1)
    m = p.model
    _box(ax, 5.2, 0.75, 1.6, 7.0, f"one\nencoder\n({m.num_hidden_layers}\nlayers)\n\nlate\n[CLS]\n"
         f"of each\nspan", VERMILION, size=SMALL)
    ax.text(6.0, 0.3, "random spans, new each epoch", ha="center", fontsize=SMALL)
    # the similarity matrix: rows and columns are the spans
    x0, y0, cell = 8.2, 0.9, 0.85
    _arrow(ax, [(6.8, 4.25), (7.4, 4.25)], lw=1.4)
    for r, (rn, rc) in enumerate(names):
        ax.text(x0 - 0.12, y0 + (n - r - 0.5) * cell, rn, ha="right", va="center", fontsize=SMALL, color="black")
        ax.text(x0 + (r + 0.5) * cell, y0 + n * cell + 0.12, rn, ha="center", va="bottom", fontsize=SMALL)
        for c_, _ in enumerate(names):
            partner = c_ == (r ^ 1)
            kind = "self" if r == c_ else "pos" if partner else "neg"
            face = {"self": "white", "pos": GREEN, "neg": "#f2f2f2"}[kind]
            ax.add_patch(_rect(x0 + c_ * cell, y0 + (n - r - 1) * cell, cell, cell, "black", face=face, lw=0.8))
            mark = {"self": "×", "pos": "+", "neg": "−"}[kind]
            ax.text(x0 + (c_ + 0.5) * cell, y0 + (n - r - 0.5) * cell, mark, ha="center",
                    va="center", fontsize=FONT, color="white" if kind == "pos" else "black",
                    weight="bold" if kind == "pos" else "normal")
    ax.text(x0 + n * cell / 2, y0 + n * cell + 0.55, "scores ⟨h, h'⟩ of late [CLS] vectors",
            ha="center", fontsize=SMALL)
    for i, (mark, text) in enumerate([("+", "positive: the partner span"),
                                      ("−", "negative: every other span"),
                                      ("×", "the span itself: left out")]):
        ax.text(x0 - 0.6, -0.35 - i * 0.55, f"{mark}  {text}", fontsize=SMALL, ha="left", va="center")
    ax.text(0.2, -0.9, "each row of the matrix: a softmax over\nthe row's 2n − 1 other "
            "spans (eq. 6)", fontsize=SMALL, ha="left", va="center")
    return fig


def _rect(x, y, w, h, color, face=None, lw=1.0):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, edgecolor=color, facecolor=face or color, lw=lw, zorder=3)


def gradient_cache(preset=None, n_chunks: int = 3):
    """The gradient cache's two passes (coCondenser eqs. 8-12, ``gradcache.gradient_cache``): pass 1 encodes
    every chunk without a graph, recording each chunk's random state, and keeps only the representations; the
    contrastive loss and its gradient with respect to them are computed and cached; pass 2 re-encodes chunk by
    chunk with gradients, replaying the recorded random state (the same dropout masks), and back-propagates
    the cached gradient, so the gradients add up to the full batch's. Shown in chapter 3,
    ``notebooks/03_cocondenser.ipynb``."""
    p = _preset(preset)
    fig, ax = _canvas(14.0, 9.6, inches_per_unit=0.5)
    # bands
    _box(ax, 0.1, 5.3, 13.8, 4.1, "", GREY, fill="#f7f7f7")
    _box(ax, 0.1, 0.2, 13.8, 4.1, "", GREY, fill="#f7f7f7")
    ax.text(0.3, 9.05, "Pass 1: no gradients (torch.no_grad), the whole batch", fontsize=FONT,
            weight="bold", va="center")
    ax.text(0.3, 4.1, "Pass 2: with gradients,\none chunk at a time", fontsize=FONT, weight="bold", va="top")
    chunk_colors = [ORANGE, SKY, GREEN, PURPLE][:n_chunks]
    # pass 1
    for i, c in enumerate(chunk_colors):
        _box(ax, 0.4, 7.9 - i * 0.85, 1.7, 0.65, f"chunk {i + 1}", c, size=SMALL)
    _arrow(ax, [(2.1, 7.05), (2.8, 7.05)])
    _box(ax, 2.8, 6.3, 2.8, 2.2, "encode each\nchunk, keep no\nactivations", BLUE)
    _arrow(ax, [(5.6, 7.4), (6.3, 7.4)])
    _box(ax, 6.3, 6.3, 2.6, 2.2, "representations\nh: one late [CLS]\nper span", VERMILION)
    _arrow(ax, [(8.9, 7.4), (9.6, 7.4)])
    _box(ax, 9.6, 6.3, 4.0, 2.2, "contrastive loss L(h)\nand its gradient\nv = ∂L/∂h\n"
         "(the cache)", PURPLE, weight="bold")
    _box(ax, 2.4, 5.5, 3.6, 0.55, "each chunk's random state", YELLOW, size=SMALL)
    # pass 2
    _box(ax, 0.4, 1.5, 1.9, 0.9, f"chunk k\n(k = 1 … {n_chunks})", ORANGE, size=SMALL)
    _arrow(ax, [(2.3, 1.95), (2.8, 1.95)])
    _box(ax, 2.8, 0.6, 2.8, 2.5, "re-encode chunk k\nwith gradients,\nits random state\nreplayed", BLUE)
    _arrow(ax, [(5.6, 1.95), (6.3, 1.95)])
    _box(ax, 6.3, 0.6, 2.6, 2.5, "h_k: the same\nvectors as in\npass 1", VERMILION)
    _arrow(ax, [(8.9, 1.95), (9.6, 1.95)])
    _box(ax, 9.6, 0.6, 4.0, 2.5, "backward of\nΣ ⟨h_k, v_k⟩ + MLM share;\ngradients add up\n"
         "over the chunks", PURPLE)
    # what flows from pass 1 to pass 2
    _arrow(ax, [(4.6, 5.5), (4.6, 3.1)], color="#8a7a00", lw=2.0)
    ax.text(4.8, 4.8, "replay: the same dropout masks", fontsize=SMALL, color="#6b5f00", ha="left", va="center")
    _arrow(ax, [(11.6, 6.3), (11.6, 3.1)], color=PURPLE, lw=2.0)
    ax.text(11.8, 4.8, "v_k, cached", fontsize=SMALL, color="#a34d7e", ha="left", va="center")
    chunk = p.stages.cocondenser.chunk_size
    ax.text(1.35, 1.35, "one chunk's\nactivations in\nmemory at a time" +
            (f"\n({chunk} spans)" if chunk else ""), fontsize=SMALL, ha="center", va="top")
    return fig


def _change_words(change: dict) -> str:
    """A modified Condenser's change in a few words for a box (the mechanism page's variants)."""
    known = {"head_mlm_probability": lambda v: f"head: {v:.0%}-masked copy",
             "skip_from": lambda v: f"head: layer {v}" if v else "head: embeddings",
             "detach_early": lambda v: "head: no gradient down" if v else "head: as the paper's"}
    return ", ".join(known[k](v) if k in known else f"{k}={v}" for k, v in change.items())


def pipeline(preset=None):
    """The book's pipeline from pre-training to search, each box labelled with the chapter that builds it:
    stage 1 BERT, then BERT-continued, Condenser and (where the preset has one) the modified Condenser, then
    coCondenser and its two ablations on the target corpus, fine-tuning round 1 (BM25 negatives) and round 2
    (negatives mined by the round-1 retriever), encoding and search, and the metrics. The step counts and the
    split come from the preset. Shown in chapter 4, ``notebooks/04_finetune.ipynb``."""
    p = _preset(preset)
    t, m, f = p.stages, p.model, p.finetune
    fig, ax = _canvas(15.0, 10.4, inches_per_unit=0.47)
    ax.text(0.2, 10.1, "pre-training on the general corpus", fontsize=FONT, weight="bold", va="center")
    ax.text(8.0, 10.1, "on the target corpus ("
            f"{ {'scifact': 'SciFact', 'msmarco': 'MS MARCO'}.get(p.task, p.task)})", fontsize=FONT, weight="bold",
            va="center")
    _box(ax, 0.2, 6.6, 3.4, 2.9, f"stage 1: BERT\nMLM from scratch\n{t.bert.max_steps:,} updates\n"
         f"{m.num_hidden_layers} layers\n(ch. 1)", GREY)
    modified = MODIFIED_ARM in p.arms and p.modified_condenser
    # the second column: the continuations of stage 1, each as many updates as the others
    rows = [(8.2, 1.4, f"BERT-continued\n{t.condenser.max_steps:,} updates of MLM\n(ch. 2, the control)", SKY),
            (6.7, 1.4, f"Condenser\n{t.condenser.max_steps:,} updates, head on\nlayer {m.skip_from} (ch. 2)", BLUE)]
    if modified:
        rows.append((5.2, 1.4, f"modified Condenser\n{t.condenser.max_steps:,} updates\n"
                               f"{_change_words(dict(p.modified_condenser))}", PURPLE))
    for y, h, text, colour in rows:
        _arrow(ax, [(3.6, max(min(y + h / 2, 9.2), 6.8)), (4.3, y + h / 2)])
        _box(ax, 4.3, y, 3.5, h, text, colour, size=SMALL)
    _arrow(ax, [(7.8, 7.6), (8.2, 8.0)])  # both from the Condenser, head included
    _arrow(ax, [(7.8, 7.2), (8.2, 6.4)])
    _box(ax, 8.2, 7.4, 3.8, 1.9, f"coCondenser: span pairs,\ncontrastive loss + MLM\n"
         f"{t.cocondenser.max_steps:,} updates (ch. 3)", VERMILION, size=SMALL)
    _box(ax, 8.2, 5.2, 3.8, 1.7, "ablations: contrastive\nonly, MLM only\n(ch. 3, 4)", ORANGE, size=SMALL)
    ax.text(12.2, 8.4, "every arm:\nhead dropped,\nthe backbone's\nlate [CLS] is\nthe vector",
            fontsize=SMALL, va="center")
    controls = [a for a in ("bert_cont_flops", "condenser_mod_nocls") if a in p.arms]
    if controls:  # the modified Condenser's two controls, each continuing stage 1 too
        _arrow(ax, [(1.9, 6.6), (1.9, 6.35)])
        _box(ax, 0.2, 5.1, 3.4, 1.25, "controls: more MLM, equal\nFLOPs; modified, [CLS]\ncut (ch. 4, 8)"
             if len(controls) == 2 else "a control (ch. 4, 8)", SKY, size=SMALL)
    # every pre-trained model (stage 1 too) goes on to fine-tuning: one frame around them all
    _box(ax, 0.05, 4.95, 14.85, 4.75, fill=False, color=GREY, dashed=True)
    _arrow(ax, [(2.45, 4.95), (2.45, 4.2)], lw=1.4)
    n = len(p.pretraining_seeds)
    ax.text(2.7, 4.55, f"each of the {len(p.arms)} arms in the frame, {n} pre-trained model{'s' * (n > 1)} "
            "each, is fine-tuned", ha="left", va="center", fontsize=SMALL)
    _box(ax, 0.2, 2.2, 4.5, 2.0, f"fine-tuning round 1\nnegatives from BM25\n"
         f"{p.train_sizes[0]} training queries,\nor all of them (ch. 4)", GREEN, size=SMALL)
    _arrow(ax, [(4.7, 3.2), (5.4, 3.2)])
    _box(ax, 5.4, 2.2, 4.5, 2.0, f"round 2 ({len(p.round2_arms)} arms): "
         f"negatives\nmined from the round-1\ntop {f.mine_depth} (ch. 4, 6)", GREEN, size=SMALL)
    _arrow(ax, [(9.9, 3.2), (10.6, 3.2)])
    _box(ax, 10.6, 2.2, 4.2, 2.0, "encode the corpus,\nsearch by inner product\n(exact or FAISS) (ch. 4)",
         PURPLE, size=SMALL)
    _arrow(ax, [(12.7, 2.2), (12.7, 1.6)])
    _box(ax, 0.2, 0.2, 14.6, 1.4, "metrics: nDCG@10, R@100 and nb-recall (ch. 4, 6);\nCLS "
         "attention entropy (ch. 5); STS-b (ch. 7); the scorecard (ch. 8)", GREY, size=SMALL)
    return fig


DIAGRAMS = {"condenser": condenser, "cocondenser_batch": cocondenser_batch,
            "gradient_cache": gradient_cache, "pipeline": pipeline}


def texts(fig) -> list[str]:
    """Every text a figure draws (for tests and for reading a diagram without looking)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]
