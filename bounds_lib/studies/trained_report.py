"""Tables and figures of the trained-model chapters (7 and 8) from committed results files.

The chapters read a results file (:func:`bounds_lib.studies.results.load_results`), choose rows, and
call these functions; every number comes from the rows, every ranking carries its bootstrap interval
(:mod:`bounds_lib.studies.stats`). Figures use the book's style (:mod:`bounds_lib.core.style`): at most two panels
per row, a legend for every colour.
"""
from __future__ import annotations

import numpy as np

from . import stats as S
from .results import proxy_value, variant_name
from ..theory.model import SINGLE_HEAD_MATRIX_TYPES
from ..analysis.single_head import single_head_proxies

__all__ = ["PROXIES", "PLAIN", "BOUNDS", "BASELINES", "measure", "clusters", "interval_table", "markdown_table",
           "FOREST_COLOURS", "plot_forest",
           "label_pairs", "pstar_share", "plot_errors", "plot_scaling", "plot_proxy_vs_gap", "plot_pstar_share",
           "plot_p_profile", "arch_count", "train_test_overlap", "CHOICES", "CHOICE_LABEL", "choice",
           "with_variant", "pstar_table", "plot_pstar_vs_strength", "plot_spectra", "corrected_report"]

#: results-file key -> label in figures (LaTeX)
#:
#: :meta hide-value:
PROXIES = {
    "B_ours_sum": r"$B_{\rm ours}$ (sum)",
    "B_ours_rss": r"$B_{\rm ours}$ (rss)",
    "B_edelman": r"$B_{\rm Edelman}$",
    "B_11": r"$(1,1)$ analogue",
    "prod_spectral": r"$\prod\Vert W\Vert_2$",
    "sum_frobenius": r"$\sum\Vert W\Vert_F$",
    "n_params": "# parameters",
    "readout_norm": r"$\Vert w\Vert_2$ (readout)",
}
#: the same in plain text (tables, printed lines)
PLAIN = {"B_ours_sum": "B_ours (sum)", "B_ours_rss": "B_ours (rss)", "B_edelman": "B_Edelman",
         "B_11": "(1,1) analogue", "prod_spectral": "Π‖W‖₂", "sum_frobenius": "Σ‖W‖_F",
         "n_params": "# parameters", "readout_norm": "‖w‖₂ (readout)", "train_error": "training error",
         "steps_taken": "steps taken", "mean_p_star": "mean p*", "corrected_theta": "Θ (corrected, Ch. 5)"}
BOUNDS = ("B_ours_sum", "B_ours_rss", "B_edelman", "B_11")
#: Measures of fit, not of capacity (a proxy that does no better than these has shown nothing about capacity).
BASELINES = ("train_error", "steps_taken")


def measure(rows, name: str) -> np.ndarray:
    """Values of measure ``name`` on ``rows``: a proxy's ``log10``, a baseline, or Chapter 5's ``log10 Θ``.

    Parameters
    ----------
    rows : list of dict
        Results rows (:func:`bounds_lib.studies.results.load_results`).
    name : str
        A proxy (a key of :data:`PROXIES`, or ``"mean_p_star"``; see
        :func:`bounds_lib.studies.results.proxy_value`), a baseline of :data:`BASELINES` (plain values), or
        ``"corrected_theta"`` (``log10 Θ`` of the corrected theorem, :func:`corrected_report`; rows of
        the Chapter 8 study only).

    Returns
    -------
    numpy.ndarray
        One value per row.

    Raises
    ------
    KeyError
        The rows do not store ``name`` (e.g. ``steps_taken`` outside the common-loss runs).

    Examples
    --------
    >>> from bounds_lib.studies.results import load_results
    >>> rows = load_results("trained_grid")["rows"]
    >>> L, N = rows[0]["config"]["L"], rows[0]["config"]["N"]
    >>> bool(10 ** measure(rows[:1], "n_params")[0] == 3 * L * N * N + N)  # log10 of the parameter count
    True
    """
    if name == "corrected_theta":  # log10 Θ of Chapter 5's corrected theorem (study rows only)
        return np.array([corrected_report(r).log_Theta / np.log(10) for r in rows])
    if name in ("train_error", "steps_taken"):
        if any(name not in r for r in rows):
            raise KeyError(f"{name!r} is not stored in these rows (steps_taken: common-loss runs only)")
        return np.array([float(r[name]) for r in rows])
    return np.array([proxy_value(r, name) for r in rows])


def clusters(rows, keys=None) -> list:
    """The configuration of every row without its seed (the bootstrap's clusters).

    ``keys`` (optional) keeps only those config keys. The result is the ``clusters`` argument of
    :func:`bounds_lib.studies.stats.bootstrap_weights`: models that differ only in the seed share a cluster.

    >>> clusters([{"config": {"L": 1, "seed": 0}}, {"config": {"L": 1, "seed": 1}}])
    [(('L', 1),), (('L', 1),)]
    """
    return [tuple(sorted((k, v) for k, v in r["config"].items() if k != "seed"
                         and (keys is None or k in keys))) for r in rows]


def interval_table(rows, names, W, hypers=S.HYPERPARAMETERS, fixed=(), target="gap_error") -> dict:
    """Kendall's τ, every ``ψ_h`` and ``Ψ`` with bootstrap intervals, for every measure (Chapters 7–8).

    Parameters
    ----------
    rows : list of dict
        Results rows.
    names : sequence of str
        Measures (:func:`measure`).
    W : numpy.ndarray
        Bootstrap weights of ``rows`` (:func:`bounds_lib.studies.stats.bootstrap_weights`).
    hypers : tuple of str
        Hyperparameters of the granulated ψ (:data:`bounds_lib.studies.stats.HYPERPARAMETERS`); ``()`` gives
        only the overall τ.
    fixed : tuple of str
        Config keys held fixed within every group (e.g. ``("seed",)``).
    target : str
        The row key ranked against (the 0-1 error gap).

    Returns
    -------
    dict
        ``{name: {"overall": Interval, h: Interval…, "Psi": Interval, "wrong_h": (share, groups)…}}``;
        ``wrong_h`` is the share of the groups along ``h`` where the measure ranks the gap backwards
        (:func:`bounds_lib.studies.stats.wrong_sign_share`).

    Raises
    ------
    KeyError
        A row lacks a measure or a config key.

    Examples
    --------
    >>> from bounds_lib.studies.results import load_results
    >>> from bounds_lib.studies.stats import bootstrap_weights
    >>> real = [r for r in load_results("trained_grid")["rows"] if not r["config"]["random_labels"]]
    >>> tab = interval_table(real, ["B_ours_sum"], bootstrap_weights(clusters(real), n_boot=100))
    >>> sorted(tab["B_ours_sum"])
    ['L', 'N', 'Psi', 'n_train', 'overall', 'wrong_L', 'wrong_N', 'wrong_n_train']
    """
    out = {}
    for k in names:
        m = measure(rows, k)
        t = S.granulated_intervals(rows, m, W, hypers, fixed, target) if hypers else {
            "overall": S.kendall_interval(m, [r[target] for r in rows], W)}
        for h in hypers:
            t[f"wrong_{h}"] = S.wrong_sign_share(rows, m, h, hypers, fixed, target)
        out[k] = t
    return out


def markdown_table(table: dict, cols, labels=None) -> str:
    """A Markdown table of :func:`interval_table`: one row per measure, one column per ``(key, header)``.

    Parameters
    ----------
    table : dict
        ``{measure: {key: value}}``; an :class:`~bounds_lib.studies.stats.Interval` is written as
        ``+0.12 [−0.05, +0.30]``, a ``(share, groups)`` pair of
        :func:`~bounds_lib.studies.stats.wrong_sign_share` as the count it stands for, ``6 of 12``
        (``n/a`` without groups), a number as ``+0.12`` (signs with the true minus,
        :func:`~bounds_lib.studies.stats.format_number`).
    cols : sequence of (str, str)
        The keys to show and their column headers.
    labels : dict, optional
        Row labels of the measures (default :data:`PLAIN`).

    Returns
    -------
    str
        The table (chapters display it with ``IPython.display.Markdown``).

    Examples
    --------
    >>> from bounds_lib.studies.stats import Interval
    >>> print(markdown_table({"B_ours_sum": {"overall": Interval(0.2, -0.1, 0.4, 100), "wrong_N": (0.5, 12)}},
    ...                      [("overall", "τ"), ("wrong_N", "wrong-sign groups, N")]))
    | measure | τ | wrong-sign groups, N |
    |---|---|---|
    | B_ours (sum) | +0.20 [−0.10, +0.40] | 6 of 12 |
    """
    labels = labels or PLAIN
    lines = ["| measure | " + " | ".join(h for _, h in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for k, t in table.items():
        cells = []
        for c, _ in cols:
            v = t[c]
            cells.append(S.format_interval(v) if isinstance(v, S.Interval) else
                         _group_count(*v) if isinstance(v, tuple) else S.format_number(v, plus=True))
        lines.append(f"| {labels.get(k, k)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _group_count(share: float, groups: int) -> str:
    """``"6 of 12"``: the groups a share of :func:`~bounds_lib.studies.stats.wrong_sign_share` counts."""
    if not groups or not np.isfinite(share):
        return "n/a"
    return f"{round(share * groups)} of {groups}"


#: Colours of a forest plot, by the sign of an interval (above 0, below 0, containing 0).
FOREST_COLOURS = {"+": "C0", "-": "C3", "0": "0.55"}


def plot_forest(table: dict, cols, labels=None, title="Kendall τ and ψ with 95 % bootstrap intervals"):
    """Forest plot of :func:`interval_table`: one panel per statistic, one line per measure.

    Each measure is a dot at its point estimate with its bootstrap interval drawn as a line; the
    colour says whether the interval lies above 0, below 0 or contains it (the key is at the top, under
    the title, so that it is on screen with the first panels); a vertical line marks 0. Statistics whose
    value is not an :class:`~bounds_lib.studies.stats.Interval` (wrong-sign shares) are left out; a
    measure whose interval is undefined (NaN) is drawn as "n/a". All panels share the x range [−1, 1]
    of τ and the measures' order; only the left column names them.

    Layout: two panels per row; an odd last panel spans the row (no empty slot). Rows are as tall as
    the measures need (about 0.19 in each at the style's 10.5 pt), so that four statistics of ten
    measures fit one laptop screen.

    Parameters
    ----------
    table : dict
        ``{measure: {key: Interval}}`` (:func:`interval_table`).
    cols : sequence of (str, str)
        The statistics to draw and their panel titles.
    labels : dict, optional
        Measure labels (default :data:`PLAIN`).
    title : str or None
        The figure's title (None: none).

    Examples
    --------
    >>> from bounds_lib.studies.stats import Interval
    >>> tab = {"B_ours_sum": {"overall": Interval(0.2, 0.05, 0.4, 100)},
    ...        "n_params": {"overall": Interval(-0.1, -0.3, 0.1, 100)}}
    >>> fig = plot_forest(tab, [("overall", "τ overall")])
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['B_ours (sum)', '# parameters']
    """
    from matplotlib.lines import Line2D

    labels = labels or PLAIN
    cols = [(c, h) for c, h in cols if all(isinstance(t.get(c), S.Interval) for t in table.values())]
    if not cols:
        raise ValueError("plot_forest: no column of the table holds intervals")
    names = list(table)
    axes = _forest_panels(len(cols), height=0.19 * len(names) + 0.7)
    fig = axes[0].figure
    y = np.arange(len(names))[::-1]
    for ax, (c, head) in zip(axes, cols):
        for yi, k in zip(y, names):
            iv = table[k][c]
            if not np.isfinite(iv.value):
                ax.text(0, yi, "n/a", ha="center", va="center", fontsize=10.5, color="0.4")
                continue
            col = FOREST_COLOURS[iv.sign]
            ax.plot([iv.lo, iv.hi], [yi, yi], color=col, lw=2.2, solid_capstyle="butt")
            ax.plot([iv.value], [yi], "o", color=col, ms=5)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlim(-1, 1)
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_title(head)
        ax.set_yticks(y, [labels.get(k, k) for k in names])
        ax.set_xticks([-1, -0.5, 0, 0.5, 1], ["−1", "−½", "0", "½", "1"])
    key = [Line2D([], [], color=FOREST_COLOURS[s], lw=2.2, marker="o", ms=5, label=lab)
           for s, lab in (("+", "interval above 0"), ("-", "interval below 0"), ("0", "contains 0"))]
    # the title heads the key (a suptitle and a legend above the panels would overlap)
    fig.legend(handles=key, loc="outside upper center", ncol=3, handlelength=1.5, columnspacing=1.0,
               title=title or None, title_fontproperties={"size": "large"})
    return fig


def _forest_panels(n: int, height: float) -> list:
    """``n`` panels sharing the y axis, two per row; an odd last one spans its row (no empty slot)."""
    from ..core.style import book_subplots

    rows, cols = -(-n // 2), 2 if n > 1 else 1
    fig, grid = book_subplots(rows, cols, height=height, sharey=True, squeeze=False)
    axes = list(grid.ravel())
    if n % 2 and n > 1:  # the last row: one panel across both columns
        spec = grid[-1, 0].get_subplotspec().get_gridspec()
        for ax in grid[-1]:
            ax.remove()
        axes = axes[:-2] + [fig.add_subplot(spec[-1, :], sharey=axes[0])]
    for ax in axes:  # sharey hides inner labels on a grid; keep them to the left column
        ax.tick_params(axis="y", labelleft=ax.get_subplotspec().is_first_col())
    return axes


def label_pairs(rows, same=("L", "N", "n_train", "seed")) -> list:
    """``(real-label row, random-label row)`` pairs that agree on ``same`` (both in ``rows``)."""
    real = {tuple(r["config"][k] for k in same): r for r in rows if not r["config"]["random_labels"]}
    return [(real[key], r) for r in rows if r["config"]["random_labels"]
            and (key := tuple(r["config"][k] for k in same)) in real]


def pair_changes(pairs, names=None) -> dict:
    """``{proxy: array}``: per pair of :func:`label_pairs`, ``log10`` of the proxy of the random-label
    network minus that of its real-label twin (:func:`bounds_lib.studies.results.proxy_value`).

    ``names`` defaults to every proxy of :data:`PROXIES`. A positive entry: the proxy grew when the
    labels were made random.
    """
    names = tuple(PROXIES) if names is None else tuple(names)
    return {k: np.array([proxy_value(rand, k) - proxy_value(real, k) for real, rand in pairs], dtype=float)
            for k in names}


def pstar_share(rows) -> float:
    """The share of all matrices of ``rows`` with ``p* > 0`` (Chapter 7: where the spectrum helps).

    >>> pstar_share([{"proxies": {"p_star": {"QK": [0.0, 1.0], "V": [0.0, 0.0], "M": [2.0, 0.0]}}}])
    0.3333333333333333
    """
    ps = [p for r in rows for a in SINGLE_HEAD_MATRIX_TYPES for p in r["proxies"]["p_star"][a]]
    return float(np.mean(np.array(ps) > 0))


def arch_count(row) -> float:
    """``log10(3LN + √L)``: ``B_ours`` (sum) of a model whose matrices are full rank with ``p* = 0``."""
    L, N = row["config"]["L"], row["config"]["N"]
    return float(np.log10(3 * L * N + np.sqrt(L)))


def _panels(n, height=2.6, **kw):
    from ..core.style import book_subplots

    fig, axes = book_subplots(-(-n // 2), 2 if n > 1 else 1, height=height, **kw)
    axes = np.atleast_1d(axes).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes


def plot_errors(real, rand, depths, ns, rand_ns):
    """Train (dashed) and test (solid) 0-1 error against width, one panel per (labels, n), colour = depth."""
    panels = [(f"real labels, n = {n}", [r for r in real if r["config"]["n_train"] == n]) for n in ns]
    panels += [(f"random labels, n = {n}", [r for r in rand if r["config"]["n_train"] == n]) for n in rand_ns]
    fig, axes = _panels(len(panels), sharey=True)
    for ax, (title, grp) in zip(axes, panels):
        for i, L in enumerate(depths):
            g = sorted([r for r in grp if r["config"]["L"] == L], key=lambda r: r["config"]["N"])
            x = [r["config"]["N"] for r in g]
            ax.plot(x, [r["train_error"] for r in g], "o--", color=f"C{i}", ms=4)
            ax.plot(x, [r["test_error"] for r in g], "s-", color=f"C{i}", ms=4, label=f"L = {L}")
        ax.set_xscale("log", base=2)
        ax.set_title(title)
        ax.set_xlabel("width N")
    axes[0].set_ylabel("0-1 error")
    handles, labels = axes[0].get_legend_handles_labels()
    if len(panels) % 2:  # the empty slot of the last row holds the key
        axes[len(panels)].set_visible(True)
        axes[len(panels)].axis("off")
        axes[len(panels)].legend(handles, labels, title="solid: test\ndashed: train", loc="center")
    else:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(depths), title="solid: test, dashed: train")
    return fig


def plot_scaling(rows, depths, widths, L_fix, N_fix, n, names=tuple(PROXIES)):
    """Each proxy over its value at the smallest width (left) or depth (right) — the paper's Section 6 plot."""
    from ..core.style import book_subplots

    at = {(r["config"]["L"], r["config"]["N"]): r for r in rows if r["config"]["n_train"] == n}
    fig, (a1, a2) = book_subplots(1, 2, height=3.4)
    for i, k in enumerate(names):
        y = np.array([proxy_value(at[(L_fix, N)], k) for N in widths])
        style = "o-" if i < 7 else "s--"  # the colour cycle has seven colours
        a1.plot(widths, 10 ** (y - y[0]), style, color=f"C{i % 7}", label=PLAIN[k])
        y = np.array([proxy_value(at[(L, N_fix)], k) for L in depths])
        a2.plot(depths, 10 ** (y - y[0]), style, color=f"C{i % 7}")
    a1.set(xscale="log", yscale="log", xlabel="width N", ylabel="relative to smallest", title=f"L = {L_fix}")
    a2.set(xscale="log", yscale="log", xlabel="depth L", title=f"N = {N_fix}")
    for ax, ticks in ((a1, widths), (a2, depths)):
        ax.minorticks_off()
        ax.set_xticks(ticks, [str(t) for t in ticks])
    fig.legend(loc="outside lower center", ncol=3)
    return fig


def plot_proxy_vs_gap(groups: dict, names, table=None, target="gap_error", markers=None):
    """One panel per measure: its value against the gap; ``groups`` maps a legend label to rows.

    With ``table`` (from :func:`interval_table`) each panel's title gives τ and its interval.
    """
    fig, axes = _panels(len(names), height=2.5)
    markers = markers or {}
    for ax, k in zip(axes, names):
        for i, (lab, rs) in enumerate(groups.items()):
            mk = markers.get(lab, "o")
            ax.scatter(measure(rs, k), [r[target] for r in rs], s=14, marker=mk,
                       color="k" if mk == "x" else f"C{i}", label=lab)
        unit = "" if k in (*BASELINES, "mean_p_star") else "log10 "
        ax.set_xlabel(f"{unit}{PLAIN[k]}")
        if table is not None:
            ax.set_title(f"τ = {S.format_interval(table[k]['overall'])}")
    for ax in axes[::2]:
        ax.set_ylabel("gap")
    # at most two legend columns: three long labels side by side are wider than a phone's figure
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=min(2, len(groups)))
    return fig


def plot_pstar_share(rows, depths, widths):
    """Share of matrices with ``p* > 0`` by depth (rows) and width (columns), one panel per matrix type."""
    fig, axes = _panels(len(SINGLE_HEAD_MATRIX_TYPES), height=2.7)
    for ax, a in zip(axes, SINGLE_HEAD_MATRIX_TYPES):
        frac = np.array([[np.mean(np.array([p for r in rows if (r["config"]["L"], r["config"]["N"]) == (L, N)
                                            for p in r["proxies"]["p_star"][a]]) > 0) for N in widths]
                         for L in depths])
        ax.imshow(frac, vmin=0, vmax=1, cmap="viridis", origin="lower")
        ax.set_xticks(range(len(widths)), [str(w) for w in widths])
        ax.set_yticks(range(len(depths)), [str(d) for d in depths])
        ax.set(title=f"$W^{{{a}}}$", xlabel="width N", ylabel="depth L")
        for i in range(len(depths)):
            for j in range(len(widths)):
                ax.text(j, i, f"{frac[i, j]:.2f}", ha="center", va="center", color="w" if frac[i, j] < 0.5 else "k")
    return fig


def plot_p_profile(model):
    """``T(W; p) / T(W; 0)`` on the post hoc grid for every matrix of a single-head model."""
    from ..theory.norms import singular_values
    from ..theory.peeling import posthoc_choice, posthoc_grid
    from ..theory.propagation import log_gamma, log_scale_K
    from ..core.style import book_subplots

    P = single_head_proxies(model)
    grid = posthoc_grid(model.L, model.N)
    C = P["spectral_norms"]
    lg = log_gamma(C["M"], C["V"], C["QK"])
    la = np.log(10) * np.array(P["log10_alpha"])
    fig, ax = book_subplots(1, 1, height=3.4)
    for i, a in enumerate(SINGLE_HEAD_MATRIX_TYPES):
        for l, b in enumerate(model.blocks):
            lK = float(np.atleast_1d(log_scale_K(np.atleast_1d(lg[a]), la, model.L))[l])
            ch = posthoc_choice(singular_values(getattr(b, f"W_{a}")), lK, model.N, grid)
            ax.plot(grid, np.exp(ch.log_T - ch.log_T[0]), "o-" if l == 0 else "s--", ms=3, color=f"C{i}",
                    label=f"$W^{{{a}}}$, layer {l}: $p^*$ = {ch.p_star:.2f}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="$p$", ylabel=r"$\mathcal{T}(W;p)/\mathcal{T}(W;0)$", yscale="log")
    ax.legend()
    return fig


def train_test_overlap(row) -> float:
    """Share of a row's test inputs whose bit string is also a training input (0 for ``disjoint_test`` rows).

    (Named ``train_test_overlap``, not ``test_…``, so that pytest never collects it as a test.)
    """
    from .tasks import sample_bits
    from .training import TEST_STREAM, TRAIN_STREAM, TrainConfig

    cfg = TrainConfig(**row["config"])
    seen = {b.tobytes() for b in sample_bits(cfg.task(), cfg.n_train, TRAIN_STREAM)}
    if cfg.disjoint_test:
        return 0.0
    test = sample_bits(cfg.task(), cfg.n_test, TEST_STREAM)
    return float(np.mean([b.tobytes() in seen for b in test]))


# ----------------------------------------------------------------------------- Chapter 8: the spectrum study

#: the families of training choices of the study, in the order the chapter shows them
CHOICES = ("plain", "weight_decay", "nuclear", "rank")
CHOICE_LABEL = {"plain": "plain (control)", "weight_decay": "weight decay", "nuclear": "nuclear-norm penalty",
                "rank": "rank-r factorisation"}


def choice(row) -> str:
    """The family of a study row's training choice (``plain``, ``weight_decay``, ``nuclear``, ``rank``)."""
    return variant_name(row["config"]).split("=")[0]


def with_variant(rows) -> list:
    """Rows whose config also holds ``variant`` (the training choice and strength), for grouping."""
    return [{**r, "config": {**r["config"], "variant": variant_name(r["config"])}} for r in rows]


def pstar_table(rows) -> list:
    """``[(variant, n_matrices, share with p* > 0, mean train error, mean B_ours / (3LN+√L))]`` per variant."""
    out = []
    for v in dict.fromkeys(variant_name(r["config"]) for r in rows):
        rs = [r for r in rows if variant_name(r["config"]) == v]
        n_mat = sum(len(r["proxies"]["p_star"][a]) for r in rs for a in SINGLE_HEAD_MATRIX_TYPES)
        ratio = np.mean([10 ** (r["proxies"]["B_ours_sum"] - arch_count(r)) for r in rs])
        out.append((v, n_mat, pstar_share(rs), float(np.mean([r["train_error"] for r in rs])), float(ratio)))
    return out


def plot_pstar_vs_strength(rows):
    """Share of matrices with ``p* > 0`` (left) and ``B_ours`` over the architecture count (right)
    against the strength of weight decay and of the nuclear-norm penalty, one line per task and family.
    """
    from ..core.style import book_subplots

    fig, (a1, a2) = book_subplots(1, 2, height=3.2)
    plain = [r for r in rows if choice(r) == "plain"]
    for j, fam in enumerate(("weight_decay", "nuclear")):
        for i, task_kind in enumerate(dict.fromkeys(r["config"]["kind"] for r in rows)):
            rs = [r for r in rows if choice(r) == fam and r["config"]["kind"] == task_kind]
            lam = sorted({r["config"][fam] for r in rs})
            base = [r for r in plain if r["config"]["kind"] == task_kind]
            share = [pstar_share(base)] + [pstar_share([r for r in rs if r["config"][fam] == x]) for x in lam]
            ratio = [np.mean([10 ** (r["proxies"]["B_ours_sum"] - arch_count(r)) for r in base])]
            ratio += [np.mean([10 ** (r["proxies"]["B_ours_sum"] - arch_count(r)) for r in rs if r["config"][fam] == x])
                      for x in lam]
            x = [lam[0] / 10] + lam  # the control drawn one decade below the weakest strength
            style = dict(color=f"C{j}", ls="-" if i == 0 else "--", marker="o" if i == 0 else "s")
            a1.plot(x, share, label=f"{CHOICE_LABEL[fam]}, {task_kind}", **style)
            a2.plot(x, ratio, **style)
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xlabel("strength (leftmost point: plain)")
    a1.set(ylabel="share of matrices with p* > 0", ylim=(-0.05, 1.05))
    a2.set(ylabel="B_ours / (3LN + √L)", ylim=(0, 1.05))
    # one column: two of these labels side by side are wider than the figure
    fig.legend(loc="outside lower center", ncol=1)
    return fig


def plot_spectra(rows, variants, layer=1, matrix_type="M"):
    """Singular values of one matrix type (sorted, over ``σ₁`` of the plain model) at initialisation
    (dashed) and after training (solid), mean over the given rows, one colour per variant."""
    from ..core.style import book_subplots

    fig, ax = book_subplots(1, 1, height=3.4)
    for i, v in enumerate(variants):
        rs = [r for r in rows if variant_name(r["config"]) == v]
        after = np.mean([r["singular_values"][matrix_type][layer] for r in rs], axis=0)
        before = np.mean([r["init_singular_values"][matrix_type][layer] for r in rs], axis=0)
        k = np.arange(1, after.size + 1)
        ax.plot(k, after, "o-", color=f"C{i}", ms=3, label=v)
        ax.plot(k, before, ":", color=f"C{i}")
    ax.set(yscale="log", xlabel="index i", ylabel=f"σ_i of W^{matrix_type}, layer {layer}")
    ax.set_ylim(bottom=1e-4)  # clip numerical zeros of the factorised models (≈1e-16) off the axis
    ax.legend(title="solid: trained, dotted: initial", loc="upper right", ncol=2)
    return fig


def corrected_report(row):
    """Chapter 5's corrected theorem (:func:`bounds_lib.analysis.corrected.corrected_bound`) on a Chapter 8 row's stored
    spectra.

    The single-head model is read as the one-head BERT-layout checkpoint :func:`bounds_lib.studies.results.save_model`
    writes: ``QK = W_QK``, ``Ṽ = W_V``, ``M_in = I``, ``M_out = W_M``. The theorem then also counts the fixed
    identity ``M_in`` of every block as a matrix, so the value bounds the same network, a little more loosely
    than a single-head statement would. ``n`` is the training-set size, ``T`` the number of tokens (bits + [CLS]),
    the readout radius the trained ``‖w‖₂``. Needs the row's ``singular_values`` (rows of the study only).
    """
    import math

    from ..checkpoints import ArchitectureSpec
    from ..analysis.kernel import MatrixSpectrum
    from ..analysis.spectra import ModelSpectra
    from ..analysis.corrected import corrected_bound

    if "singular_values" not in row:
        raise KeyError("this row stores no spectra (only the rows of the Chapter 8 study do)")
    c, sv = row["config"], row["singular_values"]
    L, N = c["L"], c["N"]
    arch = ArchitectureSpec(family="bert", model_type="bert", n_layers=L, hidden=N, n_heads=1, n_kv_heads=1,
                            head_dim=N, d_ff=N, activation=c.get("act", "gelu"), prefix="")
    mats = []
    for l in range(L):  # norms are not stored; the theorem reads only the spectra
        mats += [MatrixSpectrum(l, 0, "QK", (N, N), np.array(sv["QK"][l]), math.nan, math.nan),
                 MatrixSpectrum(l, 0, "V", (N, N), np.array(sv["V"][l]), math.nan, math.nan),
                 MatrixSpectrum(l, -1, "M_in", (N, N), np.ones(N), math.nan, math.nan),
                 MatrixSpectrum(l, -1, "M_out", (N, N), np.array(sv["M"][l]), math.nan, math.nan)]
    spectra = ModelSpectra(arch=arch, mode="paper", dtype="float64", matrices=tuple(mats))
    return corrected_bound(spectra, n=c["n_train"], T=c["T"] + 1, readout_norm=row["proxies"]["readout_norm"])
