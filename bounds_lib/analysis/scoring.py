"""Bound proxies from spectra — one scoring core for the single-head (Chapter 7) and multi-head (Chapter 6) paths.

Both paths compute the same quantities in log space, through the same functions:

* per matrix, the post hoc term ``T*(W) = min_{p∈𝒫_m} T(W;p)`` with ``K = γ α L``
  (:func:`posthoc_term`, built on :func:`bounds_lib.theory.peeling.posthoc_choice`);
* ``B_ours = Σ T* + √L`` (released) and ``√(Σ T*²) + √L`` (:func:`bounds_lib.theory.peeling.aggregate_sum`,
  :func:`bounds_lib.theory.peeling.aggregate_rss`);
* ``B_Edelman = (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}`` (:func:`log_edelman_bound`), where ``ξ_ℓ`` is a sum of
  ``x^{2/3}`` over per-layer summands ``x`` that each architecture lists
  (:func:`bounds_lib.analysis.single_head.single_head_proxies`, :func:`score`), and ``B_11``, the same
  with every ``(2,1)`` norm replaced by the ``(1,1)`` norm (a labelled extension, no released formula).

The single-head model (Chapter 1) has its proxies in :mod:`bounds_lib.analysis.single_head`; the
multi-head checkpoints (Chapter 6) are scored here, each spectrum checked once, when :func:`score`
receives it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..checkpoints import ACTIVATION_L_PHI, ArchitectureSpec
from ..theory.norms import _rank_of_valid, validate_sigma
from ..theory.peeling import (_posthoc_choice_valid, _posthoc_choices_valid, aggregate_rss, aggregate_sum, logsumexp,
                              posthoc_choice, posthoc_grid)
from ..theory.propagation import (
    LPHI_GELU_RELEASED,
    SOFTMAX_LINF_L1_RELEASED,
    log_alpha,
    log_gamma_multihead,
    log_layer_lipschitz_multihead,
    log_scale_K,
)
from .cache import SpectraCache
from .spectra import ModelSpectra, _ArchitectureSizes, check_spectra, compute_spectra, select_matrices
from ..core.validation import check_bool, check_scalar

__all__ = ["LN10", "log_edelman_bound", "posthoc_term", "ScoringOptions", "MatrixScore", "BoundReport",
           "check_report", "log10_or_value", "score", "analyze"]

LN10 = math.log(10.0)
_TWO_THIRDS = 2.0 / 3.0


def log_edelman_bound(log_alpha, log_terms, *, summation: str = "by_layer") -> float:
    """``log (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}`` with ``ξ_ℓ = Σ_j x_{ℓj}^{2/3}`` — the ``B_Edelman`` form, in log space.

    The one implementation of this form for both architectures: :func:`score` (multi-head, Chapter 6)
    and :func:`bounds_lib.analysis.single_head.single_head_proxies` (Chapter 7) differ only in the
    summands ``x_{ℓj}`` they list.

    Parameters
    ----------
    log_alpha : array_like, shape (L,)
        ``log α_ℓ``, the depth weight of every layer (:func:`bounds_lib.theory.propagation.log_alpha`).
    log_terms : array_like, shape (L, k)
        ``log x_{ℓj}``: the logs of the ``k`` summands of ``ξ_ℓ`` *before* the 2/3 power (e.g.
        ``log(C_M C_V ‖W_QK‖_{2,1})``); ``-inf`` for a zero summand.
    summation : {"by_layer", "flat"}
        The floating-point order of the sums (the results agree to ~1e-15 relative; both are kept so
        that stored and printed results are reproduced bit for bit). ``"by_layer"``: ``log ξ_ℓ`` by a
        log-sum-exp over each layer, then a log-sum-exp of ``(2/3) log α_ℓ + log ξ_ℓ`` over the layers
        (the multi-head proxies of Chapter 6). ``"flat"``: the ``L·k`` exponents
        ``(2/3)(log α_ℓ + log x_{ℓj})`` combined one by one with ``np.logaddexp`` in layer-major order
        (the single-head proxies, the order of the stored results of Chapters 7–8).

    Returns
    -------
    float
        The natural log of the bound (``0.0`` when every summand is zero).

    Raises
    ------
    ValueError
        ``log_terms`` is not two-dimensional, its number of rows differs from ``len(log_alpha)``, an
        entry is NaN, or ``summation`` is unknown.

    Examples
    --------
    One layer, ``α = 1`` and ``ξ = 1^{2/3} + 8^{2/3} = 5``: ``B = (1 + 5)^{3/2}``.

    >>> import math
    >>> b = log_edelman_bound([0.0], [[0.0, math.log(8.0)]])
    >>> math.isclose(math.exp(b), 6.0 ** 1.5, rel_tol=1e-14)
    True
    >>> math.isclose(b, log_edelman_bound([0.0], [[0.0, math.log(8.0)]], summation="flat"), rel_tol=1e-14)
    True
    """
    if summation not in ("by_layer", "flat"):
        raise ValueError(f"summation must be 'by_layer' or 'flat', got {summation!r}")
    la = np.asarray(log_alpha, dtype=np.float64).reshape(-1)
    lt = np.asarray(log_terms, dtype=np.float64)
    if lt.ndim != 2 or lt.shape[0] != la.shape[0]:
        raise ValueError(f"log_terms must have shape (L, k) with L = len(log_alpha) = {la.shape[0]}, "
                         f"got shape {lt.shape}")
    if np.isnan(lt).any() or np.isnan(la).any():
        raise ValueError("log_alpha and log_terms must not contain NaN")
    if summation == "flat":
        inner = np.logaddexp.reduce((_TWO_THIRDS * (la[:, None] + lt)).ravel())
    else:
        inner = logsumexp(_TWO_THIRDS * la + logsumexp(_TWO_THIRDS * lt, axis=1))
    return 1.5 * float(np.logaddexp(0.0, inner))


def posthoc_term(sigma, log_K: float, N: int, grid):
    """The post hoc choice ``p*`` and ``log T*`` of one matrix (:func:`bounds_lib.theory.peeling.posthoc_choice`).

    ``S_p = Σσ^p`` overflows float64 for ``σ`` beyond ~1e154. ``T(W;p)`` depends on ``σ`` and ``K``
    only through ``S_p·K^p``, so for ``σ₁ > 2^400`` the spectrum is divided by a power of two ``c`` and
    ``log K`` increased by ``log c`` — the same ``log T``, with ``σ/c`` (and the rank tolerance, relative
    to ``σ₁ ≥ 1``) exact. Other spectra are passed through unchanged.

    Parameters
    ----------
    sigma : ndarray
        Singular values, descending.
    log_K : float
        ``log K`` of the matrix.
    N : int
        Hidden size.
    grid : ndarray
        The post hoc grid (:func:`bounds_lib.theory.peeling.posthoc_grid`).

    Returns
    -------
    PosthocChoice
        See :func:`bounds_lib.theory.peeling.posthoc_choice`.

    Examples
    --------
    >>> import numpy as np
    >>> from bounds_lib.theory.peeling import posthoc_grid
    >>> ch = posthoc_term(np.array([1.0, 0.0]), 0.0, 2, posthoc_grid(1, 2))
    >>> ch.p_star
    0.0
    """
    return posthoc_choice(*_rescaled(sigma, log_K), N, grid)


def _rescaled(sigma, log_K):
    """``(σ/c, log K + log c)``, ``c = 2^e`` with ``σ₁/c ∈ [1, 2)``, when ``σ₁ > 2^400`` (:func:`posthoc_term`)."""
    if sigma[0] > 2.0 ** 400:
        e = math.frexp(float(sigma[0]))[1] - 1
        return np.ldexp(sigma, -e), log_K + e * math.log(2.0)
    return sigma, log_K


def _posthoc_term_valid(s: np.ndarray, log_K: float, N: int, grid: np.ndarray):
    """:func:`posthoc_term` of singular values checked once already (``validate_sigma``, or LAPACK's of a
    checked matrix), a finite ``log_K`` (as ``log_scale_K`` returns it) and a ``posthoc_grid``: no check again."""
    return _posthoc_choice_valid(*_rescaled(s, log_K), N, grid)


# ----------------------------------------------------------------------------------- multi-head (Chapter 6)

@dataclass(frozen=True)
class ScoringOptions:
    """Constants of the multi-head proxies (:func:`score`). The defaults reproduce the released code.

    Parameters
    ----------
    logit_scale : float or "inv_sqrt_dh"
        Multiplies every ``QK_h`` (σ, (2,1) and (1,1) norms scale, the rank does not): a positive
        finite number, or ``"inv_sqrt_dh"`` for ``1/√d_h`` (real attention scales its logits; the
        released proxies do not, ``1.0``).
    L_phi : float, optional
        Lipschitz constant of the activation. Default ``None``: the constant of the activation the
        checkpoint's config names (:data:`~bounds_lib.checkpoints.layouts.ACTIVATION_L_PHI`; the released
        ``1.13`` for GELU, 1 for ReLU, ``1.0998…`` for SiLU); a number overrides it.
    softmax_const : float
        The softmax's (∞,1) constant (released: 2).
    gamma_L_phi : bool
        Put ``L_φ`` into γ as Chapter 3 proves (the released γ omits it).

    Raises
    ------
    TypeError
        A constant of the wrong type (``gamma_L_phi`` not a bool, a number given as a string, …).
    ValueError
        ``L_phi``, ``softmax_const`` or a numeric ``logit_scale`` not positive and finite, or a
        ``logit_scale`` string other than ``"inv_sqrt_dh"``.

    Examples
    --------
    >>> ScoringOptions()
    ScoringOptions(logit_scale=1.0, L_phi=None, softmax_const=2.0, gamma_L_phi=False)
    >>> ScoringOptions(gamma_L_phi=1)
    Traceback (most recent call last):
        ...
    TypeError: gamma_L_phi must be True or False, got int 1
    """

    logit_scale: float | str = 1.0
    L_phi: float | None = None
    softmax_const: float = SOFTMAX_LINF_L1_RELEASED
    gamma_L_phi: bool = False

    def __post_init__(self):
        if isinstance(self.logit_scale, str):
            if self.logit_scale != "inv_sqrt_dh":
                raise ValueError(f"logit_scale must be a positive number or 'inv_sqrt_dh', got {self.logit_scale!r}")
        else:
            check_scalar(self.logit_scale, "logit_scale (a positive finite number or 'inv_sqrt_dh')", float,
                         min_val=0, include_boundaries="neither")
        if self.L_phi is not None:
            check_scalar(self.L_phi, "L_phi (Lipschitz constant of the activation)", float, min_val=0,
                         include_boundaries="neither")
        check_scalar(self.softmax_const, "softmax_const", float, min_val=0, include_boundaries="neither")
        check_bool(self.gamma_L_phi, "gamma_L_phi")

    def L_phi_for(self, arch: ArchitectureSpec) -> float:
        """``L_φ`` for ``arch``: the given ``L_phi``, else that of ``arch.activation`` (ValueError if unknown)."""
        if self.L_phi is not None:
            return float(self.L_phi)
        try:
            return ACTIVATION_L_PHI[arch.activation]
        except (KeyError, TypeError):
            raise ValueError(f"activation {arch.activation!r} has no Lipschitz constant here; supported: "
                             + ", ".join(sorted(ACTIVATION_L_PHI)) + "; or pass L_phi=") from None

    def scale_for(self, arch: ArchitectureSpec) -> float:
        """The logit scale as a float for ``arch`` (``1/√d_h`` for ``"inv_sqrt_dh"``; checked when made)."""
        if self.logit_scale == "inv_sqrt_dh":
            return 1.0 / math.sqrt(arch.head_dim)
        return float(self.logit_scale)


@dataclass(frozen=True)
class MatrixScore:
    """One matrix's spectrum summary, its scales and its post hoc term (all ``log_`` fields natural logs)."""

    layer: int
    head: int
    matrix_type: str
    shape: tuple
    sigma1: float
    rank: int
    frobenius: float
    nuclear: float
    stable_rank: float
    norm_21: float
    norm_11: float
    log_gamma: float
    log_alpha: float
    log_K: float
    p_star: float
    log_T_star: float
    log_T: np.ndarray = field(repr=False)
    #: The feed-forward expert of a mixture-of-experts layer (Mixtral) this ``M_in``/``M_out`` belongs to,
    #: ``None`` for every other matrix.
    expert: int | None = None

    @property
    def log_T0(self) -> float:
        """``log 𝒯(W; 0) = ½ log(rank · N)``."""
        return float(self.log_T[0])

    def to_row(self) -> dict:
        """The CSV row of the CLI (log10 values; the matrix type under the column name ``kind``; ``expert``
        empty except for a mixture-of-experts feed-forward matrix)."""
        return {"layer": self.layer, "head": self.head if self.head >= 0 else "",
                "expert": "" if self.expert is None else self.expert, "kind": self.matrix_type,
                "rows": self.shape[0], "cols": self.shape[1], "sigma1": self.sigma1, "rank": self.rank,
                "frobenius": self.frobenius, "nuclear": self.nuclear, "stable_rank": self.stable_rank,
                "norm_21": self.norm_21, "norm_11": self.norm_11,
                "log10_gamma": self.log_gamma / math.log(10),
                "log10_depth_weight_alpha": self.log_alpha / math.log(10),
                "log10_K": self.log_K / math.log(10), "p_star": self.p_star,
                "log10_T_star": self.log_T_star / math.log(10), "log10_T0": self.log_T0 / math.log(10)}


def log10_or_value(log_x: float) -> dict:
    """``{"log10": …, "value": x or None}`` — the value is omitted when it exceeds float range."""
    l10 = log_x / math.log(10)
    value = math.exp(log_x) if log_x < 700 else None
    return {"log10": l10, "value": value}


@dataclass(frozen=True)
class BoundReport(_ArchitectureSizes):
    """Every proxy of one model (:func:`score`). Natural-log fields; :meth:`summary` gives log10.

    ``log_B_11`` is the (1,1) analogue of ``B_Edelman`` (our extension; ``NaN`` when the head
    products' (1,1) norms were not computed). ``matrices`` holds one :class:`MatrixScore` per matrix.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> rep = analyze(state_dict, config=config)
    >>> s = rep.summary()
    >>> s["n_matrices"], s["grid_m"], s["grid_points"]   # grid 𝒫_m = {0, 1/m, …, 2}
    (12, 5, 11)
    >>> s["B_edelman_11_extension"]["log10"] >= s["B_edelman"]["log10"]   # ‖·‖_{1,1} ≥ ‖·‖_{2,1}
    True
    >>> d = rep.to_dict()
    >>> sorted(d)[:4], len(d["matrices"])
    (['architecture', 'dtype', 'grid', 'log10_Lambda'], 12)
    """

    arch: ArchitectureSpec
    mode: str
    dtype: str
    options: ScoringOptions
    logit_scale: float
    grid: np.ndarray
    log_Lambda: np.ndarray
    log_alpha: np.ndarray
    matrices: tuple
    log_B_ours_sum: float
    log_B_ours_rss: float
    log_B_edelman: float
    log_B_11: float
    L_phi: float = LPHI_GELU_RELEASED
    source: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def p_stars(self) -> np.ndarray:
        """``p*`` of every matrix, in the order of ``matrices``."""
        return np.array([m.p_star for m in self.matrices])

    def select(self, matrix_type=None, layer=None) -> list:
        """Scores of one ``matrix_type`` and/or one ``layer`` (in stored order)."""
        return select_matrices(self.matrices, matrix_type, layer)

    def summary(self) -> dict:
        """The four model-level proxies as ``{"log10", "value"}`` plus grid and p* statistics.

        Returns
        -------
        dict
            ``B_ours_sum``, ``B_ours_rss``, ``B_edelman`` and ``B_edelman_11_extension`` (the (1,1)
            analogue, ``log_B_11``) as :func:`log10_or_value` dicts; ``grid_m``, ``grid_points``,
            ``fraction_p_star_zero`` and ``n_matrices``.
        """
        ps = self.p_stars
        return {
            "B_ours_sum": log10_or_value(self.log_B_ours_sum),
            "B_ours_rss": log10_or_value(self.log_B_ours_rss),
            "B_edelman": log10_or_value(self.log_B_edelman),
            "B_edelman_11_extension": log10_or_value(self.log_B_11),
            "grid_m": int(round(1.0 / self.grid[1])) if self.grid.size > 1 else 0,
            "grid_points": int(self.grid.size),
            "fraction_p_star_zero": float(np.mean(ps == 0.0)),
            "n_matrices": len(self.matrices),
        }

    def to_dataframe(self):
        """The rows of :meth:`to_dict` as a pandas DataFrame (extra ``pandas``; columns: ``describe.COLUMNS``)."""
        from .describe import report_rows, to_dataframe
        return to_dataframe(report_rows(self))

    def to_dict(self) -> dict:
        """Everything as JSON-ready Python values (the CLI's ``--json`` report, log10 values).

        Returns
        -------
        dict
            ``model``, ``architecture``, ``mode``, ``dtype``, ``options``, ``grid``, ``log10_Lambda``,
            ``log10_depth_weight_alpha`` (the paper's depth weight α, not a power-law exponent), ``summary``,
            ``meaning`` (:func:`~bounds_lib.analysis.describe.architecture_alone` and the descriptive
            :func:`~bounds_lib.analysis.describe.standouts`), ``matrices`` (one
            row each, with its tensors: :func:`~bounds_lib.analysis.describe.report_rows`) and ``meta``.
        """
        from .describe import architecture_alone, report_rows, standouts
        return {
            "model": self.source, "architecture": self.arch.to_dict(), "mode": self.mode, "dtype": self.dtype,
            "options": {"logit_scale": self.options.logit_scale, "logit_scale_value": self.logit_scale,
                        "L_phi": self.options.L_phi, "L_phi_value": self.L_phi,
                        "softmax_const": self.options.softmax_const, "gamma_L_phi": self.options.gamma_L_phi},
            "grid": self.grid.tolist(),
            "log10_Lambda": (self.log_Lambda / math.log(10)).tolist(),
            "log10_depth_weight_alpha": (self.log_alpha / math.log(10)).tolist(),
            "summary": self.summary(), "meaning": {**architecture_alone(self), "stands_out": standouts(self)},
            "matrices": report_rows(self),
            "meta": self.meta,
        }


def check_report(report, name: str = "report") -> BoundReport:
    """``report`` itself; :class:`TypeError` unless it is a :class:`BoundReport` (from :func:`score`)."""
    if not isinstance(report, BoundReport):
        raise TypeError(f"{name} must be a bounds_lib.analysis.scoring.BoundReport (from score), "
                        f"got {type(report).__name__}")
    return report


def _multi_head_log_terms(C: dict, norms: dict, C_layer: tuple | None = None) -> np.ndarray:
    """``log`` of the summands of ``ξ_ℓ`` of the released multi-head ``B_Edelman``, shape (L, 2H + 2U).

    ``C["M_in"]``, ``C["M_out"]`` and their norms have shape (L, U), one column per feed-forward unit
    (U = 1 for a dense layer, the experts of a mixture-of-experts one; shape (L,) is one unit);
    ``C_layer`` the layer's ``(C(M_in), C(M_out))`` that multiply the attention terms (default:
    ``_layer_ffn_constants``).
    """
    C, norms = ({k: (v[:, None] if k in ("M_in", "M_out") and np.ndim(v) == 1 else v) for k, v in d.items()}
                for d in (C, norms))
    C_layer = _layer_ffn_constants(C["M_in"], C["M_out"]) if C_layer is None else C_layer
    with np.errstate(divide="ignore"):
        lg = {k: np.log(v) for k, v in C.items()}
        ln = {k: np.log(v) for k, v in norms.items()}
        lmi, lmo = (np.log(c)[:, None] for c in C_layer)
    return np.concatenate([
        lmo + lmi + lg["V"] + ln["QK"],
        lmo + lmi + ln["V"],
        lg["M_out"] + ln["M_in"],
        ln["M_out"],
    ], axis=1)


def _layer_ffn_constants(C_Min: np.ndarray, C_Mout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layer ``(C(M_in), C(M_out))`` of the feed-forward unit with the largest ``C(M_in)·C(M_out)``.

    Arrays of shape (L, U); a dense layer has one unit (U = 1, its own constants). A mixture-of-experts
    layer computes ``Σ_e w_e(x) f_e(x)`` with routing weights summing to 1 (Mixtral normalises its top-k
    weights), so under a fixed routing its Lipschitz constant is at most the largest expert's; the
    routing itself depends on ``x`` (and jumps where the top-k set changes), which no weight matrix
    bounds — for such models ``Λ`` and γ are proxies, not bounds.
    """
    u = np.argmax(C_Min * C_Mout, axis=1)
    rows = np.arange(C_Min.shape[0])
    return C_Min[rows, u], C_Mout[rows, u]


def _index(m) -> tuple:
    """``(layer, head)`` of a head's matrix, ``(layer, expert)`` of a feed-forward one (expert 0 when dense)."""
    return (m.layer, m.head) if m.head >= 0 else (m.layer, m.expert or 0)


def _matrix_scores(mats, sigmas, clean: bool, log_gam: dict, log_al, log_K: dict, N: int, grid) -> list:
    """The :class:`MatrixScore` of every matrix from its singular values as :func:`score` checked them (not
    again), the post hoc choices all at once (:func:`~bounds_lib.theory.peeling._posthoc_choices_valid`). A
    clean head's ``S_p`` leaves out its exact zeros: they add nothing for ``p > 0``, and every kept value is
    above the rank tolerance, so no number changes — only the time spent on them."""
    lKs = [float(log_K[m.matrix_type][_index(m)]) for m in mats]
    kept = [sig[:max(1, int(np.count_nonzero(sig)))] if clean and m.head >= 0 else sig for m, sig in zip(mats, sigmas)]
    rescaled = [_rescaled(k, lK) for k, lK in zip(kept, lKs)]
    choices = _posthoc_choices_valid([r[0] for r in rescaled], [r[1] for r in rescaled], N, grid)
    return [MatrixScore(m.layer, m.head, m.matrix_type, m.shape, m.sigma1, _rank_of_valid(sig), m.frobenius, m.nuclear,
                        m.stable_rank, m.norm_21, m.norm_11, float(log_gam[m.matrix_type][_index(m)]),
                        float(log_al[m.layer]), lK, p_star, log_T_star, log_T, m.expert)
            for m, sig, lK, (log_T, p_star, log_T_star) in zip(mats, sigmas, lKs, choices)]


def score(spectra: ModelSpectra, options: ScoringOptions | None = None, **kw) -> BoundReport:
    """All proxies of the released code from precomputed spectra (no SVD here; Chapter 6).

    Matrix-level terms use :func:`posthoc_term` on the grid ``posthoc_grid(L, N)``; depth weights
    :func:`bounds_lib.theory.propagation.log_layer_lipschitz_multihead` and ``log_alpha``; γ uses
    ``log_gamma_multihead`` (released form unless ``gamma_L_phi``); ``K = γαL`` via ``log_scale_K``.

    * ``B_ours = Σ_matrices T* + √L`` (:func:`~bounds_lib.theory.peeling.aggregate_sum`) and the
      root-sum-square variant (:func:`~bounds_lib.theory.peeling.aggregate_rss`).
    * ``B_Edelman = (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}`` (:func:`log_edelman_bound`) with
      ``ξ_ℓ = Σ_h[(C(M_out)C(M_in)C(Ṽ_h)‖QK_h‖_{2,1})^{2/3} + (C(M_out)C(M_in)‖Ṽ_h‖_{2,1})^{2/3}]
      + (C(M_out)‖M_in‖_{2,1})^{2/3} + ‖M_out‖_{2,1}^{2/3}`` (released formula).
    * ``B_11``: the same with every (2,1) norm replaced by the (1,1) norm — **our extension**,
      a stand-in for the entrywise norms of Trauger & Tewari, not a released proxy.
    * A mixture-of-experts model (Mixtral; ``arch.n_experts`` experts per layer) has ``L(2H + 2E)``
      matrices: every expert's ``M_in``/``M_out`` is a matrix of its own, with its own ``T*`` in
      ``B_ours``, its own γ (``C(M_out,e)``, resp. ``1`` or ``B_φ C(M_in,e)``) and its own two summands in
      ``ξ_ℓ``. ``Λ_ℓ`` and the attention terms of ``ξ_ℓ`` use the expert with the largest
      ``C(M_in,e)C(M_out,e)``: the layer mixes its experts with routing weights summing to 1, so under
      a fixed routing it is at most that Lipschitz; the routing itself depends on the input (and jumps
      where the top-k set changes), which no matrix bounds — a proxy, not a bound.

    Parameters
    ----------
    spectra : ModelSpectra
        From :func:`bounds_lib.analysis.spectra.compute_spectra`.
    options : ScoringOptions, optional
        The constants (default: the released ones).
    **kw
        Fields of :class:`ScoringOptions` overriding those of ``options``.

    Returns
    -------
    BoundReport

    Raises
    ------
    TypeError
        ``spectra`` is not a :class:`~bounds_lib.analysis.spectra.ModelSpectra`, or an option of the wrong type.
    ValueError
        ``spectra`` does not hold ``L(2H + 2)`` matrices (``L(2H + 2E)`` with ``E`` experts), or an option
        out of range.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> sp = compute_spectra(state_dict, config=config)
    >>> rep = score(sp)
    >>> rep.log_B_ours_sum > rep.log_B_ours_rss          # Σ T* ≥ √(Σ T*²)
    True
    >>> score(sp, logit_scale="inv_sqrt_dh").logit_scale  # 1/√d_h, d_h = 4
    0.5
    """
    check_spectra(spectra)
    if kw:
        options = replace(options or ScoringOptions(), **kw)
    options = options or ScoringOptions()
    arch = spectra.arch
    L, N, H = arch.n_layers, arch.hidden, arch.n_heads
    U = len(arch.experts)  # feed-forward units per layer: 1, or the experts
    s = options.scale_for(arch)
    mats = [m.scaled(s) if (m.matrix_type == "QK" and s != 1.0) else m for m in spectra.matrices]
    if len(mats) != L * (2 * H + 2 * U):
        per_unit = f", {U} experts" if U > 1 else ""
        raise ValueError(f"spectra hold {len(mats)} matrices, expected {L * (2 * H + 2 * U)} for L={L}, H={H}"
                         + per_unit)
    # every spectrum checked here, once (after the logit scale: a huge scale can overflow σ to inf)
    sigmas = [validate_sigma(m.sigma, f"sigma of {m.label()}") for m in mats]

    C = {"QK": np.zeros((L, H)), "V": np.zeros((L, H)), "M_in": np.zeros((L, U)), "M_out": np.zeros((L, U))}
    n21 = {k: np.zeros_like(v) for k, v in C.items()}
    n11 = {k: np.zeros_like(v) for k, v in C.items()}
    for m in mats:
        idx = _index(m)
        C[m.matrix_type][idx], n21[m.matrix_type][idx], n11[m.matrix_type][idx] = m.sigma1, m.norm_21, m.norm_11

    L_phi = options.L_phi_for(arch)
    C_layer = _layer_ffn_constants(C["M_in"], C["M_out"])
    log_Lam = log_layer_lipschitz_multihead(*C_layer, C["V"], C["QK"], L_phi=L_phi,
                                            softmax_const=options.softmax_const)
    log_al = log_alpha(log_Lam)
    gamma_kw = dict(L_phi=L_phi if options.gamma_L_phi else None, softmax_const=options.softmax_const)
    log_gam = log_gamma_multihead(*C_layer, C["V"], C["QK"], **gamma_kw)
    # each feed-forward unit's γ from its own constants (γ_Min = C(M_out), γ_Mout = 1 or B_φ·C(M_in))
    ones = np.ones((L, 1))
    unit_gam = log_gamma_multihead(C["M_in"], C["M_out"], ones, ones, **gamma_kw)
    log_gam = {**log_gam, "M_in": unit_gam["M_in"], "M_out": unit_gam["M_out"]}
    log_K = {k: log_scale_K(v, log_al[:, None], L) for k, v in log_gam.items()}
    grid = posthoc_grid(L, N)
    scores = _matrix_scores(mats, sigmas, spectra.mode == "clean", log_gam, log_al, log_K, N, grid)
    log_T_stars = np.array([sc.log_T_star for sc in scores])

    def log_edelman(norms):
        if any(np.isnan(v).any() for v in norms.values()):
            return float("nan")  # (1,1) norms not computed (entrywise=False)
        return log_edelman_bound(log_al, _multi_head_log_terms(C, norms, C_layer))

    return BoundReport(
        arch=arch, mode=spectra.mode, dtype=spectra.dtype, options=options, logit_scale=s, grid=grid,
        log_Lambda=np.asarray(log_Lam, dtype=np.float64), log_alpha=np.asarray(log_al, dtype=np.float64),
        matrices=tuple(scores),
        log_B_ours_sum=aggregate_sum(log_T_stars, L), log_B_ours_rss=aggregate_rss(log_T_stars, L),
        log_B_edelman=log_edelman(n21), log_B_11=log_edelman(n11), L_phi=L_phi,
        source=spectra.source, meta=dict(spectra.meta),
    )


def analyze(model, *, mode: str = "clean", dtype="float64", n_layers: int | None = None,
            cache: SpectraCache | None = None, progress=None, allow_download: bool | None = None,
            options: ScoringOptions | None = None, entrywise: bool = True, jobs: int = 1,
            layers: int | None = None, threads: int = 1, **kw
            ) -> BoundReport:
    """:func:`~bounds_lib.analysis.spectra.compute_spectra` then :func:`score`
    — the whole analysis of one model (Chapter 6).

    Parameters
    ----------
    model
        Anything :func:`~bounds_lib.checkpoints.hub.open_checkpoint` accepts (a state dict with
        ``config=`` in ``kw``).
    mode, dtype, n_layers, cache, progress, allow_download, entrywise, jobs, layers, threads
        As in :func:`~bounds_lib.analysis.spectra.compute_spectra` (``layers``: old name). Not the command's
        defaults: ``jobs=1`` (``--jobs`` 0, chosen), ``entrywise=True`` (``--no-entrywise``).
    options, **kw
        As in :func:`score`; ``config``, ``download_timeout`` and ``prefix`` in ``kw`` go to
        ``compute_spectra``.

    Returns
    -------
    BoundReport

    Raises
    ------
    TypeError, ValueError, bounds_lib.checkpoints.formats.CheckpointError
        As :func:`~bounds_lib.analysis.spectra.compute_spectra` and :func:`score` raise them.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> state_dict, config = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> rep = analyze(state_dict, config=config, mode="paper")
    >>> rep.L, rep.mode, len(rep.select("QK"))
    (1, 'paper', 2)
    """
    spectra_kw = {k: kw.pop(k) for k in ("config", "download_timeout", "prefix") if k in kw}
    sp = compute_spectra(model, mode=mode, dtype=dtype, n_layers=n_layers, layers=layers, cache=cache,
                         progress=progress, allow_download=allow_download, entrywise=entrywise, jobs=jobs,
                         threads=threads, **spectra_kw)
    return score(sp, options, **kw)
