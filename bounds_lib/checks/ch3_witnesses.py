"""Witnesses of Chapter 3: explicit inputs on which each bound of the chapter is (nearly) attained.

The :class:`~bounds_lib.checks.witnesses.Witness` type, and what a witness is, are in
:mod:`bounds_lib.checks.witnesses`. Every ratio here is ``lhs/rhs`` with ``lhs`` computed by the forward
pass of the model (:mod:`bounds_lib.theory.model`, :mod:`bounds_lib.theory.propagation`) and ``rhs`` by the
library's own bound function, the weakened constant passed through its arguments — never a copy.

The witnesses of Chapter 3 rest on one geometric picture (Lemma ``ch03-lem-softmax`` and the proof of
Theorem ``ch03-thm-layer``): three tokens ``e₁, e₂, −e₂`` and ``W_QK = q·diag(−1, 1)``. Row ``e₁`` gives
``e₂`` and ``−e₂`` equal logits (0) and itself ``−q``; rotating every row by a small angle ``θ`` moves
the two equal logits by ``±q sin 2θ``, the softmax is tight at equal weights, the attention row moves
by ``q sin 2θ·‖e₂ − (−e₂)‖/2 ≈ 2qθ``, and the value term ``Σ_s P_ts (x_s − x'_s)`` cancels. The ratio to
``Λ = 1 + 2cq`` is ``2q/(1 + 2q)`` up to ``e^{−q}`` (0.84, 0.94, 0.984 at ``q = 3, 8, 30``), → 1.

The witnesses run at generic scales, so that a slip in an exponent or a factor moved between terms of
a bound function changes the ratio: no quantity that enters a bound is 1. The activation is
``φ(x) = L_φ·x`` (Lipschitz ``L_φ``, linear growth ``B_φ = L_φ``) with ``L_φ = 3``; the Λ head has
``W_V = ½I`` (``VALUE``) and ``W^M = I/(½L_φ)``; every multi-head witness has two unequal heads (the second
with ``QK₂ = 0``, ``Ṽ₂ = ¼I``, ``SECOND``; 0.01 in :func:`multihead_layer_witness`) and ``M_in = 2I``; where an
``M`` piece must see unit rows the values are ``2I`` (``CLIP``), clipped back to the sphere by ``Π_norm``; the
networks are read out by ``w = 1.5·e₂``.

At depth 2, layer 0 is the identity on the three tokens (self-attention ``W_QK = 50·I``: the off-diagonal
weights are ``e^{−50}``) and a perturbation of its value or feed-forward matrix by ``εJ`` (``J`` the
rotation generator) rotates its output rows by ``≈ ε``: exactly the input of the ``Λ`` witness, so the
depth weight ``α⁽⁰⁾ = Λ₁`` — with its softmax constant and ``L_φ`` — is attained. A witness attaining the
QK factors of several layers at once is not known (after one ``Λ``-tight layer only the query row
moves, and it no longer lies on the unit sphere); at every depth the value-path witness
(:func:`alpha_value_path`) attains ``α`` with ``Λ_k = 2`` per layer.
"""
from __future__ import annotations

import math

import numpy as np

from ..theory import propagation as P
from ..theory.model import softmax_rows
from .witnesses import WEAKEN, Witness, witness

__all__ = [
    "softmax_witness",
    "logit_witness",
    "layer_qk_witness",
    "layer_value_witness",
    "multihead_layer_witness",
    "multihead_value_witness",
    "perturbation_witness",
    "alpha_value_path",
    "multihead_gamma_witness",
    "composition_witness",
    "multihead_composition_witness",
    "multihead_perturbation_witness",
    "chapter3_witnesses",
]

# ---------------------------------------------------------------- building blocks

#: ``L_φ`` of the witnesses' activation ``φ(x) = L_φ·x`` (≠ 1, so that dropping it is seen).
LPHI = 3.0
#: ``C(M_in)`` of the multi-head witnesses (≠ 1, so that dropping it from ``γ_{M_out}`` is seen).
MIN = 2.0
#: ``C(W_V)`` of the Λ head (``W_V = v·I``, ``W^M = I/(v·L_φ)``: rows stay unclipped, a slip in ``C_V`` is seen).
VALUE = 0.5
#: ``C(Ṽ₂)`` of the second head of every multi-head witness (``QK₂ = 0``): the heads differ.
SECOND = 0.25
#: ``C(W_V)`` where an ``M`` piece must see unit rows: ``W_V = 2·I``, clipped back to the sphere by ``Π_norm``.
CLIP = 2.0
_J = np.array([[0.0, 1.0], [-1.0, 0.0]])   # the rotation generator: x·J ⊥ x
_E1, _E2 = np.eye(2)
_TOKENS = np.array([_E1, _E2, -_E2])       # e₁ (the query, read out), e₂, −e₂
_SELF = 50.0                               # W_QK = 50·I: layer 0 attends to each token itself (weights e^{-50})
_W = 1.5 * _E2                             # the readout w: ‖w‖₂ = 1.5 (≠ 1: a bound that drops it is seen)


def _phi(L_phi):
    return lambda x: L_phi * x


def _rotation(theta):
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, s], [-s, c]])


def _qk(q):
    return q * np.diag([-1.0, 1.0])


def _norm(A):
    return float(np.linalg.norm(A, 2))


def _rows_dist(A, B):
    """``‖A − B‖_{2→∞}``: the largest row norm of the difference."""
    return float(np.max(np.linalg.norm(np.asarray(A) - np.asarray(B), axis=-1)))


# ---------------------------------------------------------------- Chapter 3: softmax and logits

def softmax_witness(deltas=(1.0, 0.1, 0.01, 0.001)) -> Witness:
    """Lemma ``ch03-lem-softmax``: ``z = 0``, ``z' = (δ, −δ)``; ``‖Δsoftmax‖₁ = tanh δ`` against ``c·δ``.

    The ratio ``tanh(δ)/δ → 1`` as ``δ → 0``: the constant ``c = 1`` is attained; ``c·0.9`` is broken.
    """
    def case(d, c=P.SOFTMAX_LINF_L1_TIGHT):
        z, z2 = np.zeros((1, 2)), np.array([[d, -d]])
        lhs = float(np.abs(softmax_rows(z) - softmax_rows(z2)).sum())
        return lhs, c * float(np.max(np.abs(z - z2)))

    return witness("softmax ℓ∞→ℓ1 (c = 1)", "ch03-lem-softmax", "δ", deltas, case,
                   {"c × 0.9": dict(c=WEAKEN * P.SOFTMAX_LINF_L1_TIGHT)})


def logit_witness(thetas=(0.1, 0.01, 0.001)) -> Witness:
    """Lemma ``ch03-lem-logits``: ``W = C e₁e₁ᵀ``, ``x_t = x_s = e₁`` moved to ``(1 − θ)e₁``; the logit moves
    by ``C(2θ − θ²)`` against :func:`bounds_lib.theory.propagation.bilinear_logit_bound` ``= 2Cθ``."""
    C = 2.0

    def case(th, factor=2.0):
        W = C * np.outer(_E1, _E1)
        x, x2 = _E1, (1.0 - th) * _E1
        lhs = abs(float(x @ W @ x - x2 @ W @ x2))
        return lhs, P.bilinear_logit_bound(_norm(W), th, factor=factor)

    return witness("bilinear logits (2‖W‖θ)", "ch03-lem-logits", "θ", thetas, case,
                   {"factor 2 × 0.9": dict(factor=2.0 * WEAKEN)})


# ---------------------------------------------------------------- Chapter 3: Λ (single head, multi-head)

def _heads(q, second):
    """The Λ block's heads: ``QK = q·diag(−1,1)``, ``Ṽ = VALUE·I``; with ``second`` (multi-head) a second head
    ``QK₂ = 0``, ``Ṽ₂ = second·I``. Returns ``(QK, V, M_in, M_out)`` with ``M_out = I/(L_φ C(M_in) Σ_h C(Ṽ_h))``:
    one token stays on the unit sphere, unclipped."""
    QK, V = [_qk(q)], [VALUE * np.eye(2)]
    if second is not None:
        QK, V = QK + [np.zeros((2, 2))], V + [second * np.eye(2)]
    m = 1.0 if second is None else MIN
    return QK, V, m * np.eye(2), np.eye(2) / (LPHI * m * sum(_norm(v) for v in V))


def _layer_case(q, theta, second=None, c=P.SOFTMAX_LINF_L1_TIGHT, L_phi=1.0, C_Min=1.0, C_Mout=1.0, C_V=1.0,
                C_QK=1.0, head_sum=True, X=_TOKENS):
    """The Λ witness block (:func:`_heads`), ``φ = L_φ·x``; inputs ``X`` rotated by ``θ``. Keyword factors
    multiply the norms passed to the bound (1: the bound itself); ``second=None``: the single-head Λ."""
    QK, V, Mi, Mo = _heads(q, second)
    X2 = X @ _rotation(theta)
    f = lambda Z: P.multihead_block_forward(Z, QK, V, Mi, Mo, _phi(LPHI))  # noqa: E731
    lhs = _rows_dist(f(X), f(X2))
    CV = np.array([[C_V * _norm(v) for v in V]])
    CQ = np.array([[C_QK * _norm(k) for k in QK]])
    if not head_sum:   # Σ_h replaced by max_h (the Λ head is the larger)
        CV, CQ = CV[:, :1], CQ[:, :1]
    if second is not None:
        lam = np.exp(P.log_layer_lipschitz_multihead([C_Min * _norm(Mi)], [C_Mout * _norm(Mo)], CV, CQ,
                                                     L_phi * LPHI, c))[0]
    else:
        lam = np.exp(P.log_layer_lipschitz(C_Mout * _norm(Mo), CV[0, 0], CQ[0, 0], L_phi * LPHI, c))
    return lhs, float(lam) * _rows_dist(X, X2)


_THETA = 1e-7


def _eps(piece, q):
    """The perturbation's size: a QK perturbation moves the logits by ``ε`` (1e-6: first order, and far above
    rounding); the others rotate rows that the Λ-witness layer turns into logit moves of ``≈ 2qε``."""
    return 1e-6 if piece == "QK" else _THETA / q


def layer_qk_witness(qs=(3.0, 8.0, 30.0, 1000.0)) -> Witness:
    """Theorem ``ch03-thm-layer`` in its QK factor: ratio ``2q/(1 + 2q) → 1`` (``e₁, e₂, −e₂`` rotated;
    ``W_V = ½I``, ``W^M = I/(½L_φ)``, ``L_φ = 3``)."""
    def case(q, **kw):
        return _layer_case(q, _THETA / q, **kw)

    weak = {"c × 0.9": dict(c=WEAKEN), "c = ½": dict(c=0.5), "L_φ × 0.9": dict(L_phi=WEAKEN),
            "L_φ dropped": dict(L_phi=1.0 / LPHI), "C_M × 0.9": dict(C_Mout=WEAKEN),
            "C_V × 0.9": dict(C_V=WEAKEN), "C_QK × 0.9": dict(C_QK=WEAKEN)}
    return witness("Λ, single head, QK factor", "ch03-thm-layer", "q", qs, case, weak)


def layer_value_witness(thetas=(0.1, 0.01, 0.001)) -> Witness:
    """Theorem ``ch03-thm-layer`` in its value path (``T = 1``, ``W_QK = 0``): one token ``e₁`` rotated by
    ``θ``; ``W_V = ½I``, ``W^M = I/(½L_φ)``: the block is ``x ↦ x`` on the unit sphere, the ratio 1."""
    def case(th, c=P.SOFTMAX_LINF_L1_TIGHT, L_phi=1.0, C_M=1.0, C_V=1.0):
        V, Mo = VALUE * np.eye(2), np.eye(2) / (VALUE * LPHI)
        X, X2 = _E1[None], (_E1 @ _rotation(th))[None]
        f = lambda Z: P.multihead_block_forward(Z, [np.zeros((2, 2))], [V], np.eye(2), Mo, _phi(LPHI))  # noqa: E731
        lam = np.exp(P.log_layer_lipschitz(C_M * _norm(Mo), C_V * _norm(V), 0.0, L_phi * LPHI, c))
        return _rows_dist(f(X), f(X2)), float(lam) * _rows_dist(X, X2)

    weak = {"L_φ × 0.9": dict(L_phi=WEAKEN), "C_M × 0.9": dict(C_M=WEAKEN), "C_V × 0.9": dict(C_V=WEAKEN)}
    return witness("Λ, single head, value path", "ch03-thm-layer", "θ", thetas, case, weak, reach=1 - 1e-9)


def multihead_layer_witness(qs=(3.0, 8.0, 30.0, 1000.0), second=0.01) -> Witness:
    """Lemma ``ch03-lem-layer-mh`` on unequal heads: the Λ witness head (``Ṽ₁ = ½I``) and a head with
    ``QK₂ = 0``, ``Ṽ₂ = second·I`` (0.01: the construction that breaks a Λ mixing the heads,
    ``(Σ_h C(Ṽ_h))(1 + 2c·mean_h C(QK_h))``), ``M_in = 2I``, ``M_out = I/(2L_φ Σ_h C(Ṽ_h))``; ratio → 1."""
    def case(q, **kw):
        return _layer_case(q, _THETA / q, second, **kw)

    weak = {"c × 0.9": dict(c=WEAKEN), "c = ½": dict(c=0.5), "L_φ × 0.9": dict(L_phi=WEAKEN),
            "L_φ dropped": dict(L_phi=1.0 / LPHI), "C(M_in) × 0.9": dict(C_Min=WEAKEN),
            "C(M_out) × 0.9": dict(C_Mout=WEAKEN), "C(Ṽ_h) × 0.9": dict(C_V=WEAKEN),
            "C(QK_h) × 0.9": dict(C_QK=WEAKEN)}
    return witness("Λ, 2 unequal heads", "ch03-lem-layer-mh", "q", qs, case, weak)


def multihead_value_witness(thetas=(0.1, 0.01, 0.001), second=SECOND) -> Witness:
    """Lemma ``ch03-lem-layer-mh`` in its value path: one token ``e₁`` rotated by ``θ``, two heads with
    ``QK_h = 0`` and ``Ṽ₁ = ½I``, ``Ṽ₂ = ¼I``: the block is ``x ↦ x`` on the sphere and ``Λ = 1``, ratio 1. The
    head sum is seen: Σ_h replaced by max_h (or a mean) is broken."""
    def case(th, **kw):
        return _layer_case(0.0, th, second, X=_E1[None], **kw)

    weak = {"Σ_h → max_h": dict(head_sum=False), "C(Ṽ_h) × 0.9": dict(C_V=WEAKEN), "L_φ × 0.9": dict(L_phi=WEAKEN)}
    return witness("Λ, 2 unequal heads, value path", "ch03-lem-layer-mh", "θ", thetas, case, weak, reach=1 - 1e-9)


# ---------------------------------------------------------------- Chapter 3: networks (γ, α, composition)

def _single_layers(depth, q, eps, piece, lphi=LPHI):
    """Single-head networks as multi-head ones with one head and ``M_in = I`` (the same block).

    Depth 1: the Λ-witness block (``piece = "QK"``: ``ΔW_QK = ε e₁ᵀe₂``), or, for ``V``/``M``, a block
    with ``W_QK = 0`` read on one token. Depth 2: layer 0 the identity on the tokens, perturbed in
    ``piece ∈ {V, M}`` by ``εJ``; layer 1 the Λ-witness block. ``W_V = ½I``, ``W^M = I/(½L_φ)`` where
    ``V`` is perturbed (rows unclipped); ``W_V = 2I`` (rows clipped to the sphere, ``φ`` sees unit rows),
    ``W^M = I/(2L_φ)`` at depth 1 and ``I/L_φ`` at depth 2 where ``M`` is.
    """
    V, Mo = VALUE * np.eye(2), np.eye(2) / (VALUE * lphi)
    wit = ([_qk(q)], [V], np.eye(2), Mo)
    if depth == 1 and piece == "QK":
        hat = ([_qk(q) + eps * np.outer(_E1, _E2)], [V], np.eye(2), Mo)
        return [wit], [hat], _TOKENS, _W
    if piece == "M":
        V0, Mo0 = CLIP * np.eye(2), np.eye(2) / (lphi * (CLIP if depth == 1 else 1.0))
    else:
        V0, Mo0 = V, Mo
    QK0 = np.zeros((2, 2)) if depth == 1 else _SELF * np.eye(2)
    lay = ([QK0], [V0], np.eye(2), Mo0)
    hat = ([QK0], [V0 + eps * _J * (piece == "V")], np.eye(2), Mo0 + eps * _J * (piece == "M"))
    if depth == 1:
        return [lay], [hat], _E1[None], _W
    return [lay, wit], [hat, wit], _TOKENS, _W


def _delta_norms(layers, hat):
    return [([_norm(a - b) for a, b in zip(L[0], Lh[0])], [_norm(a - b) for a, b in zip(L[1], Lh[1])],
             _norm(L[2] - Lh[2]), _norm(L[3] - Lh[3])) for L, Lh in zip(layers, hat)]


def _perturbation_rhs(layers, hat, w, L_phi, phi_bound, c, released=False, single=False):
    """``‖w‖₂ Σ_j γ_j α^{(ℓ)} ‖ΔW_j‖₂`` with γ, α of :mod:`bounds_lib.theory.propagation` from the norms of ``layers``.

    ``single=True``: Theorem ``ch03-thm-param`` (single-head γ, :func:`~bounds_lib.theory.propagation.log_gamma`,
    ``W^M = M_out``); otherwise the multi-head γ (:func:`~bounds_lib.theory.propagation.log_gamma_multihead`,
    the released one with ``released=True``). α from the (multi-head) Λ with ``L_phi`` and ``c``.
    """
    CQ = np.array([[_norm(q) for q in lay[0]] for lay in layers])
    CV = np.array([[_norm(v) for v in lay[1]] for lay in layers])
    Cmi, Cmo = np.array([_norm(lay[2]) for lay in layers]), np.array([_norm(lay[3]) for lay in layers])
    if single:
        la = P.log_alpha(P.log_layer_lipschitz(Cmo, CV[:, 0], CQ[:, 0], L_phi, c))
    else:
        la = P.log_alpha(P.log_layer_lipschitz_multihead(Cmi, Cmo, CV, CQ, L_phi, c))
    D = _delta_norms(layers, hat)
    total = 0.0
    for ell, (dq, dv, dmi, dmo) in enumerate(D):
        a = float(np.linalg.norm(w)) * math.exp(la[ell])
        if single:
            g = P.log_gamma(Cmo[ell], CV[ell, 0], CQ[ell, 0], L_phi=None if released else L_phi,
                            softmax_const=c, phi_bound=phi_bound)
            total += a * (math.exp(g["QK"]) * dq[0] + math.exp(g["V"]) * dv[0] + math.exp(g["M"]) * dmo)
            continue
        g = (P.log_gamma_multihead(Cmi[ell], Cmo[ell], CV[ell], CQ[ell], softmax_const=c) if released else
             P.log_gamma_multihead(Cmi[ell], Cmo[ell], CV[ell], CQ[ell], L_phi=L_phi, softmax_const=c,
                                   phi_bound=phi_bound))
        total += a * (float(np.sum(np.exp(g["QK"]) * dq)) + float(np.sum(np.exp(g["V"]) * dv))
                      + math.exp(g["M_in"]) * dmi + math.exp(g["M_out"]) * dmo)
    return total


def _lhs(layers, hat, X, w):
    phi = _phi(LPHI)
    return abs(float(P.multihead_forward(layers, w, X, phi) - P.multihead_forward(hat, w, X, phi)))


_PERT = {"QK": "γ^QK", "V": "γ^V", "M": "γ^M = B_φ"}


def _softmax_weakenings(piece, depth, whole=True):
    """The weakenings every network witness shares: the whole bound × 0.9 (``whole``), the softmax constant
    × 0.9 where it enters (a QK piece, or α at depth 2), and α computed with ``c = ½`` at depth 2."""
    weak = {"the bound × 0.9": dict(scale=WEAKEN)} if whole else {}
    if piece == "QK" or depth > 1:
        weak["c × 0.9"] = dict(c=WEAKEN)
    if depth > 1:
        weak["α with c = ½"] = dict(c=0.5)
    return weak


def perturbation_witness(piece, depth, qs=(3.0, 8.0, 30.0, 1000.0)) -> Witness:
    """Theorem ``ch03-thm-param`` (single head) at depth 1 (``piece`` QK, V or M) or depth 2 (V or M of
    layer 0, amplified by ``α⁽⁰⁾ = Λ₁`` of the Λ-witness layer). The parameter is ``q`` of the
    QK-tight block (``ε = 10⁻⁷/q``); the value-path cases at depth 1 have ratio 1 at every ``q``.
    Weakened: the softmax constant, ``L_φ``, ``B_φ`` (×0.9, or dropped: the released γ)."""
    if (piece, depth) not in {("QK", 1), ("V", 1), ("M", 1), ("V", 2), ("M", 2)}:
        raise ValueError(f"no witness for piece {piece!r} at depth {depth}: QK, V, M at depth 1; V, M at 2")

    def case(q, c=P.SOFTMAX_LINF_L1_TIGHT, L_phi=1.0, phi_bound=1.0, released=False):
        layers, hat, X, w = _single_layers(depth, q, _eps(piece, q), piece)
        rhs = _perturbation_rhs(layers, hat, w, L_phi * LPHI, phi_bound * LPHI, c, released, single=True)
        return _lhs(layers, hat, X, w), rhs

    weak = {"L_φ × 0.9": dict(L_phi=WEAKEN)} if (piece != "M" or depth > 1) else {}
    weak.update(_softmax_weakenings(piece, depth, whole=False))
    if piece == "M":
        weak["B_φ × 0.9"] = dict(phi_bound=WEAKEN)
    weak["released γ (no L_φ)"] = dict(released=True)
    where = f"{_PERT[piece]}" + (", α⁽⁰⁾ = Λ₁" if depth > 1 else "")
    return witness(f"parameter perturbation, depth {depth}, {where}", "ch03-thm-param", "q", qs, case, weak)


def alpha_value_path(depths=(1, 2, 3, 6, 12), gain=2.0) -> Witness:
    """``α⁽⁰⁾ = Π_{k≥1} Λ_k`` at every depth, in the value path: one token ``e₁``, ``W_QK = 0`` everywhere,
    ``φ = L_φ x``. Layer 0 (``W_V = ½I``, ``W^M = s₀I/(½L_φ)``, ``s₀ = gain^{−(L−1)}/2``) shrinks its row to
    norm ``s₀``; every later layer (``W_V = gain·I``, ``W^M = I/L_φ``) multiplies it by ``Λ_k = gain`` exactly
    while the rows stay inside the unit ball (the last one ends at norm 1/2). Layer 0's ``W_V`` is
    perturbed by ``εJ``; the ratio to ``‖w‖γ^Vα⁽⁰⁾‖ΔW_V‖`` is 1 (to rounding) at every depth. Weakened:
    ``L_φ``, ``C_V`` per layer (α shrinks by ``0.9^{L−1}``) and α with one layer fewer."""
    def case(L, L_phi=1.0, C_V=1.0, drop_layer=False):
        eps, Z, s0 = 1e-9, np.zeros((2, 2)), 0.5 * gain ** -(L - 1)
        first = ([Z], [VALUE * np.eye(2)], np.eye(2), s0 * np.eye(2) / (VALUE * LPHI))
        lay = ([Z], [gain * np.eye(2)], np.eye(2), np.eye(2) / LPHI)
        layers = [first] + [lay] * (L - 1)
        hat = [([Z], [VALUE * np.eye(2) + eps * _J], np.eye(2), first[3])] + [lay] * (L - 1)
        CV = C_V * np.array([[VALUE]] + [[gain]] * (L - 1))
        Cmo = np.array([s0 / (VALUE * LPHI)] + [1.0 / LPHI] * (L - 1))
        la = P.log_alpha(P.log_layer_lipschitz_multihead(np.ones(L), Cmo, CV, np.zeros((L, 1)), L_phi * LPHI,
                                                         P.SOFTMAX_LINF_L1_TIGHT))
        log_a = la[1] if (drop_layer and L > 1) else la[0]
        g = P.log_gamma_multihead(1.0, Cmo[0], CV[0, 0], 0.0, L_phi=L_phi * LPHI, softmax_const=1.0)
        rhs = float(np.linalg.norm(_W)) * math.exp(g["V"] + log_a) * _norm(eps * _J)
        return _lhs(layers, hat, _E1[None], _W), rhs

    weak = {"L_φ × 0.9": dict(L_phi=WEAKEN), "C_V × 0.9": dict(C_V=WEAKEN),
            "α with one layer fewer": dict(drop_layer=True)}
    return witness(f"α⁽⁰⁾ at every depth, value path (Λ_k = {gain:g})", "ch03-def-weights", "L", depths, case,
                   weak, reach=1 - 1e-6)


def multihead_gamma_witness(piece, qs=(3.0, 8.0, 30.0, 1000.0)) -> Witness:
    """Lemma ``ch03-lem-gamma-mh`` for ``piece ∈ {QK, V, M_in, M_out}``: one block of the multi-head witnesses (two
    unequal heads, ``M_in = 2I``, ``φ = L_φ x``). QK: the Λ-witness tokens with ``ΔQK_1 = ε e₁ᵀe₂`` (ratio
    → 1 as ``q → ∞``); the others on one token ``e₁`` with a rotation-generator perturbation (ratio 1 to
    first order). The released γ (no ``L_φ``, ``γ_{M_out} = 1``) is broken."""
    if piece not in ("QK", "V", "M_in", "M_out"):
        raise ValueError(f"piece must be one of QK, V, M_in, M_out, got {piece!r}")

    def case(q, c=P.SOFTMAX_LINF_L1_TIGHT, L_phi=1.0, phi_bound=1.0, released=False):
        layers, hat, X, _ = _mh_layers(1, q, _eps(piece, q), piece)
        phi = _phi(LPHI)
        lhs = _rows_dist(P.multihead_block_forward(X, *layers[0], phi), P.multihead_block_forward(X, *hat[0], phi))
        rhs = _perturbation_rhs(layers, hat, np.ones(1), L_phi * LPHI, phi_bound * LPHI, c, released)
        return lhs, rhs

    weak = {"released γ": dict(released=True)}
    if piece != "M_out":
        weak["L_φ × 0.9"] = dict(L_phi=WEAKEN)
    else:
        weak["B_φ × 0.9"] = dict(phi_bound=WEAKEN)
    if piece == "QK":
        weak["c × 0.9"] = dict(c=WEAKEN)
    return witness(f"multi-head γ_{piece}", "ch03-lem-gamma-mh", "q", qs, case, weak)


def composition_witness(piece, depth, qs=(3.0, 8.0, 30.0, 1000.0)) -> Witness:
    """Theorem ``ch03-thm-compose`` (:func:`bounds_lib.theory.propagation.composition_bound`, identity activation,
    ``L_φ = 1``): the networks of :func:`perturbation_witness` with ``L_φ = 1``, the distances measured on
    the rows entering each piece. Depth 2 attains ``α⁽⁰⁾ = Λ₁``: the softmax constant in α is seen."""
    from ..theory import model as M

    def case(q, c=P.SOFTMAX_LINF_L1_TIGHT, scale=1.0):
        layers, hat, X, w = _single_layers(depth, q, _eps(piece, q), piece, lphi=1.0)
        nets = [M.SingleHeadTransformer(tuple(M.Block(lay[0][0], lay[1][0], lay[3]) for lay in ls), w, act="identity")
                for ls in (layers, hat)]
        lhs, rhs, _, _ = P.composition_bound(nets[0], nets[1], X, softmax_const=c)
        return lhs, scale * rhs

    return witness(f"composition, depth {depth}, piece {piece}", "ch03-thm-compose", "q", qs, case,
                   _softmax_weakenings(piece, depth))


def _mh_layers(depth, q, eps, piece):
    """Multi-head versions of :func:`_single_layers`, on two unequal heads: the Λ-witness layer is
    :func:`_heads` (``Ṽ₁ = ½I``, ``Ṽ₂ = ¼I``, ``QK₂ = 0``); where ``M_in`` or ``M_out`` is perturbed both
    ``Ṽ_h`` are scaled by ``CLIP/VALUE`` = 4 (``2I`` and ``I``: rows clipped to the sphere, so ``M_in`` sees
    unit rows) and ``M_out = I/(L_φ C(M_in))``."""
    QK, V, Mi, Mo = _heads(q, SECOND)
    if piece in ("M_in", "M_out"):
        V, Mo = [v * CLIP / VALUE for v in V], np.eye(2) / (LPHI * MIN)
    Z = [np.zeros((2, 2))] * 2

    def bump(lay, k, h=0):
        lay = [list(lay[0]), list(lay[1]), lay[2], lay[3]]
        if k < 2:
            lay[k][h] = lay[k][h] + (eps * np.outer(_E1, _E2) if k == 0 else eps * _J)
        else:
            lay[k] = lay[k] + eps * _J
        return tuple(lay)

    k = {"QK": 0, "V": 1, "M_in": 2, "M_out": 3}[piece]
    wit = _heads(q, SECOND)
    if depth == 1 and piece == "QK":
        return [wit], [bump(wit, 0)], _TOKENS, _W
    if depth == 1:
        lay = (Z, V, Mi, Mo)
        return [lay], [bump(lay, k)], _E1[None], _W
    ident = ([_SELF * np.eye(2)] * 2, V, Mi, Mo)
    return [ident, wit], [bump(ident, k), wit], _TOKENS, _W


def multihead_composition_witness(piece, depth, qs=(3.0, 8.0, 30.0, 1000.0)) -> Witness:
    """Theorem ``ch03-thm-compose-mh`` (:func:`bounds_lib.theory.propagation.multihead_composition_bound`), two
    heads, ``φ = L_φ x`` with ``L_φ = 3``: depth 1 (every piece) and depth 2 (``V``, ``M_in``, ``M_out`` of
    layer 0 amplified by ``α⁽⁰⁾ = Λ₁``). Weakened: the whole bound, the softmax constant (in γ_QK and α),
    ``L_φ`` (×0.9 and dropped)."""
    if depth not in (1, 2) or piece not in ("QK", "V", "M_in", "M_out") or (depth == 2 and piece == "QK"):
        raise ValueError(f"no witness for piece {piece!r} at depth {depth}")

    def case(q, c=P.SOFTMAX_LINF_L1_TIGHT, L_phi=1.0, scale=1.0):
        layers, hat, X, w = _mh_layers(depth, q, _eps(piece, q), piece)
        lhs, rhs = P.multihead_composition_bound(layers, hat, w, X, _phi(LPHI), L_phi * LPHI, c)
        return lhs, scale * rhs

    weak = _softmax_weakenings(piece, depth)
    if piece != "M_out" or depth > 1:
        weak["L_φ × 0.9"] = dict(L_phi=WEAKEN)
        weak["L_φ dropped"] = dict(L_phi=1.0 / LPHI)
    return witness(f"multi-head composition, depth {depth}, piece {piece}", "ch03-thm-compose-mh", "q", qs, case,
                   weak)


def multihead_perturbation_witness(piece, depth, qs=(3.0, 8.0, 30.0, 1000.0)) -> Witness:
    """The multi-head composition with every piece covered on unit rows (eq. ``ch03-eq-K``): the output
    moves by at most ``‖w‖₂ Σ_j γ_j α^{(ℓ)} ‖ΔW_j‖₂`` with ``γ`` of Lemma ``ch03-lem-gamma-mh`` —
    ``γ_{M_out} = B_φ C(M_in)``. The networks of :func:`multihead_composition_witness`; the released
    ``γ`` (``γ_{M_out} = 1``, no ``L_φ``) is broken, at depth 2 through α as well."""
    if depth not in (1, 2) or piece not in ("QK", "V", "M_in", "M_out") or (depth == 2 and piece == "QK"):
        raise ValueError(f"no witness for piece {piece!r} at depth {depth}")

    def case(q, c=P.SOFTMAX_LINF_L1_TIGHT, L_phi=1.0, phi_bound=1.0, released=False):
        layers, hat, X, w = _mh_layers(depth, q, _eps(piece, q), piece)
        rhs = _perturbation_rhs(layers, hat, w, L_phi * LPHI, phi_bound * LPHI, c, released)
        return _lhs(layers, hat, X, w), rhs

    weak = {"released γ": dict(released=True)}
    if piece == "M_out":
        weak["B_φ × 0.9"] = dict(phi_bound=WEAKEN)
    if piece != "M_out" or depth > 1:
        weak["L_φ × 0.9"] = dict(L_phi=WEAKEN)
    weak.update(_softmax_weakenings(piece, depth, whole=False))
    return witness(f"multi-head perturbation (K form), depth {depth}, piece {piece}", "ch03-thm-compose-mh", "q",
                   qs, case, weak)


def chapter3_witnesses() -> list:
    """Every witness of Chapter 3, in the chapter's order."""
    out = [softmax_witness(), logit_witness(), layer_qk_witness(), layer_value_witness(), multihead_layer_witness(),
           multihead_value_witness()]
    out += [perturbation_witness(a, 1) for a in ("QK", "V", "M")] + [perturbation_witness(a, 2) for a in ("V", "M")]
    out.append(alpha_value_path())
    out += [multihead_gamma_witness(a) for a in ("QK", "V", "M_in", "M_out")]
    out += [composition_witness(a, 1) for a in ("QK", "V", "M")] + [composition_witness(a, 2) for a in ("V", "M")]
    out += [multihead_composition_witness(a, 1) for a in ("QK", "V", "M_in", "M_out")]
    out += [multihead_composition_witness(a, 2) for a in ("V", "M_in", "M_out")]
    out += [multihead_perturbation_witness("M_out", d) for d in (1, 2)]
    return out
