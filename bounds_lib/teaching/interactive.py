"""Figures a reader moves without a kernel: precomputed frames behind a slider (Chapters 2 and 4).

The book is read as static HTML (offline, no Jupyter server, no CDN), so an interactive figure is a
set of frames drawn here — one PNG per value of the parameter, in the book's style
(:func:`bounds_lib.core.style.figure_png`) — and a range control that switches between them with a few
lines of inline JavaScript. :class:`Slider` is what a chapter displays: its HTML (the page) holds every
frame; its PNG (a plain notebook, where output scripts do not run) is the initial frame.

The frames are 150-dpi PNGs, 765 px wide: the page column shows them at its width, as it shows the
static figures (672 px at a 1280 px window; on a 390 px phone 342 px, 2.2 image pixels per CSS px).
They are not SVG, as the static figures are, because every frame travels inside the page as a data
URI: a frame's SVG (the spectrum's hundreds of markers as paths) is about 1.7 times its PNG (96 KB
against 57 KB for Chapter 2's frames, measured), times the number of frames.

* :func:`tau_split_frames` — Chapter 2: a real singular-value spectrum split at a threshold ``τ``; the
  part above ``τ`` (``W₁``, rank ``r(τ)``) and the tail (``W₂``, Frobenius norm ``ρ(τ)``), and the two
  covering terms of that split (:func:`bounds_lib.theory.interpolation.entropy_low_rank_volumetric` and
  :func:`bounds_lib.theory.interpolation.entropy_tail_maurey` at radius ``ε/2`` each);
* :func:`posthoc_frames` — Chapter 4: ``log 𝒯(W;p)`` along the post hoc grid for a few matrices, with
  the current ``p`` and each matrix's ``p*`` marked (:func:`bounds_lib.theory.peeling.posthoc_choice`).
"""
from __future__ import annotations

import base64
import html
import json

import numpy as np

from ..core.validation import check_scalar

__all__ = ["Slider", "tau_split_frames", "posthoc_frames"]

class Slider:
    """Frames (PNG bytes) behind a range control, one label per frame.

    Parameters
    ----------
    frames : sequence of bytes
        PNG images, all of the same figure drawn at successive parameter values.
    labels : sequence of str
        What the control shows for each frame (e.g. ``"τ = 0.3"``).
    name : str
        The parameter's name, for the control's accessible label.
    alt : str
        Alt text of the figure (what it shows).
    start : int
        The frame shown first.

    Examples
    --------
    >>> s = Slider([b"\\x89PNG-a", b"\\x89PNG-b"], ["p = 0", "p = 1"], "p", "A test figure.")
    >>> html_text = s._repr_html_()
    >>> 'type="range"' in html_text and html_text.count("data:image/png;base64,") == 3
    True
    """

    def __init__(self, frames, labels, name: str, alt: str, start: int = 0):
        frames, labels = list(frames), [str(x) for x in labels]
        if not frames or len(frames) != len(labels):
            raise ValueError(f"a Slider needs one label per frame, got {len(frames)} frames and {len(labels)} labels")
        if not all(isinstance(f, (bytes, bytearray)) for f in frames):
            raise TypeError("Slider frames must be PNG bytes")
        self.frames, self.labels, self.name, self.alt = frames, labels, str(name), str(alt)
        self.start = check_scalar(start, "start (frame index)", int, min_val=0, max_val=len(frames) - 1)

    def __repr__(self) -> str:
        # no memory address: a notebook's printed output must be the same in every run
        return f"Slider({self.name!r}, {len(self.frames)} frames, showing {self.labels[self.start]!r})"

    def _id(self) -> str:
        import hashlib

        key = json.dumps([self.name, self.alt, self.labels, self.start]).encode()
        return "book-slider-" + hashlib.sha1(key).hexdigest()[:12]

    def _uris(self) -> list[str]:
        return ["data:image/png;base64," + base64.b64encode(f).decode("ascii") for f in self.frames]

    def _repr_png_(self) -> bytes:
        return bytes(self.frames[self.start])

    def _repr_html_(self) -> str:
        uid = self._id()
        uris = self._uris()
        esc = html.escape
        return (
            f'<figure class="book-slider" id="{uid}">'
            f'<img src="{uris[self.start]}" alt="{esc(self.alt)}" style="max-width:100%;height:auto">'
            f'<figcaption class="book-slider-control"><label>{esc(self.name)} '
            f'<input type="range" min="0" max="{len(uris) - 1}" step="1" value="{self.start}" '
            f'aria-label="{esc(self.name)}"></label> <output>{esc(self.labels[self.start])}</output>'
            "</figcaption>"
            f"<script>(function(){{var f=document.getElementById({json.dumps(uid)}),"
            f"s={json.dumps(uris)},l={json.dumps(self.labels)},i=f.querySelector('input'),"
            "o=f.querySelector('output'),m=f.querySelector('img');"
            "i.addEventListener('input',function(){m.src=s[+i.value];o.textContent=l[+i.value];});})();</script>"
            "</figure>"
        )


def _sigma(sigma) -> np.ndarray:
    s = np.sort(np.asarray(sigma, dtype=float))[::-1]
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)) or s[0] <= 0 or s[-1] < 0:
        raise ValueError("sigma must be a non-empty 1-d array of finite singular values, not all zero")
    return s


def tau_split_frames(sigma, shape, taus, eps: float, n_rows: int, title: str = "") -> Slider:
    """Chapter 2's split of one real spectrum at each ``τ`` in ``taus``: the frames and their slider.

    Each frame shows the singular values (log scale) with the threshold ``τ``: the ``r(τ)`` values above
    it make ``W₁``, the others the tail ``W₂`` with ``ρ(τ) = ‖W₂‖_F``; beside it, the two covering
    terms of the split at radius ``ε`` — ``r(τ)(d+d')·log(1 + 8σ₁/ε)`` and Maurey's tail term at
    ``ρ(τ)`` — and their sum, as ``τ`` runs over ``taus`` (the current one marked). Where the sum is
    the tail alone the two curves coincide: the tail is drawn as a wide band with open circles and the
    sum dashed on top of it, so both stay visible; one key under both panels, in the same place in
    every frame.
    """
    from ..theory.interpolation import entropy_low_rank_volumetric, entropy_tail_maurey
    from ..core.style import SAVE_DPI, book_subplots, figure_png

    s = _sigma(sigma)
    d, dp = (check_scalar(x, "shape", int, min_val=1) for x in shape)
    taus = np.asarray(sorted(float(t) for t in taus))
    if taus.size < 2 or taus[0] <= 0:
        raise ValueError("taus must hold at least two positive thresholds")
    ranks = np.array([int(np.sum(s > t)) for t in taus])
    rho = np.array([float(np.sqrt(np.sum(s[s <= t] ** 2))) for t in taus])
    low = np.array([entropy_low_rank_volumetric(int(r), d, dp, float(s[0]), eps / 2) for r in ranks])
    tail = np.array([float(entropy_tail_maurey(r, eps / 2, dp, n_rows)) for r in rho])
    frames, labels = [], []
    import matplotlib.pyplot as plt

    # One figure for every frame, at the dpi the frames are saved at: what does not move with τ (the right
    # panel's curves, the key) is drawn once; the left panel's points, the threshold lines, the left key
    # and the title are replaced per frame, and both panels' data limits recomputed from what they now
    # hold. Each frame is the PNG a fresh figure per frame gave (the same bytes, checked when this was
    # written), for about three quarters of the time: every draw of every frame (the style's measure,
    # the layout, the PNG) uses one renderer, whose text sizes and parsed tick labels are kept.
    fig, (a1, a2) = book_subplots(1, 2, height=3.0)
    fig.set_dpi(SAVE_DPI)
    idx = np.arange(1, s.size + 1)
    # the sum is often the tail alone: the tail is a wide light band with open circles, the sum a
    # dashed black line on top of it, so that both stay visible where they coincide
    # a part that is 0 (no tail below the smallest σ, no rank above the largest) has no place on a log axis
    a2.loglog(taus, np.where(low > 0, low, np.nan), "s-", ms=4, color="C0", lw=1.8, label="rank part",
              zorder=3)
    a2.loglog(taus, np.where(tail > 0, tail, np.nan), "o-", ms=6, mfc="white", color="C1", lw=4.0,
              alpha=0.75, label="tail part", zorder=2)
    a2.loglog(taus, low + tail, "--", color="k", lw=1.4, label="sum", zorder=4)
    a2.set(xlabel=r"$\tau$", ylabel="log covering (nats)", title=title or "the two covering terms")
    # one key under both panels, in the same place in every frame
    fig.legend(*a2.get_legend_handles_labels(), loc="outside lower center", ncol=3)
    a1.set_yscale("log")
    a1.set(xlabel="index i", ylabel=r"$\sigma_i$")
    moving = []
    try:
        for k, t in enumerate(taus):
            for artist in moving:
                artist.remove()
            moving = [
                *a1.plot(idx[s > t], s[s > t], "o", ms=3, color="C0", label=f"$W_1$: rank {ranks[k]}"),
                *a1.plot(idx[(s <= t) & (s > 0)], s[(s <= t) & (s > 0)], "o", ms=3, color="C1",
                         label=rf"$W_2$: $\Vert W_2\Vert_F$ = {rho[k]:.3g}"),
                a1.axhline(t, color="C3", lw=1.2),
                a2.axvline(t, color="C3", lw=1.2),
            ]
            for a in (a1, a2):  # the limits of this frame's data only
                a.relim()
                a.autoscale_view()
            a1.set_title(rf"$\tau$ = {t:.3g}")
            a1.legend(loc="lower left")
            frames.append(figure_png(fig))
            labels.append(f"τ = {t:.3g}: rank {ranks[k]}, sum {low[k] + tail[k]:.3g} nats")
    finally:
        plt.close(fig)
    best = int(np.argmin(low + tail))
    alt = ("Singular values of one matrix split at a threshold tau that the slider moves: the values above "
           "tau (the low-rank part) and the tail, and the two covering terms with their sum as tau varies.")
    return Slider(frames, labels, "τ", alt, start=best)


#: Sizes in points of the p* stars of :func:`posthoc_frames`, for a star alone and for the first, second
#: (and further) of stars that fall on the same spot, each drawn smaller on top of the one before.
STAR_ALONE = 13.0
STAR_NESTED = (22.0, 11.0, 5.5, 3.0)


def _star_sizes(stars: dict, y_range: float) -> dict:
    """Marker size of every p* star: :data:`STAR_ALONE`, or :data:`STAR_NESTED` in drawing order where
    stars coincide (the same ``p*``, ``log10 𝒯`` within 3 % of the plot's range) and would hide each other."""
    names = list(stars)
    tol = 0.03 * y_range if y_range > 0 else 1e-12

    def near(a, b):
        return stars[a][0] == stars[b][0] and abs(stars[a][1] - stars[b][1]) <= tol

    out = {}
    for i, k in enumerate(names):
        group = [j for j in names if near(k, j)]
        if len(group) == 1:
            out[k] = STAR_ALONE
        else:
            rank = sum(near(k, j) for j in names[:i])
            out[k] = STAR_NESTED[min(rank, len(STAR_NESTED) - 1)]
    return out


def posthoc_frames(matrices: dict, N: int, grid, every: int = 1) -> Slider:
    """Chapter 4's ``log₁₀ 𝒯(W;p)`` against ``p`` for a few matrices, one frame per ``p`` of the grid.

    ``matrices`` maps a legend label to ``(sigma, log_K)``: the singular values of a matrix and its
    ``log K`` (:func:`bounds_lib.analysis.scoring.score` reports both); ``grid`` is the post hoc grid
    (:func:`bounds_lib.theory.peeling.posthoc_grid`), every ``every``-th point a frame. Each frame marks the
    current ``p`` on every curve and each matrix's ``p*`` (the grid minimum) with a star; stars that fall
    on the same spot nest, each drawn smaller than the one under it (``_star_sizes``). The key sits
    under the axes, in the same place in every frame, and shows each matrix's line and star.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from ..theory.peeling import posthoc_choice
    from ..core.style import book_subplots, figure_png

    if not matrices:
        raise ValueError("posthoc_frames needs at least one matrix")
    every = check_scalar(every, "every", int, min_val=1)
    grid = np.asarray(grid, dtype=float)
    choices = {k: posthoc_choice(_sigma(s), float(lk), N, grid) for k, (s, lk) in matrices.items()}
    ln10 = np.log(10)
    frames, labels = [], []
    star_ms = _star_sizes({k: (c.p_star, c.log_T_star / ln10) for k, c in choices.items()},
                          np.ptp(np.concatenate([c.log_T for c in choices.values()])) / ln10)
    for j in range(0, grid.size, every):
        fig, ax = book_subplots(1, 1, height=3.4)
        for i, (name, c) in enumerate(choices.items()):
            y = c.log_T / ln10
            ax.plot(grid, y, "-", color=f"C{i}")
            ax.plot([grid[j]], [y[j]], "o", color=f"C{i}", ms=6)
            # stars that coincide nest: each smaller than the one drawn before, edged in white
            ax.plot([c.p_star], [c.log_T_star / ln10], "*", color=f"C{i}", ms=star_ms[name], mec="white",
                    mew=0.8, zorder=3 + i, clip_on=False)
        ax.axvline(grid[j], color="0.4", lw=1)
        ax.set(xlabel="Schatten index p", ylabel=r"$\log_{10}\mathcal{T}(W;p)$", title=f"p = {grid[j]:.3g}")
        # the key under the axes, in the same place in every frame (a "best" location jumps as p moves);
        # each entry shows the matrix's line and its star
        key = [Line2D([], [], color=f"C{i}", marker="*", ms=min(star_ms[name], STAR_ALONE), mec="white", mew=0.8,
                      label=f"{name} (p* = {c.p_star:.2g})") for i, (name, c) in enumerate(choices.items())]
        fig.legend(handles=key, loc="outside lower center", ncol=2)
        frames.append(figure_png(fig))
        plt.close(fig)
        terms = ", ".join(f"{name} {choices[name].log_T[j] / ln10:.3g}" for name in choices)
        labels.append(f"p = {grid[j]:.3g}: log10 T = {terms}")
    alt = ("The post hoc term log T(W;p) against the Schatten index p for a few matrices, with the p that "
           "the slider moves marked on every curve and each matrix's minimiser p* marked with a star.")
    return Slider(frames, labels, "p", alt)
