"""Tests of bounds_lib.analysis.report (Chapter 6's analysis, tables and figures) and bounds_lib.core.style."""
from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from bounds_lib.analysis import plotting as FIG, report as R  # noqa: E402
from bounds_lib.theory.peeling import posthoc_choice  # noqa: E402
from bounds_lib.analysis.scoring import score  # noqa: E402
from bounds_lib.analysis.spectra import compute_spectra  # noqa: E402
from bounds_lib.core.style import (  # noqa: E402
    book_subplots,
    figure_png,
    figure_svg,
    min_font_pt,
    panels_per_row,
    svg_metadata,
    use_book_style,
)
from tiny_checkpoints import synthetic_spectra  # noqa: E402


# --------------------------------------------------------------------------------------------
# break-even scale and architecture-only B_ours
# --------------------------------------------------------------------------------------------
def test_break_even_is_where_posthoc_choice_leaves_zero():
    sp = synthetic_spectra()
    rep = score(sp)
    assert np.all(rep.p_stars == 0)
    shifts = R.break_even_shifts(rep, sp)
    assert np.all(shifts > 0)
    for m, c, s in zip(rep.matrices, sp.matrices, shifts):
        sig = c.sigma[c.sigma > 0]
        before = posthoc_choice(sig, m.log_K - (s - 1e-6) * math.log(10), rep.N, rep.grid).p_star
        after = posthoc_choice(sig, m.log_K - (s + 1e-6) * math.log(10), rep.N, rep.grid).p_star
        assert before == 0 and after > 0, (m.matrix_type, m.layer, s)


def test_break_even_closed_form_by_brute_force():
    rng = np.random.default_rng(3)
    sigma = np.sort(rng.uniform(0.1, 5, 6))[::-1]
    grid, N = np.linspace(0, 2, 9), 8
    k0 = R.log10_K_break_even(6, sigma, grid, N)

    def log_T(p, log10_K):
        S = np.sum(sigma ** p) if p > 0 else 6
        return (math.log(S) + p * log10_K * math.log(10) + (p + 1) * math.log(N)) / (p + 2)

    for lk, wins in ((k0 - 1e-6, True), (k0 + 1e-6, False)):
        assert bool(min(log_T(p, lk) for p in grid[1:]) < log_T(0, lk)) == wins
    with pytest.raises(ValueError, match="positive"):
        R.log10_K_break_even(6, np.zeros(3), grid, N)


def test_architecture_B_ours_equals_scored_model_at_p_zero():
    sp = synthetic_spectra(L=4, H=2, N=8, d=4)
    rep = score(sp)
    assert np.all(rep.p_stars == 0)
    assert math.exp(rep.log_B_ours_sum) == pytest.approx(R.architecture_B_ours(4, 8, 2, 4), rel=1e-12)
    # a model where the spectrum matters (p* > 0 somewhere) is NOT given by the formula
    small = score(synthetic_spectra(L=1, H=2, N=8, d=4, sigma1=1e-3, decay=0.01))
    assert np.any(small.p_stars > 0)
    assert math.exp(small.log_B_ours_sum) < R.architecture_B_ours(1, 8, 2, 4)
    with pytest.raises(ValueError, match=r"^L \(layers\) == 0, must be >= 1$"):
        R.architecture_B_ours(0, 8, 2, 4)
    with pytest.raises(TypeError, match=r"^H \(heads\) must be an integer, got bool True$"):
        R.architecture_B_ours(1, 8, True, 4)


def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="ModelSpectra"):
        R.median_stable_ranks([1, 2])
    with pytest.raises(TypeError, match="BoundReport"):
        R.norm_ratio_medians(synthetic_spectra())
    sp = synthetic_spectra()
    with pytest.raises(ValueError, match=r"^p \(a grid point in \(0, 2\]\) == 0.0, must be > 0$"):
        R.compare_modes(sp, sp, p=0.0)
    with pytest.raises(ValueError, match="different numbers of matrices"):
        R.break_even_shifts(score(sp), synthetic_spectra(L=2))


# --------------------------------------------------------------------------------------------
# clean vs paper, logit check (tiny real checkpoint written by the test)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_bert(tiny_bert_dir):
    return tiny_bert_dir(hidden=32, layers=2, heads=4, intermediate=64)


def test_compare_modes_on_a_tiny_bert(tiny_bert):
    clean = compute_spectra(tiny_bert, mode="clean")
    paper = compute_spectra(tiny_bert, mode="paper")
    mc = R.compare_modes(clean, paper, p=0.25)
    assert mc.top_err < 1e-10
    assert mc.zeros_per_head == 32 - 8
    assert 0 <= mc.zero_median < 1e-12 and mc.zero_pow == pytest.approx(mc.zero_median ** 0.25)
    assert mc.inflation_median > 1.0  # the numerical zeros inflate S_p of the explicit products
    # the same spectra compared with themselves: nothing to report
    same = R.compare_modes(clean, clean, p=0.25)
    assert same.top_err == 0 and same.inflation_median == pytest.approx(1.0)


def test_check_head_logits_on_a_tiny_bert(tiny_bert):
    check = R.check_head_logits(tiny_bert, n_tokens=5)
    assert check.checked == 2 * 4
    assert check.worst < 1e-10
    with pytest.raises(ValueError, match="n_tokens"):
        R.check_head_logits(tiny_bert, n_tokens=0)


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------
def test_markdown_table_layout_and_errors():
    t = R.markdown_table(["a", "$b$"], [("x|y", 1.23456), ("z", 2.0)], ["", ".2f"])
    lines = t.splitlines()
    assert lines[0] == "| a | $b$ |"
    assert lines[1] == "| :-- | --: |"
    assert lines[2] == r"| x\|y | 1.23 |"
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        R.markdown_table(["a", "b"], [(1,)])
    with pytest.raises(ValueError, match="formats"):
        R.markdown_table(["a"], [(1,)], ["", ""])


def test_compare_settings_rows_match_score():
    sp = synthetic_spectra()
    rows = R.compare_settings({"clean": sp}, [("clean", 1.0, False), ("clean", "inv_sqrt_dh", False)])
    s0 = score(sp).summary()
    assert rows[0].log10_B_ours == pytest.approx(s0["B_ours_sum"]["log10"])
    assert rows[0].log10_B_edelman == pytest.approx(s0["B_edelman"]["log10"])
    assert rows[1].log10_B_edelman < rows[0].log10_B_edelman  # smaller logits, smaller Lipschitz factors
    table = R.settings_table(rows)
    assert table.count("\n") == 3 and r"$1/\sqrt{d_h}$" in table and "100%" in table
    with pytest.raises(ValueError, match="no spectra for mode 'paper'"):
        R.compare_settings({"clean": sp}, [("paper", 1.0, False)])


def test_family_table_sorted_by_depth_then_width():
    reps = {"b": score(synthetic_spectra(L=2, N=8)), "a": score(synthetic_spectra(L=1, N=8))}
    lines = R.family_table(reps).splitlines()
    assert "`a`" in lines[2] and "`b`" in lines[3]


# --------------------------------------------------------------------------------------------
# figures and the book style
# --------------------------------------------------------------------------------------------
def _meta(fig):
    from PIL import Image

    with Image.open(io.BytesIO(figure_png(fig))) as im:
        return dict(im.text, width_px=im.width)


# A 390 px phone shows a figure at most 342 CSS px wide; its smallest text must be >= 9 CSS px there.
PHONE_COLUMN_PX, MIN_PHONE_PX = 342, 9.0


def phone_text_px(meta) -> float:
    """Smallest text of a saved figure in CSS px when a phone shows it 342 px wide."""
    shown = min(PHONE_COLUMN_PX, meta["width_px"])
    return float(meta["BookMinFontPt"]) * float(meta["BookDPI"]) / 72 * shown / meta["width_px"]


def test_every_chapter6_figure_follows_the_book_style():
    import matplotlib.pyplot as plt

    use_book_style()
    sp = synthetic_spectra(L=3)
    rep = score(sp)
    figs = [FIG.figure_spectral_decay(sp, layers=range(3)), FIG.figure_T_ratio(rep), FIG.figure_norms(rep),
            FIG.figure_p_star_histogram(rep), FIG.figure_prefix_depth(sp),
            FIG.figure_scaling([score(synthetic_spectra(L=l, N=n)) for l in (1, 2) for n in (8, 16)])]
    for fig in figs:
        assert panels_per_row(fig) <= 2
        assert min_font_pt(fig) >= 10
        assert fig.get_size_inches()[0] <= 6.4 + 1e-9
        meta = _meta(fig)
        assert float(meta["BookMinFontPt"]) >= 10 and int(meta["BookPanelsPerRow"]) <= 2
        assert phone_text_px(meta) >= MIN_PHONE_PX, (fig.get_size_inches(), meta)
        plt.close(fig)
    with pytest.raises(ValueError, match="no layer"):
        FIG.figure_spectral_decay(sp, layers=[7])


def test_phone_text_check_has_power():
    import matplotlib.pyplot as plt

    use_book_style()
    # the figures before issue #19: 6.4 in wide, 10.5 pt tick labels -> about 7.6 CSS px on a phone
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot([0, 1], [0, 1])
    before = phone_text_px(_meta(fig))
    plt.close(fig)
    fig, ax = book_subplots(1, 2)
    for a in ax:
        a.plot([0, 1], [0, 1])
    after = phone_text_px(_meta(fig))
    plt.close(fig)
    assert before < MIN_PHONE_PX <= after, (before, after)


def test_style_measures_what_it_claims():
    import matplotlib.pyplot as plt

    use_book_style()
    fig, axes = plt.subplots(1, 4, figsize=(12, 3))  # the old Chapter 6 strip
    axes[0].legend(handles=axes[0].plot([1, 2], label="layer 0"), fontsize=7)
    assert panels_per_row(fig) == 4
    assert min_font_pt(fig) == 7
    assert _meta(fig)["BookMinFontPt"] == "7"
    plt.close(fig)
    fig, ax = book_subplots(2, 2)
    im = ax[0, 0].imshow(np.eye(3))
    fig.colorbar(im, ax=ax)
    assert panels_per_row(fig) == 2  # the colour bar is not a panel
    plt.close(fig)
    with pytest.raises(ValueError, match="at most 2 panels per row"):
        book_subplots(1, 3)
    with pytest.raises(ValueError, match="figsize"):
        book_subplots(1, 1, figsize=(3, 3))


def test_svg_carries_the_same_metadata_as_the_png():
    import matplotlib.pyplot as plt

    use_book_style()
    fig, axes = plt.subplots(1, 3, figsize=(9, 3))  # a figure the style would refuse: 3 panels, 7 pt
    axes[0].legend(handles=axes[0].plot([1, 2], label="layer 0"), fontsize=7)
    svg, png = figure_svg(fig), _meta(fig)
    plt.close(fig)
    meta = svg_metadata(svg)
    assert meta == {"BookMinFontPt": "7", "BookPanelsPerRow": "3"}
    assert {k: png[k] for k in meta} == meta
    # the SVG's natural width is the figure's width (tight box) in points: 9 in is ~648 pt
    width_pt = float(svg.split('width="', 1)[1].split("pt", 1)[0])
    assert 600 < width_pt < 680
    # text as paths: no <text> element, so a browser without the font draws the same figure
    assert "<text" not in svg


def test_svg_metadata_of_other_documents():
    assert svg_metadata('<svg xmlns="http://www.w3.org/2000/svg"/>') == {}
    with pytest.raises(ValueError, match="not an SVG document"):
        svg_metadata("<svg")


def test_book_style_displays_one_output_in_svg_and_png():
    # in an IPython shell (a fresh process: the shell is a process-wide singleton) a figure formats to
    # one output holding an SVG and a PNG, with the same metadata, and nothing else but its text
    import subprocess
    import sys

    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "import matplotlib; matplotlib.use('agg')\n"
        "from bounds_lib.core.style import use_book_style, book_subplots, svg_metadata\n"
        "use_book_style()\n"
        "fig, ax = book_subplots(); ax.plot([0, 1])\n"
        "data, _ = ip.display_formatter.format(fig)\n"
        "print(sorted(data)); print(svg_metadata(data['image/svg+xml']))\n"
        "import matplotlib.pyplot as plt; empty = plt.figure()\n"
        "print(sorted(ip.display_formatter.format(empty)[0]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "['image/png', 'image/svg+xml', 'text/plain']"
    assert lines[1] == "{'BookMinFontPt': '10.5', 'BookPanelsPerRow': '1'}"
    # an empty figure shows nothing but its text, as IPython's own formatter does
    assert lines[2] == "['text/plain']"


def test_svg_output_in_process():
    import matplotlib.pyplot as plt

    from bounds_lib.core import style

    use_book_style()
    # IPython's rule, as for the PNG: a figure with nothing drawn shows no image at all
    empty = plt.figure()
    assert style._svg_formatter(empty) is None and style._png_formatter(empty) is None
    for draw in ("axes", "line", "image"):
        fig = plt.figure()
        if draw == "axes":
            fig.add_subplot()
        elif draw == "line":
            fig.lines.append(matplotlib.lines.Line2D([0, 1], [0, 1]))
        else:
            fig.figimage(np.eye(4))
        svg = style._svg_formatter(fig)
        assert svg.lstrip().startswith("<?xml") and svg_metadata(svg.encode("utf-8"))["BookPanelsPerRow"]
        plt.close(fig)
    plt.close(empty)
    # a figure without any text records "none" as its smallest font
    fig, ax = book_subplots()
    ax.plot([0, 1])
    ax.axis("off")
    assert svg_metadata(figure_svg(fig))["BookMinFontPt"] == "none"
    plt.close(fig)


def test_figure_svg_is_tight_and_white_whatever_the_rc_settings():
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"savefig.bbox": None, "savefig.facecolor": "red"}):
        fig = plt.figure(figsize=(9, 3), layout="none")
        ax = fig.add_axes((0.4, 0.4, 0.2, 0.2))
        ax.plot([1, 2])
        ax.axis("off")
        svg = figure_svg(fig)
        plt.close(fig)
    width_pt = float(svg.split('width="', 1)[1].split("pt", 1)[0])
    # cropped to what is drawn (a fifth of the width, and the padding), not the 648 pt of the canvas
    assert width_pt < 9 * 72 / 3
    assert "#ff0000" not in svg and "fill: #ffffff" in svg
