"""The book's figure style and the legibility rule every figure meets: the column's width, the
smallest font, the gap between texts, the contrast of lines against the page (``legibility``),
and the helpers every figure module draws with (``figure_for``, ``panels``, ``legend_above``,
``log_axis``, ``thousands``, ``save``). The figures themselves are drawn per concern (``plots_gauges``,
``plots_arms``, ``plots_study``, ``plots_mechanism``; see the package's docstring). Explained in chapters 4-7.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def figure_for(ax=None, figsize=None):
    """``(fig, ax)``: ``ax``'s figure, or a new one at the book's width (``FIGURE_WIDTH``)."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=figsize or (FIGURE_WIDTH, 3.6))
    return ax.figure, ax


# ---------------------------------------------------------------------------------------
# The legibility rule: every figure of the book is read at the text column's width
# ---------------------------------------------------------------------------------------
# The notebooks show a figure at DPI dots per inch, cropped to its drawing plus PAD inches a
# side (``bbox_inches="tight"``), and the page shrinks an image wider than its column to
# COLUMN_PX pixels. A font of f points then reads as f * shown_scale(width) points, which
# must be at least MIN_FONT. A figure FIGURE_WIDTH inches wide fills the column at its own
# size (scale 1), so its fonts read at the size they are set.
COLUMN_PX = 690  # the book's text column, in pixels
DPI = 100  # the notebooks' figure.dpi (``book.setup``)
PAD = 0.1  # inches around a figure's drawing (matplotlib's savefig.pad_inches)
FIGURE_WIDTH = COLUMN_PX / DPI - 2 * PAD  # 6.7 inches: with its padding, the column's width
MIN_FONT = 9  # points, as the page shows them
SMALL = MIN_FONT  # the size of every secondary text (legends, ticks, notes): the rule's floor
MIN_GAP_PX = 4  # pixels between two texts at least, or they read as one ("CondensercoCondenser")
MIN_CONTRAST = 2.2  # a line or marker against the white page: Okabe-Ito's lightest kept colours
# (orange 2.25, sky blue 2.31) pass; their yellow (1.32) would vanish beside other series


def shown_scale(width_inches: float) -> float:
    """How much the page shrinks a figure ``width_inches`` wide (padding included): 1 when it
    fits the column, ``COLUMN_PX / (width_inches * DPI)`` when wider."""
    return min(1.0, COLUMN_PX / (width_inches * DPI))


def _contrast(rgba) -> float:
    # WCAG contrast ratio against white, of a colour blended over white by its alpha
    *rgb, a = rgba
    lin = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in (1 - a + a * c for c in rgb)]
    return 1.05 / (0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] + 0.05)


def _inks(fig) -> list[tuple[str, tuple]]:
    # (artist label, rgba) of every line and marker colour drawn (areas and fills are left out)
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D

    inks = []
    for art in fig.findobj(lambda a: isinstance(a, (Line2D, PathCollection)) and a.get_visible()):
        alpha = art.get_alpha()
        if isinstance(art, Line2D):
            colours = [art.get_color()] if art.get_linestyle() not in ("None", "none", "", " ") else []
            if art.get_marker() not in (None, "None", "none", "", " "):
                colours += [c for c in (art.get_markeredgecolor(), art.get_markerfacecolor())
                            if not (isinstance(c, str) and c.lower() == "none")]
            colours = [to_rgba(c, alpha) for c in colours]
        else:
            colours = [tuple(c) for c in (*art.get_edgecolors(), *art.get_facecolors())]
        inks += [(str(art.get_label()), c) for c in colours if c[3] > 0 and c[:3] != (1.0, 1.0, 1.0)]
    return inks


def legibility(fig) -> dict:
    """``fig`` measured by the rule above: ``width_px`` as the page receives it, ``scale``
    (``shown_scale``), ``texts`` (each drawn text with its size as shown, in points),
    ``smallest`` (the smallest of them), ``too_small`` (those under ``MIN_FONT``), ``overlaps``
    (pairs of texts closer than ``MIN_GAP_PX``) and ``faint`` (line or marker colours under
    ``MIN_CONTRAST``). Every chapter's figure passes it (``tests/condenser_book/test_figure_legibility.py``)."""
    from unittest import mock

    from matplotlib.text import Text

    drawn, draw = [], Text.draw

    def record(text, renderer):  # the texts a drawing really shows, with their text
        if text.get_visible() and text.get_text().strip() and text not in drawn:
            drawn.append(text)
        return draw(text, renderer)

    with mock.patch.object(Text, "draw", record):
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = fig.get_tightbbox(renderer).width + 2 * PAD
    scale = shown_scale(width)
    texts = [(t.get_text(), t.get_fontsize() * scale) for t in drawn]
    boxes = [t.get_window_extent(renderer) for t in drawn]
    overlaps = [(drawn[i].get_text(), drawn[j].get_text()) for i in range(len(drawn)) for j in range(i)
                if min(boxes[i].x1, boxes[j].x1) - max(boxes[i].x0, boxes[j].x0) > -MIN_GAP_PX
                and min(boxes[i].y1, boxes[j].y1) - max(boxes[i].y0, boxes[j].y0) > -MIN_GAP_PX]
    faint = sorted({(name, round(_contrast(c), 2)) for name, c in _inks(fig) if _contrast(c) < MIN_CONTRAST})
    return {"width_px": round(width * DPI), "scale": scale, "texts": texts,
            "smallest": min(texts, key=lambda t: t[1]) if texts else None,
            "too_small": [t for t in texts if t[1] < MIN_FONT - 1e-9], "overlaps": overlaps, "faint": faint}


def panels(n: int, height: float = 2.9, columns: int = 2, sharey: bool = False, extra: float = 0.0):
    """A figure of ``n`` panels at the book's width, at most ``columns`` a row (several rows
    rather than a strip too small to read), ``height`` inches a row and ``extra`` more (titles,
    a legend); returns ``(fig, axes)``, the axes flat, with the unused cells hidden."""
    import matplotlib.pyplot as plt

    cols = min(n, columns)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(FIGURE_WIDTH, height * rows + extra), sharey=sharey, squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def thousands(ax, axis: str = "x") -> None:
    """Tick labels in thousands (``12k``) on a step axis, so long labels never collide."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(MaxNLocator(nbins=5, integer=True))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}"))


def legend_above(fig, ax=None, ncol: int = 4, handles=None, below: bool = False) -> None:
    """One legend for the figure (``handles``, or its panels' entries, each once), above the panels
    (``below``: under them), which are laid out beside it: it covers no data, no title and no axis label."""
    labels = [h.get_label() for h in handles or []]
    handles = list(handles or [])
    for a in fig.axes if not handles else ():
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    legend = fig.legend(handles, labels, loc="lower center" if below else "upper center",
                        bbox_to_anchor=(0.5, 0.0 if below else 1.0), ncol=min(ncol, len(labels)), frameon=False,
                        fontsize=SMALL)
    height = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height + 0.01
    fig.tight_layout(rect=(0, height, 1, 1) if below else (0, 0, 1, 1 - height))


def log_axis(ax, axis: str = "y") -> None:
    """Put ``axis`` on a log scale with plain tick labels (0.02, 0.05, 0.1, ...), not
    ``2x10^-2`` and unlabelled in-between ticks. Call it after plotting: the ticks follow the
    current limits. Chapters 4 and 6."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    getattr(ax, f"set_{axis}scale")("log", nonpositive="clip")
    lo, hi = getattr(ax, f"get_{axis}lim")()
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(_log_ticks(lo, hi)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_locator(NullLocator())


def _log_ticks(lo: float, hi: float, least: int = 4, most: int = 6) -> list[float]:
    # the sparsest of the 1-2-5 style sequences that puts at least `least` ticks in [lo, hi],
    # or the densest under `most` where the next one would crowd the axis (0.2, 0.3, ..., 0.9)
    lo, hi = max(lo, 1e-12), max(hi, 2e-12)
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    ticks = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5), tuple(range(1, 10))):
        denser = [m * 10.0**d for d in decades for m in mantissas if lo <= m * 10.0**d <= hi]
        if len(denser) > most and len(ticks) >= 2:
            break
        ticks = denser
        if len(ticks) >= least:
            break
    return ticks


def save(fig, path: str | Path) -> Path:
    """Save ``fig`` as PNG (the folder is created) and return the path. Chapter 4."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path

