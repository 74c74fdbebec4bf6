"""Witnesses: explicit inputs on which a bound is (nearly) attained; those of Chapters 1, 2, 4 and 5.

A falsification search has to *find* the extremal configuration; a **witness** builds it in closed
form, with a parameter (``q → ∞``, ``ε → 0``, ``k → ∞``) along which the ratio ``lhs/rhs`` tends to
the bound's supremum — 1 for a tight bound. Evaluated in milliseconds, a witness also has power
by construction: against a bound with one constant weakened (multiplied by 0.9, or a factor dropped)
its ratio exceeds 1, deterministically. Every ratio here is ``lhs/rhs`` with ``lhs`` computed by the
forward pass of the model (:mod:`bounds_lib.theory.model`, :mod:`bounds_lib.theory.propagation`) and ``rhs`` by the
library's own bound function, the weakened constant passed through its arguments — never a copy.

Every witness runs at generic scales (no quantity that enters its bound equals 1: ``τ = 0.37``,
``σ₁ = 2.5``, ``C_F = 2.5``, ``log K = 1.3``, ``W_V = ½I``, unequal heads), so that a slip in an exponent, a
factor moved between terms or an index changed in a bound function makes some witness fail
(``tests/test_planted_slips.py``). A weakening that only rescales the whole bound is counted apart
(:attr:`Witness.form_changing`).

This module holds the :class:`Witness` type and :func:`witness` (a family of inputs and its ratios),
:func:`witness_table` (a chapter's table of them) and the witnesses of the norm inequalities
(Chapter 1), the split lemmas (Chapter 2), the rounding and shells lemmas (Chapter 4) and the log
factor and Frobenius row of the orders table (Chapter 5); the witnesses of Chapter 3 are in
:mod:`bounds_lib.checks.ch3_witnesses`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..theory import interpolation as I, peeling as PL
from ..theory.norms import NORM_INEQUALITIES
from .ch1_norms import norm_inequality_ratios
from .ch5_theorem import frobenius_row_bound, log_factors
from .harness import VIOLATION_TOL

__all__ = [
    "VIOLATION_TOL",
    "WEAKEN",
    "Witness",
    "witness",
    "norm_witnesses",
    "split_witness",
    "shell_witness",
    "rounding_witness",
    "log_factor_witness",
    "frobenius_row_witness",
    "chapter_witnesses",
    "witness_table",
    "weakening_counts",
]

#: The factor by which a constant is weakened (a tight bound's witness exceeds ``WEAKEN``, so it breaks it).
WEAKEN = 0.9
#: A weakening changes the bound's form when its ratio to the bound's varies along the family by more than
#: this (in log); below it, it rescales the whole bound (rounding in the ratios is ~1e-9).
FORM_RTOL = 1e-6
#: The threshold of the split witnesses and the scale of the norm witnesses' matrices (≠ 1: a slip in an
#: exponent of τ or σ₁ is seen).
TAU, SIGMA_1 = 0.37, 2.5


@dataclass(frozen=True)
class Witness:
    """A family of inputs and the ratios ``lhs/rhs`` of a bound along it.

    ``values`` are the parameter's values, ``ratios`` the ratio at each; ``limit`` the supremum the
    family approaches (1 for a tight bound). ``weakened`` maps the name of a weakened constant to the
    ratios against the bound with that constant weakened (same values): each must exceed 1
    somewhere (``caught``). ``reach`` is the least last ratio that counts as attaining the limit.
    """

    name: str
    label: str
    parameter: str
    values: tuple
    ratios: np.ndarray
    weakened: dict = field(default_factory=dict)
    limit: float = 1.0
    reach: float = 0.98
    note: str = ""

    @property
    def best(self) -> float:
        """The largest ratio of the family."""
        return float(np.max(self.ratios))

    @property
    def holds(self) -> bool:
        """No ratio above ``1 + VIOLATION_TOL``."""
        return bool(np.all(self.ratios <= 1.0 + VIOLATION_TOL))

    @property
    def attained(self) -> bool:
        """The last ratio (the parameter closest to its limit) reaches ``reach``."""
        return bool(self.ratios[-1] >= self.reach)

    @property
    def caught(self) -> dict:
        """Whether the witness violates the bound with each weakened constant (a dict by constant)."""
        return {k: bool(np.max(v) > 1.0 + VIOLATION_TOL) for k, v in self.weakened.items()}

    @property
    def form_changing(self) -> dict:
        """Whether each weakening changes the bound's form, a dict by constant.

        A weakening changes the form when its ratio to the bound's varies along the family. One that
        does not only rescales the whole bound; on a witness that attains the bound it is broken by
        construction and proves nothing beyond "attained"."""
        return {k: bool(np.ptp(np.log(v / self.ratios)) > FORM_RTOL) if len(self.values) > 1 else False
                for k, v in self.weakened.items()}

    @property
    def ok(self) -> bool:
        """The bound holds, the limit is reached and every weakened constant is caught."""
        return self.holds and self.attained and all(self.caught.values())

    def summary(self) -> str:
        """One line: the bound, the ratios along the parameter, the weakened constants caught."""
        along = ", ".join(f"{_fmt(v)}: {r:.4f}" for v, r in zip(self.values, self.ratios))
        caught = self.caught
        weak = (f"; weakened caught {sum(caught.values())}/{len(caught)}" if caught else "")
        flag = "ok" if self.ok else "FAILED"
        return f"{self.name} — {self.parameter} = {along}{weak} [{flag}]"

    def require(self) -> "Witness":
        """Return ``self``, or raise ``AssertionError`` naming what failed (a page asserts this)."""
        bad = []
        if not self.holds:
            bad.append(f"the bound is violated (ratio {self.best:.6g})")
        if not self.attained:
            bad.append(f"the last ratio {self.ratios[-1]:.6g} is below {self.reach:g}")
        bad += [f"the bound with {k} is not broken" for k, v in self.caught.items() if not v]
        if bad:
            raise AssertionError(f"witness of {self.name}: " + "; ".join(bad))
        return self

    def __repr__(self) -> str:
        return self.summary()


def _fmt(v) -> str:
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    return f"{v:g}" if 1e-3 <= abs(v) < 1e4 or v == 0 else f"{v:.0e}"


def witness(name, label, parameter, values, case: Callable, weakenings=None, limit=1.0, reach=0.98,
            note="") -> Witness:
    """Evaluate ``case(value, **kw)`` (returning ``(lhs, rhs)``) along ``values``.

    ``weakenings`` maps a constant's name to the keyword arguments that weaken it in ``case``; the
    weakened ratios are evaluated at the same values.
    """
    def ratios(**kw):
        out = []
        for v in values:
            lhs, rhs = case(v, **kw)
            out.append(lhs / rhs if rhs > 0 else (math.inf if lhs > 0 else 0.0))
        return np.array(out)

    weak = {k: ratios(**kw) for k, kw in (weakenings or {}).items()}
    return Witness(name, label, parameter, tuple(values), ratios(), weak, limit, reach, note)


# ---------------------------------------------------------------- Chapters 1, 2, 4 and 5

#: The matrix on which each inequality of :data:`bounds_lib.theory.norms.NORM_INEQUALITIES` is an equality.
NORM_EQUALITY = {
    "‖W‖₂ ≤ ‖W‖_F": ("rank one e₁e₁ᵀ", lambda: np.outer(np.eye(4)[0], np.eye(5)[0])),
    "‖W‖_F ≤ ‖W‖_*": ("rank one e₁e₁ᵀ", lambda: np.outer(np.eye(4)[0], np.eye(5)[0])),
    "‖W‖_F ≤ √rank ‖W‖₂": ("equal singular values I", lambda: np.eye(4, 5)),
    "‖W‖_* ≤ √rank ‖W‖_F": ("equal singular values I", lambda: np.eye(4, 5)),
    "‖W‖_F ≤ ‖W‖_{2,1}": ("one non-zero column", lambda: np.outer(np.ones(4), np.eye(5)[0])),
    "‖W‖_{2,1} ≤ √m ‖W‖_F": ("equal column norms (all ones)", lambda: np.ones((4, 5))),
    "‖W‖_{2,1} ≤ ‖W‖_{1,1}": ("one entry per column I", lambda: np.eye(4, 5)),
    "‖W‖_{1,1} ≤ √ℓ ‖W‖_{2,1}": ("equal entries per column (all ones)", lambda: np.ones((4, 5))),
    "‖W‖_{2→∞} ≤ ‖W‖₂": ("rank one e₁e₁ᵀ", lambda: np.outer(np.eye(4)[0], np.eye(5)[0])),
    "S_p ≤ rank·σ₁ᵖ (p=1/2)": ("equal singular values I", lambda: np.eye(4, 5)),
    "σ₁ᵖ ≤ S_p (p=1/2)": ("rank one e₁e₁ᵀ", lambda: np.outer(np.eye(4)[0], np.eye(5)[0])),
}


def norm_witnesses() -> list:
    """Chapter 1: every inequality of :data:`~bounds_lib.theory.norms.NORM_INEQUALITIES` is an equality on a
    named matrix, scaled to ``σ₁ = 2.5`` (ratio 1 to rounding), so its right side divided by ``1/0.9`` is broken."""
    if set(NORM_EQUALITY) != set(NORM_INEQUALITIES):
        raise RuntimeError("NORM_EQUALITY must name a witness for every inequality of NORM_INEQUALITIES")
    out = []
    for name, (what, make) in NORM_EQUALITY.items():
        def case(_, weaken=1.0, name=name, make=make):
            return norm_inequality_ratios(SIGMA_1 * make(), weaken)[name], 1.0
        out.append(witness(name, "ch01-norms", what, (0,), case, {"rhs × 0.9": dict(weaken=1.0 / WEAKEN)},
                           reach=1 - 1e-12))
    return out


def split_witness(which, ks=(2, 8, 64, 1024), p=0.5, tau=TAU) -> Witness:
    """Chapter 2, Lemmas ``ch02-lem-rank`` and ``ch02-lem-tail``, with ``τ = 0.37 < σ₁`` (a non-trivial split).

    ``rank``: ``k`` singular values ``τ(1 + 1/k)`` (all above τ), ``rank(W₁) = k`` against
    ``S_p/τ^p = k(1 + 1/k)^p``; ``tail_dim``/``tail_schatten``: ``σ₁ = 2τ`` and ``k − 1`` values ``τ``; the
    ratios ``√((k−1)/k)`` and ``√((k−1)/(2^p + k − 1))`` → 1 as ``k → ∞``; ``W = [diag(σ) 0]`` is ``k × 2k``
    (so ``min(d, d')`` is seen). The bounds are the library's
    :func:`~bounds_lib.theory.interpolation.rank_bound`, :func:`~bounds_lib.theory.interpolation.tail_bound_dimension`
    and :func:`~bounds_lib.theory.interpolation.tail_bound_schatten`."""
    if which not in ("rank", "tail_dim", "tail_schatten"):
        raise ValueError(f"which must be rank, tail_dim or tail_schatten, got {which!r}")

    def case(k, weaken=1.0):
        s = np.full(k, tau * (1 + 1 / k)) if which == "rank" else np.r_[2 * tau, np.full(k - 1, tau)]
        Sp = float(np.sum(s ** p))
        if which == "rank":
            return float(np.count_nonzero(s > tau)), float(I.rank_bound(Sp, tau, p)) / weaken
        f2 = float(np.linalg.norm(s[s <= tau]))
        if which == "tail_dim":
            return f2, float(I.tail_bound_dimension(tau, (k, 2 * k))) / weaken
        return f2, float(I.tail_bound_schatten(tau, Sp, p)) / weaken

    names = {"rank": "rank(W₁) ≤ S_p/τ^p", "tail_dim": "‖W₂‖_F ≤ τ√min(d,d')",
             "tail_schatten": "‖W₂‖_F² ≤ τ^{2−p}S_p"}
    return witness(names[which], "ch02-lem-rank" if which == "rank" else "ch02-lem-tail", "k", ks, case,
                   {"bound × 0.9": dict(weaken=1.0 / WEAKEN)}, reach=0.995)


def shell_witness(Ls=(2, 4, 12, 48), eta=1e-9, qk=1e8) -> Witness:
    """Lemma ``ch04-lem-shells`` for ``α⁽⁰⁾`` itself: its inflation
    (:func:`~bounds_lib.theory.peeling.log_alpha_inflation`) when the ``k = 3(L−1)`` spectral radii of layers
    ``1..L−1`` lie just above a shell boundary, ``r = ρ^{j−1}(1 + η)`` (``C_M ≈ ρ⁻⁵``, ``C_V ≈ ρ³``,
    ``C_QK ≈ qk``, ``L_φ = 3``). ``C_M`` and ``C_V`` grow by ``ρ/(1+η)``; the factor ``1 + 2C_QK`` by
    ``ρ(1 − O(1/C_QK))``: the ratio of ``log`` inflation to ``k log ρ`` → 1 as ``qk → ∞``."""
    def case(L, fewer=0):
        rho = PL.geometric_ratio(L)
        k = 3 * (L - 1)
        near = lambda j: np.full(L, rho ** (j - 1) * (1 + eta))  # noqa: E731
        jq = math.ceil(math.log(qk) / math.log(rho))
        lhs = float(PL.log_alpha_inflation(near(-4), near(4), near(jq), rho, L_phi=3.0))
        return lhs, (k - fewer) * math.log(rho)

    return witness("α⁽⁰⁾ shell inflation ρ^k", "ch04-lem-shells", "L", Ls, case,
                   {"ρ^{k−1} (a radius fewer)": dict(fewer=1)}, reach=0.999)


def rounding_witness(ps=(0.5, 0.1, 0.01, 0.001), log_sigma=2.0, log_K=3.0, N=64, sharp=False) -> Witness:
    """Lemma ``ch04-lem-rounding`` in its ``σ₁``, ``K`` and ``N`` terms: a rank-one ``W`` with ``σ₁ = e^{log_sigma}``
    (so ``log S_p = p log σ₁``, ``log⁻S_p = 0``), ``p → 0`` and ``Δ = p``: the derivative of ``log 𝒯`` at 0 is
    ``log σ₁/2 + (2 log K + log N)/4``, the bound's. The ``¼log⁻S_p`` term is not attained together with
    them (a rank-one ``σ₁ < 1`` makes ``log S_p`` negative but ``d log S_p/dp = log σ₁ < 0``).

    ``sharp=True``: Lemma ``ch04-lem-rounding-sharp`` (:func:`~bounds_lib.theory.peeling.rounding_cost_bound_sharp`),
    attained by every rank-one ``W`` — with ``log_sigma = −1`` (``σ₁ < 1``), where the first lemma is not."""
    bound = PL.rounding_cost_bound_sharp if sharp else PL.rounding_cost_bound

    def case(p, weaken=1.0):
        q = 2 * p
        s1 = math.exp(log_sigma)
        diff = PL.log_term(q * log_sigma, q, log_K, N) - PL.log_term(p * log_sigma, p, log_K, N)
        args = (q - p, p, s1, log_K, N) if sharp else (q - p, p, s1, p * log_sigma, log_K, N)
        return float(diff), float(bound(*args)) / weaken

    name = "rounding cost, sharp" if sharp else "rounding cost (σ₁, K, N terms)"
    label = "ch04-lem-rounding-sharp" if sharp else "ch04-lem-rounding"
    return witness(name, label, "p", ps, case, {"bound ÷ 1.1": dict(weaken=1.1)}, reach=0.995)


def log_factor_witness(side, Ns=(1e2, 1e4, 1e8, 1e16, 1e64)) -> Witness:
    """Lemma ``ch05-lem-logfactor``, both factors the library's (:func:`~bounds_lib.checks.ch5_theorem.log_factors`,
    lambdified from :mod:`bounds_lib.theory.orders`): ``upper`` (``√λ̄ ≤ κ·table``) along ``n = T = L = 1``,
    ``C = 1``, ``N → ∞`` — the only configurations where ``κ`` is attained (equality needs ``nT = 1`` and
    ``K = 1``), so these ones are the extremal case itself; ``lower`` (``table ≤ √λ̄``) along ``n = N``,
    ``T = 1000`` (> 9: a slip in ``T`` is seen), ``C = 1/8``, ``L = ⌈log₈N⌉ + 2`` (so that ``log⁺(8CNK) = 0``),
    ``N → ∞``: the ratio
    ``√(log(nTN)/log(9nTN)) → 1``."""
    from ..theory.orders import log_factor_constant

    if side not in ("upper", "lower"):
        raise ValueError(f"side must be 'upper' or 'lower', got {side!r}")

    def case(N, weaken=1.0):
        if side == "upper":
            thm, tab = log_factors(1.0, 1.0, N, 1, 1.0)
            return thm, weaken * log_factor_constant(N) * tab
        L = int(math.ceil(math.log(N) / math.log(8.0))) + 2   # 8CNK = N·L/8^L ≤ 1: log⁺(8CNK) = 0
        thm, tab = log_factors(N, 1000.0, N, L, 0.125)
        return tab, weaken * thm

    return witness(f"log factor, {side} side", "ch05-lem-logfactor", "N", Ns, case,
                   {"÷ 1.1": dict(weaken=1 / 1.1)}, reach=0.99)


def frobenius_row_witness(Ns=(4, 64, 256), CF=2.5, log_K=0.4) -> Witness:
    """Lemma ``ch05-lem-frobenius``: equality for ``N`` equal singular values ``C_F/√N``, against the library's
    :func:`bounds_lib.theory.orders.regime_term` ``("frobenius")`` (through
    :func:`bounds_lib.checks.ch5_theorem.frobenius_row_bound`); ``C_F = 2.5``, ``log K = 0.4``: ``N = 4`` lies in
    the regime ``N`` (``p = 0``), ``N = 64, 256`` in the regime ``√(C_F K)N^{3/4}`` (``p = 2``; ``N > (C_F K)²``)."""
    def case(N, weaken=1.0):
        grid = PL.posthoc_grid(1, N)
        s = np.full(N, CF / math.sqrt(N))
        logS = np.r_[math.log(N), np.log(np.sum(s[None, :] ** grid[1:, None], axis=1))]
        lhs = float(np.min(PL.log_term(logS, grid, log_K, N)))
        return math.exp(lhs), weaken * frobenius_row_bound(CF, log_K, N)

    return witness("Frobenius row min(√(C_F K)N^{3/4}, N)", "ch05-lem-frobenius", "N", Ns, case,
                   {"÷ 1.1": dict(weaken=1 / 1.1)}, reach=1 - 1e-9)


def chapter_witnesses(chapter) -> list:
    """Every witness of Chapter 1, 2, 4 or 5 (those of Chapter 3:
    :func:`bounds_lib.checks.ch3_witnesses.chapter3_witnesses`)."""
    if chapter == 1:
        return norm_witnesses()
    if chapter == 2:
        return [split_witness(k) for k in ("rank", "tail_dim", "tail_schatten")]
    if chapter == 4:
        return [rounding_witness(), rounding_witness(log_sigma=-1.0, sharp=True), shell_witness()]
    if chapter == 5:
        return [log_factor_witness("upper"), log_factor_witness("lower"), frobenius_row_witness()]
    raise ValueError(f"chapter must be 1, 2, 4 or 5 (Chapter 3: ch3_witnesses.chapter3_witnesses), got {chapter!r}")


def witness_table(witnesses) -> list:
    """Rows ``(bound, label, parameter, last ratio, form-changing weakenings caught, rescalings caught, all ok)``
    for a table: a weakening is form-changing when :attr:`Witness.form_changing` says so."""
    def caught(w, form):
        return ", ".join(k for k, v in w.caught.items() if v and w.form_changing[k] == form)

    return [(w.name, w.label, f"{w.parameter} = {_fmt(w.values[-1])}", w.ratios[-1], caught(w, True),
             caught(w, False), w.ok) for w in witnesses]


def weakening_counts(witnesses) -> dict:
    """How many weakened constants the ``witnesses`` carry, by kind: ``form`` (changes the bound's form),
    ``form_caught`` (of those, broken by the witness), ``rescale`` (only rescales the whole bound)."""
    pairs = [(w.form_changing[k], w.caught[k]) for w in witnesses for k in w.weakened]
    return {"form": sum(f for f, _ in pairs), "form_caught": sum(f and c for f, c in pairs),
            "rescale": sum(not f for f, _ in pairs)}
