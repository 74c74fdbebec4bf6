"""What a report's numbers mean for this model: tensor names, columns, the architecture-alone case (Chapter 6).

* :func:`matrix_tensors` — the stored tensors (and their rows) a matrix of the paper is built from.
* :data:`COLUMNS` — what every column of the ``analyze`` CSV/JSON rows is (the CLI's help and the API page
  print it); :data:`COMPARE_COLUMNS` the same for ``bounds-lib compare``.
* :func:`architecture_alone` — whether ``B_ours`` is a function of the architecture alone (every
  ``p* = 0`` and every matrix at full numerical rank: ``𝒯* = √(rank·N)`` then counts ranks, no weight
  value enters), with a sentence saying so.
* :func:`standouts` — the matrices that stand out from the others of their kind by the paper's
  quantities (rank relative to shape, stable rank, the term's share of ``B_ours``): **descriptive**, a
  ranking of deviations from the kind's median, not a test and not a diagnosis.
* :func:`to_dataframe` — rows as a pandas DataFrame (the optional extra ``pandas``).
"""
from __future__ import annotations

import math

import numpy as np

from ..checkpoints.layers import part_roles
from .pool import _median

__all__ = ["COLUMNS", "COMPARE_COLUMNS", "matrix_tensors", "report_rows", "spectra_rows", "architecture_alone",
           "effective_rank", "standouts", "to_dataframe", "columns_help"]

#: The columns of one matrix's row (``MatrixScore.to_row``: the ``analyze`` CSV and JSON ``matrices``).
COLUMNS = {
    "layer": "layer index, from 0",
    "head": "attention head (empty for M_in, M_out)",
    "expert": "feed-forward expert of a mixture-of-experts layer (else empty)",
    "kind": "matrix of the paper: QK (W_Q,h W_K,hᵀ), V (Ṽ_h = W_V,h W_O,h), M_in, M_out",
    "tensors": "the stored tensors (and rows) the matrix is built from",
    "rows": "rows of the matrix (row-vector convention X ↦ XW)",
    "cols": "columns of the matrix",
    "sigma1": "spectral norm σ₁ = C₂",
    "rank": "numerical rank S₀ (σ_i > 1e-10·len(σ)·max(σ₁, 1), the released tolerance)",
    "frobenius": "Frobenius norm ‖W‖_F",
    "nuclear": "nuclear norm Σσ_i",
    "stable_rank": "‖W‖_F²/‖W‖₂²",
    "norm_21": "(2,1) norm: sum of column norms (B_Edelman's norm)",
    "norm_11": "(1,1) norm Σ|W_ij| (empty unless --entrywise for head products)",
    "log10_gamma": "log10 of γ, the in-layer Lipschitz weight of the matrix (not a power-law exponent)",
    "log10_depth_weight_alpha": "log10 of the paper's depth weight α = Π_{k>ℓ} Λ_k, the Lipschitz factor of the "
                                "layers above (NOT WeightWatcher's power-law alpha)",
    "log10_K": "log10 of the effective scale K = γ·α·L",
    "p_star": "post hoc Schatten index p* ∈ 𝒫_m minimising 𝒯(W;p) (0: the term counts the rank)",
    "log10_T_star": "log10 of the matrix's term 𝒯*(W) = min_p 𝒯(W;p) in B_ours",
    "log10_T0": "log10 of 𝒯(W;0) = √(rank·N)",
}

#: The columns of ``bounds-lib compare`` (:meth:`bounds_lib.analysis.compare.ModelComparison.rows`).
COMPARE_COLUMNS = {
    "rank_of_change": "1 = the matrix that changed most (by rel_change_fro)",
    "layer": COLUMNS["layer"], "head": COLUMNS["head"], "kind": COLUMNS["kind"], "tensors": COLUMNS["tensors"],
    "rel_change_fro": "‖W_B − W_A‖_F / ‖W_A‖_F",
    "rel_change_spec": "‖W_B − W_A‖₂ / ‖W_A‖₂",
    "abs_change_fro": "‖W_B − W_A‖_F",
    "abs_change_spec": "‖W_B − W_A‖₂",
    "sigma_shift": "max_i |σ_i(B) − σ_i(A)| / σ₁(A) (≤ rel_change_spec by Weyl's inequality)",
    "effective_rank_a": "effective rank exp(entropy of σ/Σσ) of A (Roy & Vetterli)",
    "effective_rank_b": "the same of B",
    "top_k": "size k of the top singular subspaces compared",
    "subspace_overlap": "‖U_Aᵀ U_B‖_F²/k: mean cos² of the principal angles of the top-k left singular "
                        "subspaces (1 = same directions)",
    "max_principal_angle_deg": "largest principal angle between those subspaces, in degrees",
    "p_star_a": "p* of the matrix in A", "p_star_b": "p* in B",
    "log10_T_star_a": "log10 𝒯* in A", "log10_T_star_b": "log10 𝒯* in B",
    "delta_log10_T_star": "log10 𝒯* in B minus in A",
}


def columns_help(columns: dict) -> str:
    """``name: meaning`` lines, for an ``--help`` epilog."""
    return "\n".join(f"  {k}: {v}" for k, v in columns.items())


def matrix_tensors(spec, layer: int, kind: str, head: int = -1) -> str:
    """The stored tensors ``kind`` (``QK``, ``V``, ``M_in``, ``M_out``) of ``layer`` is built from, with the
    rows of head ``head`` (``nn.Linear`` layouts: ``q[rows]ᵀ k[rows]``).

    >>> from bounds_lib.checkpoints import random_bert_state_dict, detect_architecture, open_checkpoint
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> spec = detect_architecture(open_checkpoint(sd, config=cfg))
    >>> matrix_tensors(spec, 0, "QK", 1)
    'encoder.layer.0.attention.self.query.weight[4:8] · encoder.layer.0.attention.self.key.weight[4:8]'
    >>> matrix_tensors(spec, 0, "M_out")
    'encoder.layer.0.output.dense.weight'
    """
    names = spec.tensor_names(layer)
    if kind in ("M_in", "M_out"):
        return " + ".join(names[r] for r in part_roles(spec, kind))
    roles = part_roles(spec, "attention")
    d = spec.head_dim
    if "qkv" in roles:  # fused projections: the head's slice is described, not its rows
        return f"{names['qkv']} (head {head}) · {names['o']} (head {head})"
    q_rows = f"[{head * d}:{(head + 1) * d}]"
    g = spec.kv_group(head)
    kv_rows = f"[{g * d}:{(g + 1) * d}]"
    if kind == "QK":
        return f"{names['q']}{q_rows} · {names['k']}{kv_rows}"
    return f"{names['v']}{kv_rows} · {names['o']}[:, {head * d}:{(head + 1) * d}]"


def report_rows(report) -> list:
    """One row per matrix of ``report``: :meth:`~bounds_lib.analysis.scoring.MatrixScore.to_row` with ``tensors``
    after ``kind`` (the columns of :data:`COLUMNS`, in that order)."""
    rows = []
    for m in report.matrices:
        row = m.to_row()
        kind = (m.matrix_type, m.expert) if m.expert is not None else m.matrix_type
        tensors = (matrix_tensors(report.arch, m.layer, m.matrix_type, m.head) if m.expert is None
                   else " + ".join(report.arch.tensor_names(m.layer)[r] for r in part_roles(report.arch, kind)))
        rows.append({k: row[k] for k in ("layer", "head", "expert", "kind")} | {"tensors": tensors}
                    | {k: v for k, v in row.items() if k not in ("layer", "head", "expert", "kind")})
    return rows


def spectra_rows(spectra, long: bool = False) -> list:
    """Every singular value of ``spectra`` (:class:`~bounds_lib.analysis.spectra.ModelSpectra`), with tensor names.

    ``long=False``: one dict per matrix (``layer``, ``head``, ``expert``, ``kind``, ``tensors``, ``sigma``: the
    list, descending). ``long=True``: one dict per singular value (``sigma`` one number, ``i`` its index from 1),
    the long format a data frame or a spreadsheet filters by column.

    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.spectra import compute_spectra
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    >>> sp = compute_spectra(sd, config=cfg)
    >>> len(spectra_rows(sp, long=True)) == sum(m.sigma.size for m in sp.matrices)
    True
    """
    rows = []
    for m in spectra.matrices:
        tensors = (matrix_tensors(spectra.arch, m.layer, m.matrix_type, m.head) if m.expert is None
                   else f"{m.matrix_type} of expert {m.expert}")
        head = {"layer": m.layer, "head": m.head if m.head >= 0 else "",
                "expert": "" if m.expert is None else m.expert, "kind": m.matrix_type, "tensors": tensors}
        if long:
            rows += [head | {"i": i, "sigma": float(v)} for i, v in enumerate(m.sigma, 1)]
        else:
            rows.append(head | {"sigma": m.sigma.tolist()})
    return rows


def _full_rank(m, spec) -> int:
    return min(spec.head_dim, spec.hidden) if m.head >= 0 else min(m.shape)


def architecture_alone(report) -> dict:
    """Whether ``B_ours`` of ``report`` depends on the architecture alone, and a sentence saying what it means.

    Returns ``{"all_p_star_zero", "all_full_rank", "architecture_alone", "statement"}``: when every
    ``p* = 0`` each term is ``𝒯(W;0) = √(rank·N)``; when moreover every matrix has full numerical rank
    (``d_h`` for a head product, ``min(rows, cols)`` otherwise) ``B_ours`` is fixed by ``L, N, H, d_h,
    d_ff`` — any weights of this shape at full rank give the same value.

    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> from bounds_lib.analysis.scoring import analyze
    >>> sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> architecture_alone(analyze(sd, config=cfg))["architecture_alone"]
    True
    """
    spec = report.arch
    zero = bool(np.all(report.p_stars == 0.0))
    full = all(m.rank == _full_rank(m, spec) for m in report.matrices)
    if zero and full:
        text = ("every p* = 0 and every matrix has full numerical rank, so every term is √(rank·N) and B_ours is "
                f"a function of the architecture alone (L={spec.n_layers}, N={spec.hidden}, H={spec.n_heads}, "
                f"d_h={spec.head_dim}, d_ff={spec.d_ff}): any weights of this shape give the same value, and it "
                "cannot tell two checkpoints of this architecture apart")
    elif zero:
        text = ("every p* = 0, so every term is √(rank·N): B_ours counts numerical ranks (no weight magnitude "
                "enters); some matrices are below full rank")
    else:
        n = int(np.sum(report.p_stars > 0))
        text = (f"{n} of {len(report.matrices)} matrices have p* > 0: their terms depend on the weights' "
                "spectra, not only on the architecture")
    return {"all_p_star_zero": zero, "all_full_rank": full, "architecture_alone": zero and full, "statement": text}


def effective_rank(sigma) -> float:
    """Roy & Vetterli's effective rank ``exp(−Σ q_i log q_i)``, ``q_i = σ_i / Σ_j σ_j`` (0 for a zero matrix).

    >>> effective_rank([2.0, 2.0, 0.0])
    2.0
    """
    s = np.asarray(sigma, dtype=np.float64)
    total = s.sum()
    if total <= 0:
        return 0.0
    q = s[s > 0] / total
    return float(np.exp(-np.sum(q * np.log(q))))


def _quantities(report, spectra=None) -> dict:
    """Per matrix: its rank relative to its full rank (the effective rank when ``spectra`` are given, else the
    numerical rank), stable rank, and the term's share of Σ 𝒯*."""
    log_t = np.array([m.log_T_star for m in report.matrices])
    share = np.exp(log_t - np.logaddexp.reduce(log_t))
    if spectra is None:
        ranks = ("rank_fraction", [m.rank for m in report.matrices])
    else:
        ranks = ("effective_rank_fraction", [effective_rank(m.sigma) for m in spectra.matrices])
    full = [_full_rank(m, report.arch) for m in report.matrices]
    return {ranks[0]: np.array(ranks[1]) / np.array(full),
            "stable_rank": np.array([m.stable_rank for m in report.matrices]),
            "term_share": share}


def standouts(report, n: int = 10, spectra=None) -> list:
    """The ``n`` (matrix, quantity) pairs furthest from the median of their kind, by ``|log10(value / median)|``.

    **Descriptive**: it ranks what differs most from the other matrices of the same kind (``QK``, ``V``,
    ``M_in``, ``M_out``) on the paper's quantities — the rank relative to the matrix's full rank
    (``effective_rank_fraction`` when the report's ``spectra`` are given, else ``rank_fraction``, the
    numerical rank's), ``stable_rank`` and ``term_share`` (the matrix's share of ``Σ 𝒯*``) — and claims nothing
    about quality. Each entry: ``label``, ``layer``, ``head``, ``kind``, ``quantity``, ``value``,
    ``median_of_kind``, ``log10_ratio``.
    """
    q = _quantities(report, spectra)
    kinds = np.array([m.matrix_type for m in report.matrices])
    out = []
    for name, values in q.items():
        for kind in sorted(set(kinds.tolist())):  # np.unique and np.median would import numpy.ma (17 ms)
            idx = np.flatnonzero(kinds == kind)
            med = _median(values[idx])
            for i in idx:
                v = float(values[i])
                ratio = math.log10(v / med) if v > 0 and med > 0 else (0.0 if v == med else math.inf)
                m = report.matrices[i]
                out.append({"label": f"L{m.layer}.{m.matrix_type}" + (f".h{m.head}" if m.head >= 0 else ""),
                            "layer": m.layer, "head": m.head if m.head >= 0 else None, "kind": kind,
                            "quantity": name, "value": v, "median_of_kind": med, "log10_ratio": ratio})
    out.sort(key=lambda r: -abs(r["log10_ratio"]))
    return out[:n]


def to_dataframe(rows: list):
    """``rows`` (dicts with the same keys) as a ``pandas.DataFrame``; an :class:`ImportError` saying how to
    install pandas when it is missing."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_dataframe needs pandas, an optional extra: pip install 'bounds_lib[pandas]'") from None
    return pd.DataFrame(rows)
