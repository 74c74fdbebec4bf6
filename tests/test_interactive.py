"""bounds_lib.teaching.interactive: frames behind a slider, drawn from real and synthetic spectra."""
import re

import numpy as np
import pytest

from bounds_lib.teaching import interactive as I
from bounds_lib.theory.interpolation import entropy_low_rank_volumetric, entropy_tail_maurey
from bounds_lib.theory.peeling import posthoc_choice, posthoc_grid

PNG = b"\x89PNG\r\n\x1a\n"


def test_slider_html_holds_every_frame_and_starts_where_asked():
    s = I.Slider([PNG + b"a", PNG + b"b", PNG + b"c"], ["x = 1", "x = 2", "x = 3"], "x", "Three frames.", start=1)
    h = s._repr_html_()
    uris = re.findall(r"data:image/png;base64,[A-Za-z0-9+/=]+", h)
    assert len(uris) == 1 + 3 and uris[0] == uris[2]  # the shown image is frame 1, then the list of all
    assert 'value="1"' in h and 'max="2"' in h and "<output>x = 2</output>" in h and 'alt="Three frames."' in h
    assert "http" not in h  # nothing loaded from a server
    assert s._repr_png_() == PNG + b"b"
    # the same in every run (a notebook's output is compared across runs): no address, no counter
    assert h == s._repr_html_() and repr(s) == "Slider('x', 3 frames, showing 'x = 2')"
    other = I.Slider([PNG + b"a", PNG + b"b"], ["x = 1", "x = 2"], "x", "Two frames.")
    assert other._repr_html_().split('id="')[1][:24] != h.split('id="')[1][:24]  # another widget, another id


@pytest.mark.parametrize("args, exc, match", [
    (([], [], "x", "a"), ValueError, "one label per frame"),
    (([PNG], ["a", "b"], "x", "a"), ValueError, "one label per frame"),
    ((["not bytes"], ["a"], "x", "a"), TypeError, "PNG bytes"),
])
def test_slider_refuses_bad_frames(args, exc, match):
    with pytest.raises(exc, match=match):
        I.Slider(*args)
    with pytest.raises(ValueError, match="start"):
        I.Slider([PNG], ["a"], "x", "a", start=1)


def test_tau_split_frames_compute_the_two_terms_of_the_split():
    sigma = 3.0 * np.arange(1, 21, dtype=float) ** -1.0
    taus = [0.1, 0.5, 1.5]
    s = I.tau_split_frames(sigma, (20, 30), taus, eps=0.5, n_rows=100)
    assert len(s.frames) == 3 and all(f.startswith(PNG) for f in s.frames)
    sums = []
    for t in taus:
        r, rho = int(np.sum(sigma > t)), float(np.sqrt(np.sum(sigma[sigma <= t] ** 2)))
        sums.append(entropy_low_rank_volumetric(r, 20, 30, 3.0, 0.25) + float(entropy_tail_maurey(rho, 0.25, 30, 100)))
    assert s.start == int(np.argmin(sums))
    for label, t, total in zip(s.labels, taus, sums):
        assert label == f"τ = {t:.3g}: rank {int(np.sum(sigma > t))}, sum {total:.3g} nats"
    with pytest.raises(ValueError, match="two positive thresholds"):
        I.tau_split_frames(sigma, (20, 30), [0.5], eps=0.5, n_rows=100)
    with pytest.raises(ValueError, match="singular values"):
        I.tau_split_frames([0.0, 0.0], (2, 2), taus, eps=0.5, n_rows=10)


def test_posthoc_frames_mark_the_grid_and_p_star():
    N, L = 16, 2
    grid = posthoc_grid(L, N)
    flat, fast = np.ones(N), 2.0 ** -np.arange(N)
    s = I.posthoc_frames({"flat": (flat, 0.0), "fast": (fast, 0.0)}, N, grid, every=3)
    assert len(s.frames) == len(range(0, grid.size, 3))
    c = posthoc_choice(fast, 0.0, N, grid)
    assert s.labels[1].startswith(f"p = {grid[3]:.3g}: log10 T = flat ")
    assert s.labels[1].endswith(f"fast {c.log_T[3] / np.log(10):.3g}")
    with pytest.raises(ValueError, match="at least one matrix"):
        I.posthoc_frames({}, N, grid)


@pytest.fixture
def drawn_frames(monkeypatch):
    """The matplotlib figures behind a slider's frames, kept open (the frame functions close them).

    Each is a copy of the figure as it was saved (a frame function may redraw one figure for every
    frame), drawn on its own canvas, so that a test sees every frame and not the last one again."""
    import pickle

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bounds_lib.core import style

    figures = []
    real_png = style.figure_png

    def keep(fig, *a, **k):
        fig.draw_without_rendering()
        png = real_png(fig, *a, **k)
        frame = pickle.loads(pickle.dumps(fig))
        FigureCanvasAgg(frame)
        frame.draw_without_rendering()
        figures.append(frame)
        return png

    monkeypatch.setattr(style, "figure_png", keep)
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    monkeypatch.setitem(plt.rcParams, "figure.max_open_warning", 0)  # a slider's frames, all open on purpose
    with matplotlib.style.context(str(style.STYLE_FILE)):  # the book's style, as in the chapters
        yield figures
    monkeypatch.undo()
    for f in figures:
        plt.close(f)


def _legend_boxes(fig, shared=False):
    """Window extents of the figure's keys (``shared``: only those of the figure, not of one panel)."""
    r = fig.canvas.get_renderer()
    legends = list(fig.legends) + ([] if shared else [ax.get_legend() for ax in fig.axes if ax.get_legend()])
    return [tuple(np.round(lg.get_window_extent(r).bounds, 1)) for lg in legends]


def _chapter4_like():
    """Four matrices as in Chapter 4's slider: two pairs whose p* = 0 stars fall on the same spot."""
    N, L = 16, 2
    grid = posthoc_grid(L, N)
    # rank 4 (the rest numerically zero) and full rank; on these matplotlib's "best" key moved with p
    low, flat = np.r_[np.ones(4), np.full(N - 4, 1e-9)], np.ones(N)
    return {"QK": (low, 0.0), "V": (low, 0.0), "M_in": (flat, 1.0), "M_out": (flat, 1.0)}, N, grid


def test_posthoc_key_stays_put_and_coinciding_stars_stay_visible(drawn_frames):
    """Issue #32: Chapter 4's key jumped between frames (matplotlib's "best" place moves with p) and
    stars at the same spot hid each other. Every frame has its key in the same place, outside the axes,
    and a star drawn over another at the same spot is smaller than it (they nest, both visible)."""
    mats, N, grid = _chapter4_like()
    I.posthoc_frames(mats, N, grid, every=1)
    assert len(drawn_frames) == grid.size
    boxes = {tuple(_legend_boxes(f)) for f in drawn_frames}
    assert len(boxes) == 1, f"the key moves between frames: {sorted(boxes)}"
    fig = drawn_frames[0]
    r = fig.canvas.get_renderer()
    (ax,) = fig.axes
    (key_box,) = next(iter(boxes))
    assert key_box[1] + key_box[3] <= ax.get_window_extent(r).y0, "the key covers the axes"
    stars = [ln for ln in ax.lines if ln.get_marker() == "*"]
    assert len(stars) == len(mats)
    spots = {}
    for ln in sorted(stars, key=lambda ln: ln.get_zorder()):
        spot = (float(ln.get_xdata()[0]), round(float(ln.get_ydata()[0]), 6))
        spots.setdefault(spot, []).append(ln.get_markersize())
    assert sorted(len(v) for v in spots.values()) == [2, 2]  # the case: two pairs on two spots
    for sizes in spots.values():
        # each star on top of another is markedly smaller: at least 1.5 times, so a rim shows
        assert all(a >= 1.5 * b for a, b in zip(sizes, sizes[1:])), sizes


def test_tau_split_tail_stays_visible_under_the_sum(drawn_frames):
    """Issue #32: in Chapter 2's slider the sum (black, solid, on top) covered the tail part where the sum
    is the tail alone. Where two curves coincide the one on top must leave the other visible: it is dashed,
    or at least 1.5 pt thinner than the one under it."""
    sigma = 3.0 * np.arange(1, 41, dtype=float) ** -0.5
    I.tau_split_frames(sigma, (40, 50), [0.3, 0.6, 1.0, 2.0], eps=0.5, n_rows=1000)
    for fig in drawn_frames:
        ax = fig.axes[1]
        by = {ln.get_label(): ln for ln in ax.lines}
        tail, total = by["tail part"], by["sum"]
        under, over = sorted((tail, total), key=lambda ln: ln.get_zorder())
        shows = over.get_linestyle() in ("--", ":", "-.") or under.get_linewidth() >= over.get_linewidth() + 1.5
        assert over is total and shows, "the sum hides the tail part"
        assert tail.get_marker() not in (None, "None", "") and tail.get_color() != total.get_color()
    # the shared key under both panels stays in place
    assert len({tuple(_legend_boxes(f, shared=True)) for f in drawn_frames}) == 1
    # each frame's left panel is its own: its title, and limits from its data alone (τ = 0.3, below every σ,
    # widens the first frame's only), as a figure drawn afresh for every frame would have them
    assert [f.axes[0].get_title() for f in drawn_frames] == [rf"$\tau$ = {t:.3g}" for t in (0.3, 0.6, 1.0, 2.0)]
    lows = [f.axes[0].get_ylim()[0] for f in drawn_frames]
    assert lows[0] < 0.3 < lows[1] == lows[2] == lows[3] < sigma[-1]
