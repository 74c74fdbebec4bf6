"""Analysis, tables and figures of Chapter 6 (the proxies on real BERT weights).

Chapter 6 calls one function per step and shows its result; the loops live here, tested in
``tests/test_report.py``. Everything works on the results of :mod:`bounds_lib.proxies`
(:class:`~bounds_lib.proxies.ModelSpectra`, :class:`~bounds_lib.proxies.BoundReport`).

* :func:`check_head_logits` — our extracted ``QK_h`` against the logits ``transformers`` computes.
* :func:`compare_modes` — clean (QR-core) against paper (explicit product) spectra.
* :func:`break_even_shifts` — by how many decades each matrix's scale ``K`` must shrink before
  ``p* > 0`` (closed form of Exercise 6.2).
* :func:`architecture_B_ours` — ``B_ours`` when every ``p* = 0`` at full numerical rank.
* :func:`compare_settings` / :func:`settings_table` — the proxies under several scoring options, as a
  Markdown table (rendered by the book and by Jupyter).
* ``figure_*`` — the page's figures in the book style (:mod:`bounds_lib.style`): at most two panels
  per row and a colour key for every colour (a colour bar for layers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .proxies import KINDS, BoundReport, ModelSpectra, score

__all__ = [
    "KIND_LABELS",
    "LogitCheck",
    "ModeComparison",
    "ProxyRow",
    "check_head_logits",
    "compare_modes",
    "architecture_table",
    "median_stable_ranks",
    "norm_ratio_medians",
    "log10_K_break_even",
    "break_even_shifts",
    "architecture_B_ours",
    "compare_settings",
    "settings_table",
    "family_table",
    "markdown_table",
    "figure_spectral_decay",
    "figure_T_ratio",
    "figure_norms",
    "figure_p_star_histogram",
    "figure_prefix_depth",
    "figure_scaling",
]

KIND_LABELS = {"QK": r"$QK_h$", "V": r"$\tilde V_h$", "M_in": r"$M_{\rm in}$", "M_out": r"$M_{\rm out}$"}


def _check_spectra(spectra, name="spectra"):
    if not isinstance(spectra, ModelSpectra):
        raise TypeError(f"{name} must be a bounds_lib.proxies.ModelSpectra (from compute_spectra), "
                        f"got {type(spectra).__name__}")


def _check_report(report, name="report"):
    if not isinstance(report, BoundReport):
        raise TypeError(f"{name} must be a bounds_lib.proxies.BoundReport (from score), got {type(report).__name__}")


# --------------------------------------------------------------------------------------------
# Checks and summaries
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogitCheck:
    """``checked`` heads compared; ``worst`` relative max-abs difference of the logit matrices."""

    checked: int
    worst: float

    def _repr_markdown_(self) -> str:
        return markdown_table(["heads compared", "worst relative logit difference"],
                              [(self.checked, self.worst)], ["d", ".1e"], align="rr")


def check_head_logits(path, *, n_tokens: int = 7, seed: int = 0) -> LogitCheck:
    """Compare every head's ``X QK_h Xᵀ`` (our extraction) with the logits of ``transformers``.

    Loads the BERT checkpoint at ``path`` with ``transformers.BertModel`` in float64, pushes
    ``n_tokens`` random rows through each layer's own query and key modules (biases removed) and
    returns the worst relative difference ``max|ours − direct| / max|direct|`` over all heads.
    """
    import torch
    import transformers

    from .checkpoints import detect_architecture, iter_layers, open_checkpoint

    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens must be a positive int, got {n_tokens!r}")
    arch = detect_architecture(open_checkpoint(path))
    H, d_h = arch.n_heads, arch.head_dim
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # a tqdm widget would embed CDN scripts in the page
    bert = transformers.BertModel.from_pretrained(path).double().eval()
    X = np.random.default_rng(seed).standard_normal((n_tokens, arch.hidden))
    Xt = torch.from_numpy(X)
    worst, checked = 0.0, 0
    with torch.no_grad():
        for lw in iter_layers(open_checkpoint(path), arch):
            att = bert.encoder.layer[lw.layer].attention.self
            q = (att.query(Xt) - att.query.bias).reshape(n_tokens, H, d_h)
            k = (att.key(Xt) - att.key.bias).reshape(n_tokens, H, d_h)
            for h in range(H):
                direct = (q[:, h] @ k[:, h].T).numpy()
                ours = X @ lw.QK(h) @ X.T
                worst = max(worst, float(np.max(np.abs(ours - direct)) / np.max(np.abs(direct))))
                checked += 1
    return LogitCheck(checked, worst)


@dataclass(frozen=True)
class ModeComparison:
    """Clean against paper spectra at the grid point ``p``.

    ``top_err``: worst ``|σ_i^clean − σ_i^paper| / σ_1`` over the non-zero values; ``zero_median``:
    median of the paper mode's numerical zeros of the head products; ``zero_pow``: that zero to the
    power ``p``; ``inflation_median``: median over head products of ``S_p^paper / S_p^clean``;
    ``zeros_per_head``: numerical zeros per head product (``N − d_h``).
    """

    p: float
    top_err: float
    zero_median: float
    zero_pow: float
    inflation_median: float
    zeros_per_head: int

    def _repr_markdown_(self) -> str:
        rows = [(r"largest $\lvert\sigma_i^{\rm clean}-\sigma_i^{\rm paper}\rvert/\sigma_1$", f"{self.top_err:.1e}"),
                ("numerical zeros per head product (paper mode)", f"{self.zeros_per_head}"),
                ("their median size", f"{self.zero_median:.1e}"),
                (f"median zero to the power $p={self.p:.3g}$", f"{self.zero_pow:.3f}"),
                (r"median $S_p^{\rm paper}/S_p^{\rm clean}$ over head products", f"{self.inflation_median:.3f}")]
        return markdown_table(["clean against paper spectra", "value"], rows, align="lr")


def compare_modes(clean: ModelSpectra, paper: ModelSpectra, p: float) -> ModeComparison:
    """Compare the clean and paper spectra of one model (same matrices, same order)."""
    _check_spectra(clean, "clean")
    _check_spectra(paper, "paper")
    if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 2):
        raise ValueError(f"p must be a number in (0, 2], got {p!r}")
    if len(clean.matrices) != len(paper.matrices):
        raise ValueError(f"clean has {len(clean.matrices)} matrices and paper {len(paper.matrices)}: "
                         "compare spectra of the same model")
    top_err, zeros, infl, per_head = 0.0, [], [], set()
    for c, q in zip(clean.matrices, paper.matrices):
        if (c.layer, c.head, c.kind) != (q.layer, q.head, q.kind):
            raise ValueError(f"matrix order differs: {c.label} vs {q.label}")
        r = c.rank
        top_err = max(top_err, float(np.max(np.abs(c.sigma[:r] - q.sigma[:r]) / q.sigma[0])))
        if c.head >= 0:
            z = q.sigma[r:]
            zeros.append(z)
            per_head.add(z.size)
            infl.append(np.sum(q.sigma ** p) / np.sum(c.sigma[c.sigma > 0] ** p))
    zeros = np.concatenate(zeros) if zeros else np.zeros(0)
    zmed = float(np.median(zeros)) if zeros.size else 0.0
    return ModeComparison(p=float(p), top_err=top_err, zero_median=zmed, zero_pow=float(zmed ** p),
                          inflation_median=float(np.median(infl)) if infl else 1.0,
                          zeros_per_head=max(per_head) if per_head else 0)


def architecture_table(arch) -> str:
    """The sizes of a checkpoint's architecture (:class:`~bounds_lib.checkpoints.ArchitectureSpec`) as a table."""
    try:
        row = (arch.family, arch.n_layers, arch.hidden, arch.n_heads, arch.head_dim, arch.d_ff)
    except AttributeError as exc:
        raise TypeError(f"arch must be an ArchitectureSpec (from detect_architecture), got {type(arch).__name__}") from exc
    return markdown_table(["family", "layers $L$", "hidden $N$", "heads $H$", "head dim $d_h$", "FFN width $d_{ff}$"],
                          [row], ["", "d", "d", "d", "d", "d"])


def median_stable_ranks(spectra: ModelSpectra) -> dict:
    """Median stable rank ``‖W‖_F² / ‖W‖_2²`` per matrix type."""
    _check_spectra(spectra)
    return {k: float(np.median([m.stable_rank for m in spectra.select(k)])) for k in KINDS}


def norm_ratio_medians(report: BoundReport) -> tuple[float, float]:
    """Medians over all matrices of ``‖W‖_{2,1}/‖W‖_2`` and ``‖W‖_{1,1}/‖W‖_{2,1}``."""
    _check_report(report)
    r21 = float(np.median([m.norm_21 / m.sigma1 for m in report.matrices]))
    r11 = float(np.median([m.norm_11 / m.norm_21 for m in report.matrices]))
    return r21, r11


def log10_K_break_even(rank: int, sigma: np.ndarray, grid: np.ndarray, N: int) -> float:
    """Largest ``log10 K`` at which some ``p > 0`` of ``grid`` gives ``T(W;p) < T(W;0)``.

    From ``log T(W;p) − log T(W;0) = [log S_p + p log K + (p+1) log N]/(p+2) − ½ log(rank·N)``
    (Chapter 6, Exercise 6.2): ``p`` wins iff
    ``log K < [(p+2)/2 · log(rank·N) − log S_p − (p+1) log N] / p``.
    """
    grid = np.asarray(grid, dtype=float)
    g = grid[grid > 0]
    s = np.asarray(sigma, dtype=float)
    s = s[s > 0]
    if g.size == 0 or s.size == 0:
        raise ValueError("need a grid with a positive point and a matrix with a positive singular value")
    log_S = np.log([np.sum(s ** p) for p in g])
    lk = ((g + 2) / 2 * np.log(rank * N) - log_S - (g + 1) * np.log(N)) / g
    return float(np.max(lk)) / math.log(10)


def break_even_shifts(report: BoundReport, spectra: ModelSpectra) -> np.ndarray:
    """Per matrix, ``log10 K − log10 K_0``: how many decades ``K`` must shrink before ``p* > 0``.

    Positive means ``p* = 0`` (as :func:`~bounds_lib.peeling.posthoc_choice` finds it), one entry per
    matrix in the report's order.
    """
    _check_report(report)
    _check_spectra(spectra)
    if len(report.matrices) != len(spectra.matrices):
        raise ValueError("report and spectra hold different numbers of matrices (score the same spectra)")
    N = report.N
    return np.array([m.log_K / math.log(10) - log10_K_break_even(m.rank, c.sigma, report.grid, N)
                     for m, c in zip(report.matrices, spectra.matrices)])


def architecture_B_ours(L: int, N: int, H: int, d_h: int) -> float:
    """``B_ours = L(2H√(d_h N) + 2N) + √L``: its value when every ``p* = 0`` at full numerical rank."""
    for name, v in (("L", L), ("N", N), ("H", H), ("d_h", d_h)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    return L * (2 * H * math.sqrt(d_h * N) + 2 * N) + math.sqrt(L)


# --------------------------------------------------------------------------------------------
# Tables (Markdown: the book renders them as tables, and so does Jupyter)
# --------------------------------------------------------------------------------------------
def markdown_table(headers: Sequence[str], rows: Iterable[Sequence], formats: Sequence[str] | None = None,
                   align: str | None = None) -> str:
    """A Markdown (GFM/MyST) table. ``formats[j]`` is a format spec for column ``j`` ("" = str)."""
    headers = list(headers)
    rows = [list(r) for r in rows]
    formats = list(formats) if formats is not None else [""] * len(headers)
    if len(formats) != len(headers):
        raise ValueError(f"{len(formats)} formats for {len(headers)} columns")
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i} has {len(r)} cells, the table has {len(headers)} columns")
    align = align or "".join("r" if f else "l" for f in formats)
    if len(align) != len(headers) or set(align) - {"l", "r", "c"}:
        raise ValueError(f"align must be one of l/r/c per column, got {align!r}")
    rule = {"l": ":--", "r": "--:", "c": ":-:"}

    def cell(v, f):
        text = format(v, f) if f else str(v)
        return text.replace("|", r"\|")

    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(rule[a] for a in align) + " |"]
    lines += ["| " + " | ".join(cell(v, f) for v, f in zip(r, formats)) + " |" for r in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class ProxyRow:
    """The model-level proxies (log10) under one scoring setting."""

    mode: str
    logit_scale: float | str
    gamma_L_phi: bool
    log10_B_ours: float
    log10_B_ours_rss: float
    log10_B_edelman: float
    log10_B_edelman_11: float
    pct_p_star_zero: float


def compare_settings(spectra_by_mode: dict, settings: Sequence[tuple]) -> list[ProxyRow]:
    """Score ``spectra_by_mode[mode]`` under each ``(mode, logit_scale, gamma_L_phi)`` setting."""
    rows = []
    for setting in settings:
        if len(setting) != 3:
            raise ValueError(f"a setting is (mode, logit_scale, gamma_L_phi), got {setting!r}")
        mode, s, gl = setting
        if mode not in spectra_by_mode:
            raise ValueError(f"no spectra for mode {mode!r}; have {sorted(spectra_by_mode)}")
        sm = score(spectra_by_mode[mode], logit_scale=s, gamma_L_phi=gl).summary()
        rows.append(ProxyRow(mode, s, bool(gl), sm["B_ours_sum"]["log10"], sm["B_ours_rss"]["log10"],
                             sm["B_edelman"]["log10"], sm["B_edelman_11_extension"]["log10"],
                             100 * sm["fraction_p_star_zero"]))
    return rows


def _scale_tex(s) -> str:
    if s == "inv_sqrt_dh":
        return r"$1/\sqrt{d_h}$"
    return f"${float(s):g}$"


def settings_table(rows: Sequence[ProxyRow]) -> str:
    """:func:`compare_settings` rows as a Markdown table with LaTeX headers.

    Columns: scoring mode, logit scale ``s``, γ as released or with ``L_φ`` ("+L_φ"), log10 of
    ``B_ours`` (sum) and of its root-sum-square form ("rss"), log10 of ``B_Edelman`` and of its
    (1,1)-norm analogue, and the share of matrices with ``p* = 0``.
    """
    headers = ["mode", "$s$", r"$\gamma$", r"$\log_{10}B_{\rm ours}$", "rss",
               r"$\log_{10}B_{\rm Edelman}$", "$(1,1)$", r"$p^\ast=0$"]
    body = [(r.mode, _scale_tex(r.logit_scale), r"$+L_\varphi$" if r.gamma_L_phi else "released",
             r.log10_B_ours, r.log10_B_ours_rss, r.log10_B_edelman, r.log10_B_edelman_11,
             f"{r.pct_p_star_zero:.0f}%") for r in rows]
    return markdown_table(headers, body, ["", "", "", ".2f", ".2f", ".2f", ".2f", ""], align="lllrrrrr")


def family_table(reports: dict) -> str:
    """Markdown table of the proxies of a family of checkpoints (``{model id: BoundReport}``), by (L, N)."""
    items = sorted(reports.items(), key=lambda kv: (kv[1].L, kv[1].N))
    body = [(f"`{rid}`", r.L, r.N, r.log_B_ours_sum / math.log(10), r.log_B_edelman / math.log(10),
             f"{100 * np.mean(r.p_stars == 0):.0f} %") for rid, r in items]
    return markdown_table(["checkpoint", "$L$", "$N$", r"$\log_{10}B_{\rm ours}$", r"$\log_{10}B_{\rm Edelman}$",
                           r"$p^\ast=0$"], body, ["", "d", "d", ".3f", ".3f", ""], align="lrrrrr")


# --------------------------------------------------------------------------------------------
# Figures (book style: call bounds_lib.style.use_book_style() first in a notebook)
# --------------------------------------------------------------------------------------------
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


def figure_spectral_decay(spectra: ModelSpectra, layers=(0, 1, 2, 3)):
    """``σ_i/σ_1`` against ``i`` for each matrix type (2×2 panels), colour = layer (colour bar)."""
    from .style import book_subplots

    _check_spectra(spectra)
    layers = [l for l in layers if 0 <= l < spectra.L]
    if not layers:
        raise ValueError(f"no layer of {list(layers)} exists in a model with L = {spectra.L}")
    fig, axes = book_subplots(2, 2, height=2.6, sharey=True)
    colour = _layer_colorbar(fig, axes, layers)
    for ax, kind in zip(axes.flat, KINDS):
        for l in layers:
            for m in spectra.select(kind, l):
                s = m.sigma[m.sigma > 0] / m.sigma1
                ax.semilogy(np.arange(1, s.size + 1), s, color=colour(l), lw=1.0, alpha=0.8)
        ax.set_title(KIND_LABELS[kind])
    for ax in axes[1]:
        ax.set_xlabel("index $i$")
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\sigma_i/\sigma_1$")
    return fig


def figure_T_ratio(report: BoundReport):
    """``T(W;p)/T(W;0)`` against ``p`` for every matrix (2×2 panels by type), colour = layer."""
    from .style import book_subplots

    _check_report(report)
    fig, axes = book_subplots(2, 2, height=2.6, sharex=True, sharey=True)
    colour = _layer_colorbar(fig, axes, range(report.L))
    for ax, kind in zip(axes.flat, KINDS):
        for m in report.select(kind):
            ax.semilogy(report.grid, np.exp(m.log_T - m.log_T0), lw=1.0, alpha=0.6, color=colour(m.layer))
        ax.axhline(1.0, color="k", lw=1.0, ls="--", label="ratio 1")
        ax.set_title(KIND_LABELS[kind])
    axes[0, 0].legend(loc="upper left")
    for ax in axes[1]:
        ax.set_xlabel("$p$")
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\mathcal{T}(W;p)/\mathcal{T}(W;0)$")
    return fig


def figure_norms(report: BoundReport):
    """Spectral, (2,1) and (1,1) norms by layer and type, and the two norm ratios (2×2 panels)."""
    from .style import book_subplots

    _check_report(report)
    fig, axes = book_subplots(2, 2, height=2.6, sharex=True)
    panels = [(lambda m: m.sigma1, r"$\|W\|_2$"), (lambda m: m.norm_21, r"$\|W\|_{2,1}$"),
              (lambda m: m.norm_11, r"$\|W\|_{1,1}$")]
    for ax, (value, title) in zip(axes.flat, panels):
        for i, kind in enumerate(KINDS):
            ms = report.select(kind)
            x = np.array([m.layer for m in ms]) + (i - 1.5) * 0.15
            ax.semilogy(x, [value(m) for m in ms], "o", ms=4, alpha=0.7, color=f"C{i}", label=KIND_LABELS[kind])
        ax.set_title(title)
    ax = axes[1, 1]
    for i, kind in enumerate(KINDS):
        ms = report.select(kind)
        x = np.array([m.layer for m in ms]) + (i - 1.5) * 0.15
        ax.plot(x, [m.norm_11 / m.norm_21 for m in ms], "o", ms=4, alpha=0.7, color=f"C{i}")
    ax.set_title(r"$\|W\|_{1,1}/\|W\|_{2,1}$")
    for ax in axes[1]:
        ax.set_xlabel("layer")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(KINDS))
    return fig


def figure_p_star_histogram(report: BoundReport):
    """Histogram of the post hoc ``p*`` over all matrices, stacked by type."""
    from .style import book_subplots

    _check_report(report)
    fig, ax = book_subplots(1, 1, height=3.0)
    step = report.grid[1] if report.grid.size > 1 else 1.0
    edges = np.append(report.grid, report.grid[-1] + step) - step / 2
    data = [[m.p_star for m in report.select(k)] for k in KINDS]
    ax.hist(data, bins=edges, stacked=True, label=[KIND_LABELS[k] for k in KINDS])
    ax.set_xlabel(r"$p^\ast$ on the grid $\mathcal{P}_m$, " + f"$m = {round(1 / step)}$")
    ax.set_ylabel("matrices")
    ax.legend(loc="upper right")
    return fig


def figure_prefix_depth(spectra: ModelSpectra, options=None):
    """``B_ours`` and ``B_Edelman`` of the first-k-layer prefixes, each divided by its value at k = 1.

    These are prefixes of one trained model, **not** models trained at depth k.
    """
    from .style import book_subplots

    _check_spectra(spectra)
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
    """The paper's scaling figures from a family of checkpoints (2×2): each proxy against ``N`` at fixed
    ``L`` (divided by its value at the smallest ``N``) and against ``L`` at fixed ``N``; log y."""
    from .style import book_subplots

    for r in reports:
        _check_report(r, "every report")
    by = {(r.L, r.N): r for r in reports}
    Ls, Ns = sorted({k[0] for k in by}), sorted({k[1] for k in by})
    fig, axes = book_subplots(2, 2, height=3.0)
    for j, (attr, lab) in enumerate((("log_B_ours_sum", r"$B_{\rm ours}$"), ("log_B_edelman", r"$B_{\rm Edelman}$"))):
        for ax, fixed, varied, key, fname, vname in (
                (axes[0, j], Ls, Ns, lambda f, x: (f, x), "L", "$N$"),
                (axes[1, j], Ns, Ls, lambda f, x: (x, f), "N", "$L$")):
            for f in fixed:
                xs = [x for x in varied if key(f, x) in by]
                if len(xs) >= 2:
                    v = np.array([getattr(by[key(f, x)], attr) for x in xs])
                    ax.semilogy(xs, np.exp(v - v[0]), "o-", label=f"${fname} = {f}$")
            ax.set_xlabel(vname)
            ax.set_title(f"{lab} / value at smallest {vname}")
            if ax.lines:
                ax.legend()
    return fig
