"""The figures of Chapter 6 (proxies on real checkpoints), in the book's style — their one home.

Chapter 6 and the CLI's ``--plots`` call these functions; :mod:`bounds_lib.analysis.report` re-exports
some under their old names. Every figure is made with
:func:`bounds_lib.core.style.book_subplots` (at most two panels per row, sized for the page) and carries a
colour key for every colour (a colour bar for layers). Call :func:`bounds_lib.core.style.use_book_style`
once in a notebook first; matplotlib is imported on first use.

* :func:`figure_spectral_decay` — ``σ_i/σ_1`` against ``i`` by matrix type (from spectra);
* :func:`figure_T_ratio` — ``𝒯(W;p)/𝒯(W;0)`` against ``p`` for every matrix (from a report);
* :func:`figure_norms` — spectral, (2,1) and (1,1) norms by layer and type;
* :func:`figure_p_star_histogram` — the post hoc ``p*`` over all matrices;
* :func:`figure_prefix_depth` — the proxies of the first-k-layer prefixes of one model;
* :func:`figure_scaling` — the paper's width and depth figures for a family of checkpoints;
* :func:`figure_esd` — the empirical spectral density of every layer (small multiples).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..theory.model import MULTI_HEAD_MATRIX_TYPES

from .scoring import BoundReport, ScoringOptions, check_report, score
from .spectra import ModelSpectra, check_spectra

__all__ = [
    "MATRIX_TYPE_LABELS",
    "figure_front_page",
    "figure_spectral_decay",
    "figure_T_ratio",
    "figure_norms",
    "figure_p_star_histogram",
    "figure_prefix_depth",
    "figure_scaling",
    "figure_esd",
]

#: Axis and legend labels of the multi-head matrix types (:data:`~bounds_lib.theory.model.MULTI_HEAD_MATRIX_TYPES`).
#: Matplotlib mathtext, so the API page does not show the value (it would read as raw TeX).
#:
#: :meta hide-value:
MATRIX_TYPE_LABELS = {"QK": r"$QK_h$", "V": r"$\tilde V_h$", "M_in": r"$M_{\rm in}$", "M_out": r"$M_{\rm out}$"}


def _layer_colorbar(fig, axes, layers, label="layer"):
    """A discrete colour bar keyed to ``layers`` (viridis); returns the layer → colour function."""
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm

    layers = list(layers)
    cmap = plt.get_cmap("viridis", len(layers))
    norm = BoundaryNorm(np.arange(len(layers) + 1) - 0.5, len(layers))
    cb = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, ticks=range(len(layers)), label=label,
                      fraction=0.04, pad=0.02)
    step = max(1, -(-len(layers) // 8))  # at most ~8 tick labels
    cb.set_ticks(range(0, len(layers), step), labels=[str(layers[i]) for i in range(0, len(layers), step)])
    index = {l: i for i, l in enumerate(layers)}
    return lambda l: cmap(index[l])


def _note_zero_matrices(ax, n: int):
    """Say in the panel's corner how many zero matrices (nothing to draw on a log axis) were left out."""
    if n:
        ax.text(0.98, 0.02, f"{n} zero matri{'x' if n == 1 else 'ces'} not drawn", ha="right", va="bottom",
                transform=ax.transAxes, fontsize=10.5, color="0.3")


def _panels_by_type(layers, draw, *, xlabel: str, ylabel: str, **subplots_kw):
    """2×2 panels, one per matrix type, coloured by layer (colour bar); ``draw(ax, matrix_type, colour)``."""
    from ..core.style import book_subplots

    fig, axes = book_subplots(2, 2, height=2.6, **subplots_kw)
    colour = _layer_colorbar(fig, axes, layers)
    for ax, matrix_type in zip(axes.flat, MULTI_HEAD_MATRIX_TYPES):
        draw(ax, matrix_type, colour)
        ax.set_title(MATRIX_TYPE_LABELS[matrix_type])
    for ax in axes[1]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    return fig, axes


def figure_spectral_decay(spectra: ModelSpectra, layers=None):
    """``σ_i/σ_1`` against ``i`` for each matrix type (2×2 panels), colour = layer (colour bar).

    Parameters
    ----------
    spectra : ModelSpectra
        From :func:`bounds_lib.analysis.spectra.compute_spectra`.
    layers : iterable of int, optional
        Indices of the layers to draw (those beyond the model are skipped); default every layer.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        ``spectra`` is not a :class:`~bounds_lib.analysis.spectra.ModelSpectra`.
    ValueError
        None of ``layers`` exists in the model.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> fig = figure_spectral_decay(compute_spectra(state_dict, config=config), layers=[0, 1])
    >>> [ax.get_title() for ax in fig.axes[:4]] == list(MATRIX_TYPE_LABELS.values())
    True
    """
    check_spectra(spectra)
    layers = [l for l in (range(spectra.L) if layers is None else layers) if 0 <= l < spectra.L]
    if not layers:
        raise ValueError(f"no layer of {list(layers)} exists in a model with L = {spectra.L}")

    def draw(ax, matrix_type, colour):
        ms = [m for l in layers for m in spectra.select(matrix_type, l)]
        for m in ms:
            if m.sigma1 > 0:  # a zero matrix (a pruned head) has no decay to draw
                s = m.sigma[m.sigma > 0] / m.sigma1
                ax.semilogy(np.arange(1, s.size + 1), s, color=colour(m.layer), lw=1.0, alpha=0.8)
        _note_zero_matrices(ax, sum(m.sigma1 == 0 for m in ms))

    fig, _ = _panels_by_type(layers, draw, xlabel="index $i$", ylabel=r"$\sigma_i/\sigma_1$", sharey=True)
    return fig


def figure_T_ratio(report: BoundReport):
    """``𝒯(W;p)/𝒯(W;0)`` against ``p`` for every matrix (2×2 panels by type), colour = layer.

    Parameters
    ----------
    report : BoundReport
        From :func:`bounds_lib.analysis.scoring.score`.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        ``report`` is not a :class:`~bounds_lib.analysis.scoring.BoundReport`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> fig = figure_T_ratio(analyze(state_dict, config=config))
    >>> len(fig.axes)   # four panels and the colour bar
    5
    """
    check_report(report)

    def draw(ax, matrix_type, colour):
        ms = report.select(matrix_type)
        for m in ms:
            if m.rank > 0:  # 𝒯(W;0) = √(rank·N) = 0 for a zero matrix: no ratio to draw
                ax.semilogy(report.grid, np.exp(m.log_T - m.log_T0), lw=1.0, alpha=0.6, color=colour(m.layer))
        ax.axhline(1.0, color="k", lw=1.0, ls="--", label="ratio 1")
        _note_zero_matrices(ax, sum(m.rank == 0 for m in ms))

    fig, axes = _panels_by_type(range(report.L), draw, xlabel="$p$",
                                ylabel=r"$\mathcal{T}(W;p)/\mathcal{T}(W;0)$", sharex=True, sharey=True)
    axes[0, 0].legend(loc="upper left")
    return fig


def figure_norms(report: BoundReport):
    """Spectral, (2,1) and (1,1) norms by layer and type, and the ratio ``‖W‖_{1,1}/‖W‖_{2,1}`` (2×2 panels).

    When the head products' (1,1) norms were not computed (``entrywise=False``; CLI ``--no-entrywise``)
    the two panels that need them say so.

    Parameters
    ----------
    report : BoundReport
        From :func:`bounds_lib.analysis.scoring.score`.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        ``report`` is not a :class:`~bounds_lib.analysis.scoring.BoundReport`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> fig = figure_norms(analyze(state_dict, config=config))
    >>> fig.axes[3].get_title()
    '$\\\\|W\\\\|_{1,1}/\\\\|W\\\\|_{2,1}$'
    """
    from ..core.style import book_subplots

    check_report(report)
    fig, axes = book_subplots(2, 2, height=2.6, sharex=True)
    panels = [(lambda m: m.sigma1, r"$\|W\|_2$"), (lambda m: m.norm_21, r"$\|W\|_{2,1}$"),
              (lambda m: m.norm_11, r"$\|W\|_{1,1}$")]

    def layer_offsets(i, ms):  # the four types side by side at each layer
        return np.array([m.layer for m in ms]) + (i - 1.5) * 0.15

    n_zero = sum(m.sigma1 == 0 for m in report.matrices)
    for ax, (value, title) in zip(axes.flat, panels):
        for i, matrix_type in enumerate(MULTI_HEAD_MATRIX_TYPES):
            ms = [m for m in report.select(matrix_type) if m.sigma1 > 0]  # no zero on a log axis
            ax.semilogy(layer_offsets(i, ms), [value(m) for m in ms], "o", ms=4, alpha=0.7, color=f"C{i}",
                        label=MATRIX_TYPE_LABELS[matrix_type])
        ax.set_title(title)
        _note_zero_matrices(ax, n_zero)
    ax = axes[1, 1]
    for i, matrix_type in enumerate(MULTI_HEAD_MATRIX_TYPES):
        ms = [m for m in report.select(matrix_type) if m.sigma1 > 0]  # 0/0 for a zero matrix
        ax.plot(layer_offsets(i, ms), [m.norm_11 / m.norm_21 for m in ms], "o", ms=4, alpha=0.7, color=f"C{i}")
    ax.set_title(r"$\|W\|_{1,1}/\|W\|_{2,1}$")
    _note_zero_matrices(ax, n_zero)
    for ax in axes[1]:
        ax.set_xlabel("layer")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(MULTI_HEAD_MATRIX_TYPES))
    if any(math.isnan(m.norm_11) for m in report.matrices):
        for ax in fig.axes[2:4]:
            ax.text(0.5, 0.5, "head products' (1,1) norms\nnot computed (opt in:\nCLI --entrywise)",
                    ha="center", va="center", transform=ax.transAxes, color="0.3")
    return fig


def figure_p_star_histogram(report: BoundReport):
    """Histogram of the post hoc ``p*`` over all matrices, stacked by type.

    Parameters
    ----------
    report : BoundReport
        From :func:`bounds_lib.analysis.scoring.score`.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        ``report`` is not a :class:`~bounds_lib.analysis.scoring.BoundReport`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> fig = figure_p_star_histogram(analyze(state_dict, config=config))
    >>> fig.axes[0].get_ylabel()
    'matrices'
    """
    from ..core.style import book_subplots

    check_report(report)
    fig, ax = book_subplots(1, 1, height=3.0)
    step = report.grid[1] if report.grid.size > 1 else 1.0
    edges = np.append(report.grid, report.grid[-1] + step) - step / 2
    data = [[m.p_star for m in report.select(t)] for t in MULTI_HEAD_MATRIX_TYPES]
    ax.hist(data, bins=edges, stacked=True, label=[MATRIX_TYPE_LABELS[t] for t in MULTI_HEAD_MATRIX_TYPES])
    ax.set_xlabel(r"$p^\ast$ on the grid $\mathcal{P}_m$, " + f"$m = {round(1 / step)}$")
    ax.set_ylabel("matrices")
    ax.legend(loc="upper right")
    return fig


def figure_prefix_depth(spectra: ModelSpectra, options: ScoringOptions | None = None):
    """``B_ours`` and ``B_Edelman`` of the first-k-layer prefixes, each divided by its value at k = 1.

    These are prefixes of one trained model (:meth:`~bounds_lib.analysis.spectra.ModelSpectra.prefix`),
    **not** models trained at depth k.

    Parameters
    ----------
    spectra : ModelSpectra
        From :func:`bounds_lib.analysis.spectra.compute_spectra`.
    options : ScoringOptions, optional
        The scoring constants (default: the released ones).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        ``spectra`` is not a :class:`~bounds_lib.analysis.spectra.ModelSpectra`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> state_dict, config = random_bert_state_dict(n_layers=3, hidden=8, n_heads=2, d_ff=16)
    >>> fig = figure_prefix_depth(compute_spectra(state_dict, config=config))
    >>> [len(line.get_xdata()) for line in fig.axes[0].lines]
    [3, 3]
    """
    from ..core.style import book_subplots

    check_spectra(spectra)
    ks = np.arange(1, spectra.L + 1)
    reps = [score(spectra.prefix(int(k)), options) for k in ks]
    fig, ax = book_subplots(1, 1, height=3.0)
    for attr, lab in (("log_B_ours_sum", r"$B_{\rm ours}$"), ("log_B_edelman", r"$B_{\rm Edelman}$")):
        v = np.array([getattr(r, attr) for r in reps])
        ax.semilogy(ks, np.exp(v - v[0]), "o-", label=lab)
    ax.set_xlabel("$k$ (first $k$ layers of one model)")
    ax.set_ylabel("proxy / value at $k=1$")
    ax.legend()
    return fig


def figure_scaling(reports: Sequence[BoundReport]):
    """The paper's scaling figures from a family of checkpoints (2×2).

    Each proxy against ``N`` at fixed ``L`` (divided by its value at the smallest ``N``) and against
    ``L`` at fixed ``N``; log y. A curve needs at least two checkpoints; a row of panels is drawn only where
    it has a curve (a family of one width has no width panels), and a family with no curve at all is a
    :class:`ValueError` naming its sizes.

    Parameters
    ----------
    reports : sequence of BoundReport
        One report per checkpoint (:func:`bounds_lib.analysis.scoring.analyze`).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        An entry is not a :class:`~bounds_lib.analysis.scoring.BoundReport`.
    ValueError
        No two checkpoints differ only in ``N`` or only in ``L``.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> reps = []
    >>> for L in (1, 2):
    ...     state_dict, config = random_bert_state_dict(n_layers=L, hidden=8, n_heads=2, d_ff=16)
    ...     reps.append(analyze(state_dict, config=config))
    >>> fig = figure_scaling(reps)
    >>> [len(ax.lines) for ax in fig.axes]   # one row: B_ours and B_Edelman against L at N = 8
    [1, 1]
    """
    from ..core.style import book_subplots

    reports = list(reports)
    for r in reports:
        check_report(r, "every report")
    by = {(r.L, r.N): r for r in reports}
    Ls, Ns = sorted({k[0] for k in by}), sorted({k[1] for k in by})
    # a row of panels only where a curve exists (two checkpoints at one L and two N, or the reverse):
    # a family of one width has no width panels, and no empty ones
    sweeps = [(fixed, varied, key, fname, vname) for fixed, varied, key, fname, vname in (
        (Ls, Ns, lambda f, x: (f, x), "L", "$N$"), (Ns, Ls, lambda f, x: (x, f), "N", "$L$"))
        if any(sum(key(f, x) in by for x in varied) >= 2 for f in fixed)]
    if not sweeps:
        raise ValueError("the scaling figure needs two checkpoints that differ only in N or only in L; got "
                         + ", ".join(f"(L={L}, N={N})" for L, N in sorted(by)))
    fig, axes = book_subplots(len(sweeps), 2, height=3.0, squeeze=False)
    for j, (attr, lab) in enumerate((("log_B_ours_sum", r"$B_{\rm ours}$"), ("log_B_edelman", r"$B_{\rm Edelman}$"))):
        for i, (fixed, varied, key, fname, vname) in enumerate(sweeps):
            ax = axes[i, j]
            for f in fixed:
                xs = [x for x in varied if key(f, x) in by]
                if len(xs) >= 2:
                    v = np.array([getattr(by[key(f, x)], attr) for x in xs])
                    ax.semilogy(xs, np.exp(v - v[0]), "o-", label=f"${fname} = {f}$")
            ax.set_xlabel(vname)
            ax.set_title(f"{lab} / value at smallest {vname}")
            ax.legend()
    return fig


def figure_esd(spectra: ModelSpectra):
    """The empirical spectral density of every layer: one panel per layer (two per row), in each the histogram
    of ``log10 σ`` of the layer's ``QK_h`` (all heads), ``Ṽ_h``, ``M_in`` and ``M_out`` (one colour each, key
    on top), numerical zeros left out (below the rank tolerance of :func:`bounds_lib.theory.norms.numerical_rank`).

    An odd number of layers leaves no empty panel: the spare axis is removed.

    Raises :class:`TypeError` unless ``spectra`` is a :class:`~bounds_lib.analysis.spectra.ModelSpectra`.

    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> sd, cfg = random_bert_state_dict(n_layers=3, hidden=8, n_heads=2, d_ff=16)
    >>> fig = figure_esd(compute_spectra(sd, config=cfg))
    >>> [ax.get_title() for ax in fig.axes]
    ['layer 0', 'layer 1', 'layer 2']
    """
    from ..core.style import book_subplots
    from ..theory.norms import numerical_rank

    check_spectra(spectra)
    L = spectra.L
    ncols = 1 if L == 1 else 2
    nrows = -(-L // ncols)
    fig, axes = book_subplots(nrows, ncols, height=2.2, sharex=True, squeeze=False)
    kept = {id(m): np.log10(m.sigma[:numerical_rank(m.sigma)]) for m in spectra.matrices}
    values = np.concatenate([v for v in kept.values() if v.size]) if kept else np.zeros(1)
    bins = np.linspace(values.min(), values.max(), 40) if values.size and np.ptp(values) > 0 else 10
    colours = dict(zip(MULTI_HEAD_MATRIX_TYPES, ("C0", "C1", "C2", "C3")))
    for layer, ax in zip(range(L), axes.flat):
        for t in MULTI_HEAD_MATRIX_TYPES:
            v = np.concatenate([kept[id(m)] for m in spectra.select(t, layer)] or [np.zeros(0)])
            if v.size:
                ax.hist(v, bins=bins, density=True, histtype="step", color=colours[t], lw=1.3,
                        label=MATRIX_TYPE_LABELS[t])
        ax.set_title(f"layer {layer}")
    for ax in list(axes.flat)[L:]:
        fig.delaxes(ax)
    for i, ax in enumerate(list(axes.flat)[:L]):
        if i + ncols >= L:  # the lowest panel of its column: ticks and label
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel(r"$\log_{10}\sigma$")
    for ax in axes[:, 0]:
        ax.set_ylabel("density")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=4, frameon=False)  # constrained layout makes room
    return fig


def figure_front_page(spectra: ModelSpectra, report: BoundReport):
    """The front page's picture of a real model: its spectra (left) and why every matrix takes ``p* = 0``.

    Left: ``σ_i/σ₁`` against the relative index ``i/r`` for every feed-forward matrix and the query-key
    and value matrices of head 0 of every layer, one colour per matrix type — the spectra decay slowly,
    with no gap to cut at. Right: ``𝒯(W;p)/𝒯(W;0)`` on the post hoc grid for every matrix of the model;
    a curve above 1 everywhere means ``p* = 0`` (the rank count) for that matrix.

    Parameters
    ----------
    spectra : ModelSpectra
        From :func:`bounds_lib.analysis.spectra.compute_spectra`.
    report : BoundReport
        ``score(spectra)``.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import score
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> sp = compute_spectra(state_dict, config=config)
    >>> len(figure_front_page(sp, score(sp)).axes)
    2
    """
    from ..core.style import book_subplots

    check_report(report)
    fig, (a1, a2) = book_subplots(1, 2, height=3.2)
    check_spectra(spectra)
    for i, t in enumerate(MULTI_HEAD_MATRIX_TYPES):
        ms = [m for m in spectra.matrices if m.matrix_type == t and m.head <= 0 and np.max(m.sigma, initial=0) > 0]
        for j, m in enumerate(ms):
            s = np.sort(np.asarray(m.sigma, dtype=float))[::-1]
            s = s[s > 0]
            a1.semilogy(np.arange(1, s.size + 1) / s.size, s / s[0], color=f"C{i}", lw=1.0, alpha=0.7,
                        label=MATRIX_TYPE_LABELS[t] if j == 0 else None)
        for m in report.select(t):
            if m.rank > 0:
                a2.semilogy(report.grid, np.exp(m.log_T - m.log_T0), color=f"C{i}", lw=0.8, alpha=0.5)
    a1.set(xlabel="relative index i / rank", ylabel=r"$\sigma_i/\sigma_1$", title="spectra")
    a1.legend(loc="lower left")
    a2.axhline(1.0, color="k", lw=1.0, ls="--")
    n0 = sum(m.p_star == 0 for m in report.matrices)
    a2.set(xlabel="$p$", ylabel=r"$\mathcal{T}(W;p)/\mathcal{T}(W;0)$",
           title=f"$p^*$ = 0 for {n0} of {len(report.matrices)}")
    return fig
