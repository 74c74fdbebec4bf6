"""One figure style for the book.

Every chapter's setup cell calls :func:`use_book_style` once. It

* applies ``bounds_lib/core/book.mplstyle`` (fonts sized for the page, one colour cycle, grid, white
  background), and
* inside IPython (the book build, Jupyter, Colab) makes every matplotlib figure display as one output
  in two formats: an **SVG** (vector: the web book shows it, sharp at every width and zoom) and a
  150-dpi **PNG** (for the PDF, whose LaTeX cannot include SVG, and for viewers that do not render
  SVG). Both record the smallest font size in the figure (``BookMinFontPt``) and how many panels share
  a row (``BookPanelsPerRow``): the PNG in its text chunks, with the dpi it was saved at
  (``BookDPI``), the SVG in its ``<dc:description>``. ``tests/test_browser_layout.py`` reads these to
  check, for every figure on every page, that its text is at least 10 pt at the size a 1280 px window
  displays it and at least 9 CSS px on a 390 px phone, and that no row holds more than two panels.

Use :func:`book_subplots` instead of ``plt.subplots`` for panels: it refuses more than two columns
(put further panels on a second row) and sizes the figure for the page column.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .validation import check_scalar

__all__ = [
    "STYLE_FILE",
    "SAVE_DPI",
    "MAX_PANELS_PER_ROW",
    "use_book_style",
    "book_subplots",
    "min_font_pt",
    "panels_per_row",
    "figure_png",
    "figure_svg",
    "svg_metadata",
]

STYLE_FILE = Path(__file__).with_name("book.mplstyle")
SAVE_DPI = 150
MAX_PANELS_PER_ROW = 2
# Width of every figure in inches. A phone (390 px window) shows a figure 342 CSS px wide, so text of
# f pt is f/72 · 342/w CSS px there: at w = 5.0 in (5.1 with the tight bounding box) the style's
# smallest text, 10.5 pt, is 9.8 CSS px (issue #19 asks for 9; at the former 6.4 in it was 7.6). At
# 150 dpi the PNG is about 765 image px, 2.2 device pixels per CSS px on a phone. The SVG's natural
# width is 5.1 in = 490 CSS px; book-layout.css shows it at the column's width (672 px at a 1280 px
# window, 342 px on a phone), as the PNG was (tests/test_browser_layout.py checks both widths).
PAGE_WIDTH_IN = 5.0


def use_book_style() -> None:
    """Apply the book's matplotlib style and, inside IPython, the book's figure output.

    Call once in a chapter's setup cell (after importing matplotlib is fine). Outside IPython only
    the style is applied.
    """
    import matplotlib
    import matplotlib.style

    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: the style alone
        get_ipython = None  # type: ignore[assignment]
    ip = get_ipython() if get_ipython is not None else None
    if ip is not None:
        # Load the inline backend now: loading it later would re-register its own PNG formatter
        # on top of ours and reset rcParams (matplotlib_inline.backend_inline does both on import).
        import sys

        import matplotlib.pyplot as plt

        backend = matplotlib.get_backend()
        if "inline" in backend.lower() and "matplotlib_inline.backend_inline" not in sys.modules:
            plt.switch_backend(backend)  # nothing is drawn yet, so switching closes no figure
    matplotlib.style.use(str(STYLE_FILE))
    if ip is not None:
        from matplotlib.figure import Figure

        formatters = ip.display_formatter.formatters
        for mime, formatter in formatters.items():
            if mime not in ("image/png", "image/svg+xml"):
                formatter.pop(Figure, None)  # no PDF/JPEG copies: one output, in two formats
        formatters["image/svg+xml"].for_type(Figure, _svg_formatter)
        formatters["image/png"].for_type(Figure, _png_formatter)


def book_subplots(nrows: int = 1, ncols: int = 1, *, height: float | None = None, **kwargs: Any):
    """``plt.subplots`` for the book: at most two panels per row, sized for the page column.

    Parameters
    ----------
    nrows, ncols : int
        Grid of panels; ``ncols`` must be 1 or 2 (a third panel goes on a new row).
    height : float, optional
        Height of one row in inches (default 3.6 for one column, 3.0 for two).
    **kwargs
        Passed to ``matplotlib.pyplot.subplots`` (``sharex``, ``sharey``, ...). ``figsize`` is
        computed and may not be given.

    Returns
    -------
    (Figure, Axes or ndarray of Axes)
        What ``plt.subplots`` returns.

    Raises
    ------
    TypeError
        ``nrows``/``ncols`` not integers or ``height`` not a real number.
    ValueError
        More than two columns, a size below 1, ``height <= 0``, or ``figsize`` given.

    Examples
    --------
    >>> fig, axes = book_subplots(2, 2, height=2.0)
    >>> axes.shape, tuple(fig.get_size_inches()) == (PAGE_WIDTH_IN, 4.0)
    ((2, 2), True)
    >>> book_subplots(1, 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: ncols=3: the book shows at most 2 panels per row ...; use nrows=2, ncols=2
    """
    import matplotlib.pyplot as plt

    nrows = check_scalar(nrows, "nrows", int, min_val=1)
    ncols = check_scalar(ncols, "ncols", int, min_val=1)
    if ncols > MAX_PANELS_PER_ROW:
        raise ValueError(
            f"ncols={ncols}: the book shows at most {MAX_PANELS_PER_ROW} panels per row (they "
            f"become unreadable on a phone); use nrows={-(-ncols // MAX_PANELS_PER_ROW) * nrows}, ncols=2"
        )
    if "figsize" in kwargs:
        raise ValueError("book_subplots sizes the figure for the page; pass height= instead of figsize=")
    if height is None:
        height = 3.6 if ncols == 1 else 3.0
    height = check_scalar(height, "height (inches per row)", float, min_val=0, include_boundaries="neither")
    return plt.subplots(nrows, ncols, figsize=(PAGE_WIDTH_IN, height * nrows), **kwargs)


def _visible(text) -> bool:
    return text.get_visible() and (text.axes is None or text.axes.get_visible())


def min_font_pt(fig) -> float | None:
    """Smallest font size (points) among the visible, non-empty texts drawn in ``fig``.

    Tick labels count only when they lie inside the figure (matplotlib keeps off-view ticks).
    Returns None for a figure without text.
    """
    fig.draw_without_rendering()
    return _min_font_pt_drawn(fig)


def _min_font_pt_drawn(fig) -> float | None:
    renderer = fig.canvas.get_renderer()
    fbox = fig.bbox
    sizes = []
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        if not t.get_text().strip() or not _visible(t):
            continue
        box = t.get_window_extent(renderer)
        if box.width <= 0 or box.x1 < fbox.x0 or box.x0 > fbox.x1 or box.y1 < fbox.y0 or box.y0 > fbox.y1:
            continue
        sizes.append(float(t.get_fontsize()))
    return min(sizes) if sizes else None


def panels_per_row(fig) -> int:
    """Largest number of plotting panels (axes other than colour bars) that share a row of ``fig``.

    Two panels share a row when their vertical extents overlap by more than half the smaller one.
    """
    fig.draw_without_rendering()
    return _panels_per_row_drawn(fig)


def _panels_per_row_drawn(fig) -> int:
    boxes = []
    for ax in fig.axes:
        if not ax.get_visible() or getattr(ax, "_colorbar", None) is not None:
            continue
        if ax.get_label() == "<colorbar>":
            continue
        boxes.append(ax.get_position())
    best = 0
    for b in boxes:
        row = 0
        for o in boxes:
            overlap = min(b.y1, o.y1) - max(b.y0, o.y0)
            if overlap > 0.5 * min(b.height, o.height):
                row += 1
        best = max(best, row)
    return best


def _book_metadata(fig) -> dict[str, str]:
    fig.draw_without_rendering()  # once, for both measures
    font = _min_font_pt_drawn(fig)
    return {
        "BookMinFontPt": "none" if font is None else f"{font:g}",
        "BookPanelsPerRow": str(_panels_per_row_drawn(fig)),
    }


def figure_png(fig, dpi: int = SAVE_DPI) -> bytes:
    """PNG bytes of ``fig`` at ``dpi`` with the book's metadata (see the module docstring)."""
    import io

    meta = {"BookDPI": str(dpi), **_book_metadata(fig)}
    buf = io.BytesIO()
    fig.canvas.print_figure(buf, format="png", dpi=dpi, bbox_inches="tight", facecolor="white",
                            metadata=meta)
    return buf.getvalue()


def figure_svg(fig) -> str:
    """SVG text of ``fig`` with the book's metadata in its ``<dc:description>``.

    The text is drawn as paths (``svg.fonttype: path`` in the style), so the figure looks the same in
    every browser, with or without the fonts installed; the element ids are salted with a constant
    (``svg.hashsalt``) and no date is written, so the same figure gives the same text in every run.
    :func:`svg_metadata` reads the metadata back.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> use_book_style()
    >>> fig, ax = book_subplots()
    >>> _ = ax.plot([0, 1], [1, 0])
    >>> svg = figure_svg(fig)
    >>> svg.lstrip().startswith("<?xml") and svg_metadata(svg) == {"BookMinFontPt": "10.5", "BookPanelsPerRow": "1"}
    True
    >>> plt.close(fig)
    """
    import io

    meta = _book_metadata(fig)
    description = "; ".join(f"{k}={v}" for k, v in meta.items())
    buf = io.StringIO()
    fig.canvas.print_figure(buf, format="svg", bbox_inches="tight", facecolor="white",
                            metadata={"Date": None, "Description": description})
    return buf.getvalue()


def svg_metadata(svg: str | bytes) -> dict[str, str]:
    """The book's metadata of an SVG made by :func:`figure_svg` (``{}`` for any other SVG)."""
    import re
    from xml.etree import ElementTree

    text = svg.decode("utf-8") if isinstance(svg, bytes) else svg
    try:
        root = ElementTree.fromstring(text.encode("utf-8"))
    except ElementTree.ParseError as exc:
        raise ValueError(f"not an SVG document: {exc}") from None
    node = root.find(".//{http://purl.org/dc/elements/1.1/}description")
    if node is None or not node.text:
        return {}
    return dict(re.findall(r"(Book\w+)=([^;]+)", node.text))


def _shows_nothing(fig) -> bool:
    return not fig.axes and not fig.lines and not fig.images  # as IPython decides


def _png_formatter(fig):
    return None if _shows_nothing(fig) else figure_png(fig)


def _svg_formatter(fig):
    return None if _shows_nothing(fig) else figure_svg(fig)
