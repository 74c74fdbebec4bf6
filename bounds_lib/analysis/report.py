"""Analysis, tables and figures of Chapter 6 (the proxies on real BERT weights).

Chapter 6 calls one function per step and shows its result; the loops live here, tested in
``tests/test_report.py``. Everything works on the results of :mod:`bounds_lib.analysis.spectra` and
:mod:`bounds_lib.analysis.scoring` (:class:`~bounds_lib.analysis.spectra.ModelSpectra`,
:class:`~bounds_lib.analysis.scoring.BoundReport`).

* :func:`check_head_logits` — our extracted ``QK_h`` against the logits ``transformers`` computes.
* :func:`compare_modes` — clean (QR-core) against paper (explicit product) spectra.
* :func:`break_even_shifts` — by how many decades each matrix's scale ``K`` must shrink before
  ``p* > 0`` (closed form of Exercise 6.2).
* :func:`architecture_B_ours` — ``B_ours`` when every ``p* = 0`` at full numerical rank.
* :func:`compare_settings` / :func:`settings_table` — the proxies under several scoring options, as a
  Markdown table (rendered by the book and by Jupyter).

The page's figures live in :mod:`bounds_lib.analysis.plotting`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..theory.model import MULTI_HEAD_MATRIX_TYPES

from .scoring import BoundReport, check_report, score
from .spectra import ModelSpectra, check_spectra
from ..core.validation import check_scalar

__all__ = [
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
]

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

    Parameters
    ----------
    path : str or os.PathLike
        A BERT-family model folder (``transformers.BertModel.from_pretrained`` must read it).
    n_tokens : int
        Random token rows ``X`` (``>= 1``).
    seed : int
        Seed of the random rows.

    Returns
    -------
    LogitCheck
        Heads compared and the worst relative difference (about 1e-15 when the extraction is right).

    Raises
    ------
    TypeError
        ``n_tokens`` is not an integer.
    ValueError
        ``n_tokens < 1``; :class:`~bounds_lib.checkpoints.formats.CheckpointError` when the model cannot be read.
    """
    import torch
    import transformers

    from ..checkpoints import detect_architecture, iter_layers, open_checkpoint

    n_tokens = check_scalar(n_tokens, "n_tokens (random token rows)", int, min_val=1)
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
    """Compare the clean and paper spectra of one model (same matrices, same order; Chapter 6).

    Parameters
    ----------
    clean, paper : ModelSpectra
        :func:`~bounds_lib.analysis.spectra.compute_spectra` of the same model in ``"clean"`` and ``"paper"`` mode.
    p : float
        The grid point in ``(0, 2]`` at which ``S_p`` is compared (the smallest positive one shows the
        numerical zeros most).

    Returns
    -------
    ModeComparison

    Raises
    ------
    TypeError
        A spectra argument is not a :class:`~bounds_lib.analysis.spectra.ModelSpectra`, or ``p`` not a number.
    ValueError
        ``p`` outside ``(0, 2]``, or the two spectra hold different matrices.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> cmp = compare_modes(compute_spectra(sd, config=cfg), compute_spectra(sd, config=cfg, mode="paper"), p=0.2)
    >>> cmp.zeros_per_head, cmp.top_err < 1e-12   # N − d_h = 4 numerical zeros per head product
    (4, True)
    """
    check_spectra(clean, "clean")
    check_spectra(paper, "paper")
    p = check_scalar(p, "p (a grid point in (0, 2])", float, min_val=0, max_val=2, include_boundaries="right")
    if len(clean.matrices) != len(paper.matrices):
        raise ValueError(f"clean has {len(clean.matrices)} matrices and paper {len(paper.matrices)}: "
                         "compare spectra of the same model")
    top_err, zeros, infl, per_head = 0.0, [], [], set()
    for c, q in zip(clean.matrices, paper.matrices):
        if (c.layer, c.head, c.matrix_type) != (q.layer, q.head, q.matrix_type):
            raise ValueError(f"matrix order differs: {c.label()} vs {q.label()}")
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
    """The sizes of a checkpoint's architecture as a Markdown table.

    Parameters
    ----------
    arch : ArchitectureSpec
        From :func:`~bounds_lib.checkpoints.layouts.detect_architecture`.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        ``arch`` is not an :class:`~bounds_lib.checkpoints.layouts.ArchitectureSpec`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import detect_architecture, open_checkpoint, random_bert_state_dict
    >>> sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> print(architecture_table(detect_architecture(open_checkpoint(sd, config=cfg))).splitlines()[-1])
    | bert | 2 | 8 | 2 | 4 | 16 |
    """
    try:
        row = (arch.family, arch.n_layers, arch.hidden, arch.n_heads, arch.head_dim, arch.d_ff)
    except AttributeError as exc:
        raise TypeError(f"arch must be an ArchitectureSpec (from detect_architecture), "
                        f"got {type(arch).__name__}") from exc
    return markdown_table(["family", "layers $L$", "hidden $N$", "heads $H$", "head dim $d_h$", "FFN width $d_{ff}$"],
                          [row], ["", "d", "d", "d", "d", "d"])


def median_stable_ranks(spectra: ModelSpectra) -> dict:
    """Median stable rank ``‖W‖_F² / ‖W‖_2²`` per matrix type.

    Parameters
    ----------
    spectra : ModelSpectra

    Returns
    -------
    dict
        ``{matrix type: median}`` over :data:`~bounds_lib.theory.model.MULTI_HEAD_MATRIX_TYPES`.

    Raises
    ------
    TypeError
        ``spectra`` is not a :class:`~bounds_lib.analysis.spectra.ModelSpectra`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> sr = median_stable_ranks(compute_spectra(sd, config=cfg))
    >>> list(sr), 1 <= sr["QK"] <= 4    # a head product has rank <= d_h = 4
    (['QK', 'V', 'M_in', 'M_out'], True)
    """
    check_spectra(spectra)
    return {t: float(np.median([m.stable_rank for m in spectra.select(t)])) for t in MULTI_HEAD_MATRIX_TYPES}


def norm_ratio_medians(report: BoundReport) -> tuple[float, float]:
    """Medians over all matrices of ``‖W‖_{2,1}/‖W‖_2`` and ``‖W‖_{1,1}/‖W‖_{2,1}``.

    Parameters
    ----------
    report : BoundReport

    Returns
    -------
    (float, float)

    Raises
    ------
    TypeError
        ``report`` is not a :class:`~bounds_lib.analysis.scoring.BoundReport`.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> r21, r11 = norm_ratio_medians(analyze(sd, config=cfg))
    >>> r21 >= 1 and r11 >= 1    # ‖W‖₂ ≤ ‖W‖_{2,1} ≤ ‖W‖_{1,1}
    True
    """
    check_report(report)
    r21 = float(np.median([m.norm_21 / m.sigma1 for m in report.matrices]))
    r11 = float(np.median([m.norm_11 / m.norm_21 for m in report.matrices]))
    return r21, r11


def log10_K_break_even(rank: int, sigma: np.ndarray, grid: np.ndarray, N: int) -> float:
    """Largest ``log10 K`` at which some ``p > 0`` of ``grid`` gives ``T(W;p) < T(W;0)``.

    From ``log T(W;p) − log T(W;0) = [log S_p + p log K + (p+1) log N]/(p+2) − ½ log(rank·N)``
    (Chapter 6, Exercise 6.2): ``p`` wins iff
    ``log K < [(p+2)/2 · log(rank·N) − log S_p − (p+1) log N] / p``.

    Parameters
    ----------
    rank : int
        Numerical rank ``S_0`` of the matrix.
    sigma : array_like
        Its singular values (zeros are ignored).
    grid : array_like
        The post hoc grid (only its positive points matter).
    N : int
        Hidden size.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        No positive grid point or no positive singular value.

    Examples
    --------
    One singular value 1 (rank 1), N = 1, grid {0, 1}: ``T(W;1) = K^{1/3}`` beats ``T(W;0) = 1`` iff ``K < 1``.

    >>> log10_K_break_even(1, [1.0], [0.0, 1.0], 1)
    0.0
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

    Positive means ``p* = 0`` (as :func:`~bounds_lib.theory.peeling.posthoc_choice` finds it), one entry per
    matrix in the report's order.

    Parameters
    ----------
    report : BoundReport
        ``score(spectra)``.
    spectra : ModelSpectra
        The spectra that were scored.

    Returns
    -------
    ndarray

    Raises
    ------
    TypeError
        An argument of the wrong class.
    ValueError
        ``report`` and ``spectra`` hold different numbers of matrices.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import score
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> sp = compute_spectra(sd, config=cfg)
    >>> rep = score(sp)
    >>> bool(((break_even_shifts(rep, sp) > 0) == (rep.p_stars == 0)).all())
    True
    """
    check_report(report)
    check_spectra(spectra)
    if len(report.matrices) != len(spectra.matrices):
        raise ValueError("report and spectra hold different numbers of matrices (score the same spectra)")
    N = report.N
    return np.array([m.log_K / math.log(10) - log10_K_break_even(m.rank, c.sigma, report.grid, N)
                     for m, c in zip(report.matrices, spectra.matrices)])


def architecture_B_ours(L: int, N: int, H: int, d_h: int) -> float:
    """``B_ours = L(2H√(d_h N) + 2N) + √L``: its value when every ``p* = 0`` at full numerical rank.

    Parameters
    ----------
    L, N, H, d_h : int
        Layers, hidden size, heads, head dimension (each ``>= 1``).

    Returns
    -------
    float

    Raises
    ------
    TypeError
        A size is not an integer (``bool`` and ``3.0`` included).
    ValueError
        A size below 1.

    Examples
    --------
    >>> architecture_B_ours(1, 4, 1, 4)   # 1·(2·1·√16 + 8) + 1
    17.0
    """
    L, N, H, d_h = (check_scalar(v, name, int, min_val=1) for v, name in
                    ((L, "L (layers)"), (N, "N (hidden size)"), (H, "H (heads)"), (d_h, "d_h (head dimension)")))
    return L * (2 * H * math.sqrt(d_h * N) + 2 * N) + math.sqrt(L)


# --------------------------------------------------------------------------------------------
# Tables (Markdown: the book renders them as tables, and so does Jupyter)
# --------------------------------------------------------------------------------------------
def markdown_table(headers: Sequence[str], rows: Iterable[Sequence], formats: Sequence[str] | None = None,
                   align: str | None = None) -> str:
    """A Markdown (GFM/MyST) table. ``formats[j]`` is a format spec for column ``j`` ("" = str).

    Parameters
    ----------
    headers : sequence of str
    rows : iterable of sequences
        One cell per header in each row.
    formats : sequence of str, optional
        Format specs per column (default: ``str``).
    align : str, optional
        One of ``l``/``r``/``c`` per column (default: right for formatted columns, else left).

    Returns
    -------
    str

    Raises
    ------
    ValueError
        A row or ``formats`` of the wrong length, or an invalid ``align``.

    Examples
    --------
    >>> print(markdown_table(["x", "y"], [(1, 0.5)], ["d", ".2f"]))
    | x | y |
    | --: | --: |
    | 1 | 0.50 |
    """
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
    log10_B_11: float
    pct_p_star_zero: float

    @property
    def log10_B_edelman_11(self) -> float:
        """Old name of ``log10_B_11`` (read-only alias, kept for existing callers)."""
        return self.log10_B_11


def compare_settings(spectra_by_mode: dict, settings: Sequence[tuple]) -> list[ProxyRow]:
    """Score ``spectra_by_mode[mode]`` under each ``(mode, logit_scale, gamma_L_phi)`` setting.

    Parameters
    ----------
    spectra_by_mode : dict
        ``{"clean": ModelSpectra, "paper": ModelSpectra}`` (either may be missing if unused).
    settings : sequence of tuple
        ``(mode, logit_scale, gamma_L_phi)`` per row (see :class:`~bounds_lib.analysis.scoring.ScoringOptions`).

    Returns
    -------
    list of ProxyRow

    Raises
    ------
    ValueError
        A setting that is not a triple, or names a mode without spectra.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> rows = compare_settings({"clean": compute_spectra(sd, config=cfg)},
    ...                         [("clean", 1.0, False), ("clean", "inv_sqrt_dh", False)])
    >>> rows[1].log10_B_edelman < rows[0].log10_B_edelman   # smaller logits, smaller B_Edelman
    True
    """
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

    Parameters
    ----------
    rows : sequence of ProxyRow
        From :func:`compare_settings`.

    Returns
    -------
    str
    """
    headers = ["mode", "$s$", r"$\gamma$", r"$\log_{10}B_{\rm ours}$", "rss",
               r"$\log_{10}B_{\rm Edelman}$", "$(1,1)$", r"$p^\ast=0$"]
    body = [(r.mode, _scale_tex(r.logit_scale), r"$+L_\varphi$" if r.gamma_L_phi else "released",
             r.log10_B_ours, r.log10_B_ours_rss, r.log10_B_edelman, r.log10_B_11,
             f"{r.pct_p_star_zero:.0f}%") for r in rows]
    return markdown_table(headers, body, ["", "", "", ".2f", ".2f", ".2f", ".2f", ""], align="lllrrrrr")


def family_table(reports: dict) -> str:
    """Markdown table of the proxies of a family of checkpoints (``{model id: BoundReport}``), by (L, N).

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> family_table({"tiny": analyze(sd, config=cfg)}).splitlines()[2].startswith("| `tiny` | 1 | 8 |")
    True
    """
    items = sorted(reports.items(), key=lambda kv: (kv[1].L, kv[1].N))
    body = [(f"`{rid}`", r.L, r.N, r.log_B_ours_sum / math.log(10), r.log_B_edelman / math.log(10),
             f"{100 * np.mean(r.p_stars == 0):.0f} %") for rid, r in items]
    return markdown_table(["checkpoint", "$L$", "$N$", r"$\log_{10}B_{\rm ours}$", r"$\log_{10}B_{\rm Edelman}$",
                           r"$p^\ast=0$"], body, ["", "d", "d", ".3f", ".3f", ""], align="lrrrrr")
