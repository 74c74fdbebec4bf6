"""Two checkpoints of one architecture side by side: which matrices a fine-tune changed, and by how much (Chapter 6).

:func:`compare` reads the paper's matrices of ``a`` and ``b`` layer by layer (every head's ``QK_h`` and
``Ṽ_h``, every layer's ``M_in`` and ``M_out``) and, for each, measures the change ``ΔW = W_b − W_a``:

* ``rel_change_fro = ‖ΔW‖_F / ‖W_a‖_F`` and ``rel_change_spec = ‖ΔW‖₂ / ‖W_a‖₂``;
* ``sigma_shift = max_i |σ_i(W_b) − σ_i(W_a)| / σ_1(W_a)``, the largest move of one singular value
  relative to the spectral norm (Weyl's inequality: ``sigma_shift ≤ rel_change_spec``, checked in the tests);
* the effective rank ``exp(−Σ q_i log q_i)``, ``q_i = σ_i / Σσ`` (Roy & Vetterli), of both;
* ``subspace_overlap = ‖U_aᵀ U_b‖_F² / k``, the mean squared cosine of the principal angles between the
  top-``k`` left singular subspaces (1: the same directions, 0: orthogonal), and the largest angle;
* the post hoc choice ``p*`` and the term ``log10 𝒯*`` of both reports (:func:`bounds_lib.analysis.scoring.score`).

The singular values are those of both models' spectra (:func:`~bounds_lib.analysis.spectra.compute_spectra`,
the ones their reports score). Head products are never formed: the top singular vectors of
``QK_h = W_{Q,h} W_{K,h}ᵀ`` and the norms of its change ``[W^b_{Q,h} | −W^a_{Q,h}] [W^b_{K,h} | W^a_{K,h}]ᵀ``
come from the small core of two thin QR factorisations (the ``"clean"`` route of
:mod:`bounds_lib.analysis.kernel`); a feed-forward matrix's top vectors and its change's spectral norm come
from the eigenvalues of its smaller Gram matrix.
The rows are ranked by ``rel_change_fro`` (largest first); :meth:`ModelComparison.summary` gives the
whole-model change of ``B_ours`` and ``B_Edelman``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checkpoints import CheckpointError, detect_architecture, iter_layers, open_checkpoint
from ..core.validation import check_scalar
from .describe import architecture_alone, effective_rank, matrix_tensors, to_dataframe
from .scoring import BoundReport, log10_or_value, score
from .spectra import compute_spectra

__all__ = ["MatrixChange", "ModelComparison", "compare", "check_same_shapes"]

#: Default size of the top singular subspaces whose principal angles are compared.
TOP_K = 10


@dataclass(frozen=True)
class MatrixChange:
    """How one matrix moved from checkpoint ``a`` to ``b`` (the fields are described in the module docstring)."""

    layer: int
    head: int
    matrix_type: str
    tensors: str
    rel_change_fro: float
    rel_change_spec: float
    abs_change_fro: float
    abs_change_spec: float
    sigma_shift: float
    effective_rank_a: float
    effective_rank_b: float
    top_k: int
    subspace_overlap: float
    max_principal_angle_deg: float
    p_star_a: float = math.nan
    p_star_b: float = math.nan
    log10_T_star_a: float = math.nan
    log10_T_star_b: float = math.nan

    def label(self) -> str:
        """``"L3.QK.h5"`` or ``"L3.M_in"``."""
        return f"L{self.layer}.{self.matrix_type}" + (f".h{self.head}" if self.head >= 0 else "")

    def to_row(self) -> dict:
        """The CSV row of ``bounds-lib compare`` (``head`` empty for a feed-forward matrix)."""
        row = {"rank_of_change": None, "layer": self.layer, "head": self.head if self.head >= 0 else "",
               "kind": self.matrix_type, "tensors": self.tensors}
        row.update({k: getattr(self, k) for k in (
            "rel_change_fro", "rel_change_spec", "abs_change_fro", "abs_change_spec", "sigma_shift",
            "effective_rank_a", "effective_rank_b", "top_k", "subspace_overlap", "max_principal_angle_deg",
            "p_star_a", "p_star_b", "log10_T_star_a", "log10_T_star_b")})
        row["delta_log10_T_star"] = self.log10_T_star_b - self.log10_T_star_a
        return row


@dataclass(frozen=True)
class ModelComparison:
    """The result of :func:`compare`: both reports and one :class:`MatrixChange` per matrix, most changed first."""

    report_a: BoundReport
    report_b: BoundReport
    changes: tuple

    def summary(self) -> dict:
        """Both models' ``B_ours`` (released sum) and ``B_Edelman`` and the change of their log10, plus counts."""
        a, b = self.report_a, self.report_b
        moved = [c for c in self.changes if c.rel_change_fro > 0]
        return {
            "B_ours_a": log10_or_value(a.log_B_ours_sum), "B_ours_b": log10_or_value(b.log_B_ours_sum),
            "delta_log10_B_ours": (b.log_B_ours_sum - a.log_B_ours_sum) / math.log(10),
            "B_edelman_a": log10_or_value(a.log_B_edelman), "B_edelman_b": log10_or_value(b.log_B_edelman),
            "delta_log10_B_edelman": (b.log_B_edelman - a.log_B_edelman) / math.log(10),
            "n_matrices": len(self.changes), "n_changed": len(moved),
            "n_p_star_changed": sum(c.p_star_a != c.p_star_b for c in self.changes),
        }

    def rows(self) -> list:
        """One :meth:`MatrixChange.to_row` per matrix, ranked (``rank_of_change`` 1 = most changed)."""
        rows = [c.to_row() for c in self.changes]
        for i, r in enumerate(rows, 1):
            r["rank_of_change"] = i
        return rows

    def to_dict(self) -> dict:
        """JSON-ready: ``model_a``, ``model_b``, ``summary``, ``meaning`` (of both reports:
        :func:`~bounds_lib.analysis.describe.architecture_alone`) and the ranked ``matrices``."""
        return {"model_a": self.report_a.source, "model_b": self.report_b.source, "summary": self.summary(),
                "meaning": {"a": architecture_alone(self.report_a), "b": architecture_alone(self.report_b)},
                "matrices": self.rows()}

    def to_dataframe(self):
        """:meth:`rows` as a pandas DataFrame (extra ``pandas``; columns: ``describe.COMPARE_COLUMNS``)."""
        return to_dataframe(self.rows())


def check_same_shapes(source_a, source_b, spec_a, spec_b):
    """:class:`~bounds_lib.checkpoints.formats.CheckpointError` naming every analysed tensor whose shape differs
    (or a different number of layers, heads or layout); nothing when ``a`` and ``b`` can be compared."""
    if spec_a.n_layers != spec_b.n_layers:
        raise CheckpointError(f"cannot compare: A has {spec_a.n_layers} layers, B has {spec_b.n_layers}")
    if (spec_a.family, spec_a.n_heads, spec_a.head_dim) != (spec_b.family, spec_b.n_heads, spec_b.head_dim):
        raise CheckpointError(
            f"cannot compare: A is {spec_a.family} with {spec_a.n_heads} heads of size {spec_a.head_dim}, "
            f"B is {spec_b.family} with {spec_b.n_heads} heads of size {spec_b.head_dim}")
    differ = []
    for layer in range(spec_a.n_layers):
        names_a, names_b = spec_a.tensor_names(layer), spec_b.tensor_names(layer)
        for role, name in names_a.items():
            sa, sb = tuple(source_a.shape(name)), tuple(source_b.shape(names_b[role]))
            if sa != sb:
                differ.append(f"{name} {sa} in A vs {sb} in B")
    if differ:
        more = f" (and {len(differ) - 3} more)" if len(differ) > 3 else ""
        raise CheckpointError("cannot compare: shapes differ: " + "; ".join(differ[:3]) + more)


def _thin_factors(left: np.ndarray, right: np.ndarray):
    """``(Q_l, core, Q_r)`` with ``left @ right.T = Q_l @ core @ Q_r.T`` (thin QRs, ``core`` small)."""
    ql, rl = np.linalg.qr(left)
    qr_, rr = np.linalg.qr(right)
    return ql, rl @ rr.T, qr_


def _top_left(left, right, k: int):
    """The top-``k`` left singular vectors of ``left @ right.T`` (never formed)."""
    ql, core, _ = _thin_factors(left, right)
    u = np.linalg.svd(core)[0]
    return ql @ u[:, :k]


def _dense_top(W, k: int):
    """The top-``k`` left singular vectors of ``W`` from the eigenvectors of its smaller Gram matrix (the top
    ``k`` are far above rounding, so the Gram's squaring loses nothing there; a full SVD of a d_ff-wide
    matrix costs several times more)."""
    if W.shape[0] <= W.shape[1]:
        return np.linalg.eigh(W @ W.T)[1][:, ::-1][:, :k]
    lam, V = np.linalg.eigh(W.T @ W)
    Vk, s = V[:, ::-1][:, :k], np.sqrt(np.maximum(lam[::-1][:k], 0.0))
    return (W @ Vk) / np.where(s > 0, s, 1.0)


def _dense_delta(D) -> tuple[float, float]:
    """``(‖D‖_F, ‖D‖₂)``, the spectral norm from the largest eigenvalue of the smaller Gram matrix."""
    G = D @ D.T if D.shape[0] <= D.shape[1] else D.T @ D
    return float(np.linalg.norm(D)), float(np.sqrt(max(np.linalg.eigvalsh(G)[-1], 0.0)))


def _change(sig_a, top_a, sig_b, top_b, delta: tuple, k: int) -> dict:
    """The numbers of one :class:`MatrixChange` from both spectra, both top subspaces and ``(‖ΔW‖_F, ‖ΔW‖₂)``."""
    n = min(sig_a.size, sig_b.size)
    fro_a = float(np.sqrt(np.sum(sig_a ** 2)))
    fro_d, spec_d = delta
    s1 = float(sig_a[0]) if sig_a.size else 0.0
    cos = np.clip(np.linalg.svd(top_a.T @ top_b, compute_uv=False), 0.0, 1.0)
    return dict(
        rel_change_fro=fro_d / fro_a if fro_a > 0 else math.inf * (fro_d > 0),
        rel_change_spec=spec_d / s1 if s1 > 0 else math.inf * (spec_d > 0),
        abs_change_fro=fro_d, abs_change_spec=spec_d,
        sigma_shift=float(np.max(np.abs(sig_b[:n] - sig_a[:n]))) / s1 if s1 > 0 and n else 0.0,
        effective_rank_a=effective_rank(sig_a), effective_rank_b=effective_rank(sig_b), top_k=k,
        subspace_overlap=float(np.sum(cos ** 2) / k),
        max_principal_angle_deg=float(np.degrees(np.arccos(cos.min()))))


def _head_changes(la, lb, spec, sigmas, top_k: int) -> list:
    """The changes of every ``QK_h`` and ``Ṽ_h`` of one layer (``la``, ``lb``: :class:`LayerWeights`; ``sigmas``:
    ``{(layer, head, type): (σ in a, σ in b)}`` from both models' spectra)."""
    out = []
    for kind, factors in (("QK", lambda lw, h: (lw.W_Q(h), lw.W_K(h))),
                          ("V", lambda lw, h: (lw.W_V(h), lw.W_O(h).T))):
        for h in range(spec.n_heads):
            (l_a, r_a), (l_b, r_b) = factors(la, h), factors(lb, h)
            k = min(top_k, l_a.shape[1])
            if np.array_equal(l_a, l_b) and np.array_equal(r_a, r_b):  # unchanged: exactly zero, not QR rounding
                delta = (0.0, 0.0)
            else:
                _, core, _ = _thin_factors(np.hstack([l_b, -l_a]), np.hstack([r_b, r_a]))
                d_sig = np.linalg.svd(core, compute_uv=False)
                delta = (float(np.sqrt(np.sum(d_sig ** 2))), float(d_sig[0]))
            sig_a, sig_b = sigmas[(la.layer, h, kind)]
            out.append(MatrixChange(la.layer, h, kind, matrix_tensors(spec, la.layer, kind, h),
                                    **_change(sig_a, _top_left(l_a, r_a, k), sig_b, _top_left(l_b, r_b, k),
                                              delta, k)))
    return out


def _ffn_changes(la, lb, spec, sigmas, top_k: int) -> list:
    out = []
    for kind in ("M_in", "M_out"):
        Wa, Wb = la.matrix(kind), lb.matrix(kind)
        k = min(top_k, min(Wa.shape))
        sig_a, sig_b = sigmas[(la.layer, -1, kind)]
        out.append(MatrixChange(la.layer, -1, kind, matrix_tensors(spec, la.layer, kind),
                                **_change(sig_a, _dense_top(Wa, k), sig_b, _dense_top(Wb, k),
                                          _dense_delta(Wb - Wa), k)))
    return out


def _with_terms(change: MatrixChange, ra: BoundReport, rb: BoundReport) -> MatrixChange:
    """``change`` with ``p*`` and ``log10 𝒯*`` of its matrix in both reports."""
    from dataclasses import replace

    def find(rep):
        return next(m for m in rep.select(change.matrix_type, change.layer) if m.head == change.head)

    ma, mb = find(ra), find(rb)
    return replace(change, p_star_a=ma.p_star, p_star_b=mb.p_star, log10_T_star_a=ma.log_T_star / math.log(10),
                   log10_T_star_b=mb.log_T_star / math.log(10))


def compare(a, b, *, mode: str = "clean", top_k: int = TOP_K, config_a=None, config_b=None,
            options=None, allow_download: bool | None = None, progress=None, prefix: str | None = None,
            **spectra_kw) -> ModelComparison:
    """Compare checkpoints ``a`` and ``b`` of one architecture matrix by matrix (see the module docstring).

    Parameters
    ----------
    a, b
        Anything :func:`~bounds_lib.checkpoints.hub.open_checkpoint` accepts (a state dict with ``config_a`` /
        ``config_b``).
    mode : {"clean", "paper"}
        The spectra behind both reports' ``p*`` and ``𝒯*`` (:func:`~bounds_lib.analysis.spectra.compute_spectra`).
    top_k : int
        Size of the top singular subspaces whose principal angles are compared (capped by each matrix's size).
    options : ScoringOptions, optional
        The constants of both reports (:func:`~bounds_lib.analysis.scoring.score`).
    allow_download, progress, prefix, **spectra_kw
        As in :func:`~bounds_lib.analysis.spectra.compute_spectra` (``dtype``, ``jobs``, ``device``, ``resume``,
        ``entrywise``…), for both models.

    Returns
    -------
    ModelComparison
        ``changes`` ranked by ``rel_change_fro``, largest first (ties in the models' order).

    Raises
    ------
    bounds_lib.checkpoints.formats.CheckpointError
        One line naming what differs when the shapes, the number of layers or the heads differ
        (and as :func:`~bounds_lib.checkpoints.hub.open_checkpoint` raises it).
    TypeError, ValueError
        ``top_k`` not a positive integer.

    Examples
    --------
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> name = "encoder.layer.1.intermediate.dense.weight"
    >>> sd2 = {**sd, name: 2 * sd[name]}
    >>> cmp = compare(sd, sd2, config_a=cfg, config_b=cfg)
    >>> first = cmp.changes[0]
    >>> first.label(), round(first.rel_change_fro, 12), cmp.summary()["n_changed"]
    ('L1.M_in', 1.0, 1)
    """
    top_k = check_scalar(top_k, "top_k", int, min_val=1)
    src_a = open_checkpoint(a, config=config_a, allow_download=allow_download)
    src_b = open_checkpoint(b, config=config_b, allow_download=allow_download)
    spec_a, spec_b = detect_architecture(src_a, prefix=prefix), detect_architecture(src_b, prefix=prefix)
    check_same_shapes(src_a, src_b, spec_a, spec_b)
    if spec_a.n_experts:
        raise CheckpointError("cannot compare mixture-of-experts models yet (one M_in/M_out per expert)")
    spectra = [compute_spectra(src, mode=mode, progress=progress, prefix=prefix, **spectra_kw)
               for src in (src_a, src_b)]
    reports = [score(sp, options) for sp in spectra]
    sigmas = {(ma.layer, ma.head, ma.matrix_type): (ma.sigma, mb.sigma)
              for ma, mb in zip(spectra[0].matrices, spectra[1].matrices)}
    changes = []
    layers = range(spectra_kw["n_layers"]) if spectra_kw.get("n_layers") else None
    for la, lb in zip(iter_layers(src_a, spec_a, layers=layers), iter_layers(src_b, spec_b, layers=layers)):
        changes += _head_changes(la, lb, spec_a, sigmas, top_k) + _ffn_changes(la, lb, spec_a, sigmas, top_k)
    changes = [_with_terms(c, *reports) for c in changes]
    order = sorted(range(len(changes)), key=lambda i: (-changes[i].rel_change_fro, i))
    return ModelComparison(reports[0], reports[1], tuple(changes[i] for i in order))
