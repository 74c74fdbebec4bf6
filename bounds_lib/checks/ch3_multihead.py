"""Checks of Chapter 3, the multi-head surrogate: Λ, γ and composition.

Lemmas ``ch03-lem-layer-mh`` and ``ch03-lem-gamma-mh`` and Theorem ``ch03-thm-compose-mh``
(:func:`bounds_lib.theory.propagation.multihead_block_forward` and the multi-head bounds) by random draws
and an optimiser on the harness of :mod:`bounds_lib.checks.harness`, with power checks; the
single-head checks are in :mod:`bounds_lib.checks.ch3_single_head`.
"""
from __future__ import annotations

import numpy as np

from ..theory.model import MULTI_HEAD_MATRIX_TYPES, project_rows
from ..theory.propagation import (SOFTMAX_LINF_L1_RELEASED, SOFTMAX_LINF_L1_TIGHT, _log_alpha, _log_gamma_mh,
                                  _log_lambda_mh, _mh_block, _mh_composition_sides, _mh_norms, _row_norms,
                                  _spectral_norms, log_gamma_multihead, multihead_block_forward)
from .ch3_single_head import _compose_claims
from .harness import CheckResult, Falsification, _spectral, _worst_ratios, falsify

__all__ = [
    "falsify_multihead_gamma",
    "falsify_multihead_layer",
    "adversarial_multihead_gamma",
    "falsify_multihead_composition",
    "check_multihead_gamma",
    "check_multihead_gamma_optimiser",
    "check_multihead_composition",
]


def falsify_multihead_gamma(rng, trials=10_000, released=False, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖B_{W'}(X) − B_W(X)‖_{2→∞} / (γ_a ‖ΔW_a‖₂)`` for one perturbed matrix of a multi-head
    block with ``φ = L_φ·tanh`` (``L_φ ∈ {1, 3}``). Returns ``(Falsification, keys)`` where ``keys[i]``
    names the perturbed matrix type. ``released=True`` uses the released γ (no L_φ, ``γ_Mout = 1``, c = 2)."""
    out, keys, per = [], [], 50
    names = MULTI_HEAD_MATRIX_TYPES
    for _ in range(int(np.ceil(trials / per))):
        N, T, H = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
        Nf = int(rng.integers(N, 3 * N + 1))
        Lp = float(rng.choice([1.0, 3.0]))
        s = np.exp(rng.uniform(np.log(0.3), np.log(4), 4))
        QK = [_spectral(rng, (N, N), s[0]) for _ in range(H)]
        V = [_spectral(rng, (N, N), s[1]) for _ in range(H)]
        Mi, Mo = _spectral(rng, (N, Nf), s[2]), _spectral(rng, (Nf, N), s[3])
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.1))))
        which, h = int(rng.integers(4)), int(rng.integers(H))
        P = [list(QK), list(V), Mi, Mo]
        if which < 2:
            P[which][h] = P[which][h] + _spectral(rng, (N, N), eps)
        else:
            P[which] = P[which] + _spectral(rng, P[which].shape, eps)
        X = project_rows(rng.standard_normal((per, T, N)) * rng.uniform(0.2, 3, (per, 1, 1)))
        phi = lambda x, Lp=Lp: Lp * np.tanh(x)  # noqa: E731
        Z, Zp = multihead_block_forward(X, QK, V, Mi, Mo, phi), multihead_block_forward(X, *P, phi)
        d = np.max(np.linalg.norm(Z - Zp, axis=-1), axis=-1)
        CV = np.array([np.linalg.norm(v, 2) for v in V])
        CQ = np.array([np.linalg.norm(q, 2) for q in QK])
        if released:
            g = log_gamma_multihead(s[2], s[3], CV, CQ, softmax_const=SOFTMAX_LINF_L1_RELEASED)
        else:
            g = log_gamma_multihead(s[2], s[3], CV, CQ, L_phi=Lp, softmax_const=softmax_const, phi_bound=Lp)
        gam = np.exp(g[names[which]])
        gam = float(gam[h]) if which < 2 else float(gam)
        out.append(d / (gam * eps))
        keys += [names[which]] * per
    return Falsification("multi-head γ" + (" (released)" if released else ""), np.concatenate(out)[:trials]), \
        np.array(keys[:trials])


#: Activations of the multi-head searches and their ``L_φ``: ``3tanh`` has ``L_φ = 3`` (so a dropped ``L_φ`` shows).
#: Each has ``φ(0) = 0``, so its linear-growth constant ``B_φ = sup ‖φ(y)‖₂/‖y‖₂`` equals ``L_φ`` (γ_Mout's factor).
_MH_ACTS = {"identity": (lambda x: x, 1.0), "tanh": (np.tanh, 1.0), "3tanh": (lambda x: 3.0 * np.tanh(x), 3.0)}


def _mh_stacks(x, L, H, N, Nf):
    """``L`` multi-head layers from the first entries of ``x``, as stacks (views of ``x``) ``QK (L, H, N, N)``,
    ``Ṽ (L, H, N, N)``, ``M_in (L, N, Nf)``, ``M_out (L, Nf, N)``; and the number of entries they take."""
    o, k = 2 * H * N * N, 2 * H * N * N + 2 * N * Nf
    y = x[:L * k].reshape(L, k)
    return (y[:, :o // 2].reshape(L, H, N, N), y[:, o // 2:o].reshape(L, H, N, N), y[:, o:o + N * Nf].reshape(L, N, Nf),
            y[:, o + N * Nf:k].reshape(L, Nf, N)), L * k


def _norms_of(stacks):
    """``‖·‖₂`` of every matrix of each stack ``(k, m, n)`` of the list ``stacks``, one batched SVD per shape
    (bitwise ``np.linalg.norm(W, 2)``): a list of arrays ``(k,)``."""
    out, groups = [None] * len(stacks), {}
    for i, s in enumerate(stacks):
        groups.setdefault(s.shape[-2:], []).append(i)
    for idx in groups.values():
        norms, o = _spectral_norms(np.concatenate([stacks[i] for i in idx])), 0
        for i in idx:
            out[i], o = norms[o:o + len(stacks[i])], o + len(stacks[i])
    return out


def _mh_layer_ratio(x, H, N, Nf, T, act, softmax_const, weaken):
    """``weaken·‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for one multi-head block (Λ multi-head)."""
    (QK, V, Mi, Mo), k = _mh_stacks(x, 1, H, N, Nf)
    phi, Lp = _MH_ACTS[act]
    X = project_rows(x[k:k + T * N].reshape(T, N))
    Xp = project_rows(x[k + T * N:k + 2 * T * N].reshape(T, N))
    den = float(np.max(_row_norms(X - Xp)))
    if den < 1e-12:
        return 0.0
    B = _mh_block(np.stack((X, Xp)), QK[0], V[0], Mi[0], Mo[0], phi)[2]  # the block at X and at X', one pass
    num = float(np.max(_row_norms(B[0] - B[1])))
    CQ, CV, Cmi, Cmo = _mh_norms((QK, V, Mi, Mo))  # one batched SVD
    # log_layer_lipschitz_multihead past its validation (the norms are finite and >= 0 by construction)
    lam = float(np.exp(_log_lambda_mh(Cmi, Cmo, CV, CQ, Lp, float(softmax_const))[0]))
    return weaken * num / (lam * den)


def falsify_multihead_layer(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, H=2, N=2, Nf=2, tokens=(2,),
                            acts=("identity", "tanh", "3tanh"), trials=300, restarts=3, maxiter=3000):
    """Random draws, then Nelder–Mead over weights and inputs, against the multi-head ``Λ`` of
    ``ch03-lem-layer-mh``: ``Λ = L_φ C(M_in) C(M_out) Σ_h C(Ṽ_h)(1 + 2c C(QK_h))``. Power check:
    ``weaken = 1.1`` (the factor is attained as the logits vanish)."""
    parts = []
    for T in tokens:
        for act in acts:
            dim = 2 * H * N * N + 2 * N * Nf + 2 * T * N
            def sample(r, dim=dim):
                x = r.normal(0.0, 0.7, dim)
                x[:H * N * N] *= r.choice([1.0, 0.02])   # half the draws near vanishing logits
                return x

            parts.append(falsify("Λ mh", lambda x, T=T, act=act: _mh_layer_ratio(x, H, N, Nf, T, act, softmax_const,
                                                                                  weaken),
                                 sample, rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification("multi-head Λ, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def _mh_gamma_ratio(x, which, H, N, Nf, T, act, softmax_const, weaken):
    """``weaken·‖B_{W'}(X) − B_W(X)‖_{2→∞} / (γ_a ‖ΔW_a‖₂)``, matrix ``which`` of head 0 perturbed."""
    W, k = _mh_stacks(x, 1, H, N, Nf)
    phi, Lp = _MH_ACTS[act]
    shape = {"QK": (N, N), "V": (N, N), "M_in": (N, Nf), "M_out": (Nf, N)}[which]
    size = shape[0] * shape[1]
    E = x[k:k + size].reshape(shape) * float(np.exp(np.clip(x[k + size], -12.0, 0.0)))
    X = project_rows(x[k + size + 1:k + size + 1 + T * N].reshape(T, N))
    P = [np.concatenate((m, m)) for m in W]  # the block and its perturbation, stacked: [0] is W, [1] is W'
    i = MULTI_HEAD_MATRIX_TYPES.index(which)
    if i < 2:
        P[i][1, 0] = P[i][1, 0] + E
    else:
        P[i][1] = P[i][1] + E
    CQ, CV, Cmi, Cmo, dE = _norms_of([W[0][0], W[1][0], W[2], W[3], E[None]])  # one batched SVD per shape
    dE = float(dE[0])
    if dE == 0:
        return 0.0
    B = _mh_block(X, *P, phi)[2]
    d = float(np.max(_row_norms(B[0] - B[1])))
    # log_gamma_multihead past its validation (the norms are finite and >= 0 by construction)
    g = _log_gamma_mh(Cmi[0], Cmo[0], CV, CQ, float(softmax_const), Lp, Lp)
    gam = np.exp(g[which])
    gam = float(np.ravel(gam)[0])
    return weaken * d / (gam * dE)


def adversarial_multihead_gamma(rng, which, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, H=2, N=2, Nf=2, T=2,
                                act="identity", trials=60, restarts=2, maxiter=3000):
    """Nelder–Mead (from the best of ``trials`` random draws) against the multi-head ``γ`` of one matrix
    type (``ch03-lem-gamma-mh``) over the weights, the perturbation and the input. Power check:
    ``weaken = 1.1`` (each γ is attained in a limit the search can approach), or a wrong
    ``softmax_const`` with ``which="QK"``."""
    if which not in MULTI_HEAD_MATRIX_TYPES:
        raise ValueError(f"which must be one of {', '.join(MULTI_HEAD_MATRIX_TYPES)}, got {which!r}")
    size = {"QK": N * N, "V": N * N, "M_in": N * Nf, "M_out": Nf * N}[which]
    dim = 2 * H * N * N + 2 * N * Nf + size + 1 + T * N

    def sample(r):
        x = r.normal(0.0, 0.8, dim)
        x[2 * H * N * N + 2 * N * Nf + size] = r.uniform(-8.0, -2.0)
        return x

    f = falsify("γ mh", lambda x: _mh_gamma_ratio(x, which, H, N, Nf, T, act, softmax_const, weaken), sample, rng,
                trials=trials, restarts=restarts, maxiter=maxiter)
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification(f"multi-head γ_{which}, optimiser" + tag, f.ratios, f.adversarial)


def _mh_composition_ratio(x, L, H, N, Nf, T, act, softmax_const, weaken, perturb):
    W, k = _mh_stacks(x, L, H, N, Nf)
    E, _ = _mh_stacks(x[k:], L, H, N, Nf)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    W_hat = [a + eps * (t in perturb) * e for a, e, t in zip(W, E, MULTI_HEAD_MATRIX_TYPES)]
    phi, Lp = _MH_ACTS[act]
    w = np.ones(N) / np.sqrt(N)
    # multihead_composition_bound past its validation: the stacks as they are, the norms in one batched SVD
    norms, c = _mh_norms(W), float(softmax_const)
    la = _log_alpha(_log_lambda_mh(norms[2], norms[3], norms[1], norms[0], Lp, c))
    lhs, rhs = _mh_composition_sides(W, W_hat, w, X, phi, Lp, c, norms, la)
    return weaken * lhs / rhs if rhs > 0 else 0.0


def falsify_multihead_composition(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2), H=2, N=2,
                                  Nf=2, T=2, acts=("identity", "tanh"), perturb=MULTI_HEAD_MATRIX_TYPES, trials=100,
                                  restarts=2, maxiter=4000):
    """Random draws, then Nelder–Mead, against the multi-head composition theorem (``ch03-thm-compose-mh``)
    (:func:`bounds_lib.theory.propagation.multihead_composition_bound`). ``perturb=("QK",)`` isolates the softmax
    constant: with a wrong ``softmax_const`` it must find a violation; ``weaken = 1.1`` checks the whole bound."""
    parts = []
    for L in depths:
        for act in acts:
            k = L * (2 * H * N * N + 2 * N * Nf)
            dim = 2 * k + T * N + 1

            def sample(r, dim=dim):
                x = r.normal(0.0, 0.8, dim)
                x[-1] = r.uniform(-8.0, -2.0)
                return x

            parts.append(falsify("compose mh", lambda x, L=L, act=act: _mh_composition_ratio(
                x, L, H, N, Nf, T, act, softmax_const, weaken, tuple(perturb)), sample, rng, trials=trials,
                restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == tuple(MULTI_HEAD_MATRIX_TYPES) else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("multi-head composition, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def check_multihead_gamma(rng, rng_released, trials=10_000):
    """Lemma ``ch03-lem-gamma-mh`` by random draws (:func:`falsify_multihead_gamma`), and the released γ.

    The lemma's γ on ``rng``, the released γ on ``rng_released``. Claims: no violation of the
    lemma in ``trials`` draws; the released γ is violated; its ``γ_{M_out} = 1`` in particular (worst
    ratio above 1 among the draws perturbing ``M_out``). ``values``: ``proved``, ``proved_keys``,
    ``released``, ``released_keys``, ``worst_released`` (the worst ratio per matrix type).
    """
    mh, mh_keys = falsify_multihead_gamma(rng, trials=trials, released=False)
    rel, rel_keys = falsify_multihead_gamma(rng_released, trials=trials, released=True)
    worst = {k: float(rel.ratios[rel_keys == k].max()) for k in MULTI_HEAD_MATRIX_TYPES if np.any(rel_keys == k)}
    claims = (
        (f"no violation of the lemma in {mh.trials} draws", mh.trials >= trials and mh.violations == 0),
        ("the released gamma is violated", rel.violations > 0),
        ("the released gamma_Mout = 1 is violated", worst.get("M_out", 0.0) > 1),
    )
    detail = (f"worst ratios: lemma {mh.worst_ratio:.3g}, released {rel.worst_ratio:.3g} "
              f"({rel.violations} violations)")
    return CheckResult("multi-head γ, random draws", claims, detail,
                       dict(proved=mh, proved_keys=mh_keys, released=rel, released_keys=rel_keys,
                            worst_released=worst))


def check_multihead_gamma_optimiser(rng, reach=0.95, weaken=1.1, **search):
    """Lemma ``ch03-lem-gamma-mh`` by the optimiser, per matrix type (:func:`adversarial_multihead_gamma`).

    For each type of :data:`bounds_lib.theory.model.MULTI_HEAD_MATRIX_TYPES`, in this order on ``rng``: the
    search against γ, then against γ divided by ``weaken``. Claims, per type: no violation and a
    worst ratio of at least ``reach`` (the search comes close to the bound); as power, γ/``weaken``
    is broken. ``values``: ``proved`` and ``weakened``, dicts of
    :class:`~bounds_lib.checks.harness.Falsification` by type.
    """
    proved, weak = {}, {}
    for a in MULTI_HEAD_MATRIX_TYPES:
        proved[a] = adversarial_multihead_gamma(rng, a, **search)
        weak[a] = adversarial_multihead_gamma(rng, a, weaken=weaken, **search)
    claims = tuple((f"gamma_{a}: no violation, reaches {reach:g}", f.violations == 0 and f.worst_ratio >= reach)
                   for a, f in proved.items()) + \
        tuple((f"power: gamma_{a} / {weaken:g} is broken", f.violations > 0) for a, f in weak.items())
    detail = "worst ratios " + ", ".join(f"{a} {f.worst_ratio:.4f} (÷{weaken:g}: {weak[a].worst_ratio:.3f})"
                                         for a, f in proved.items())
    return CheckResult("multi-head γ, optimiser", claims, detail, dict(proved=proved, weakened=weak))


def check_multihead_composition(seed=20260509, qk_seed=7, trials=60, qk_trials=40, restarts=2):
    """Theorem ``ch03-thm-compose-mh`` (composition for the multi-head surrogate), checked.

    :func:`falsify_multihead_composition` from ``numpy.random.default_rng(seed)`` (depths 1 and 2,
    ``3·tanh``, so ``L_φ = 3``) against the bound and the bound divided by 1.1; then from
    ``default_rng(qk_seed)`` perturbing ``QK`` alone (depth 1, identity, ``qk_trials`` draws) with the
    tight constant and with ``c = 1/2``. Claims as
    :func:`~bounds_lib.checks.ch3_single_head.check_composition`. ``values``: ``whole``, ``weakened``, ``qk``,
    ``qk_false``.
    """
    kw = dict(depths=(1, 2), acts=("3tanh",), trials=trials, restarts=restarts)
    kq = dict(depths=(1,), acts=("identity",), trials=qk_trials, restarts=restarts, perturb=("QK",))
    runs = dict(whole=falsify_multihead_composition(np.random.default_rng(seed), **kw),
                weakened=falsify_multihead_composition(np.random.default_rng(seed), weaken=1.1, **kw),
                qk=falsify_multihead_composition(np.random.default_rng(qk_seed), **kq),
                qk_false=falsify_multihead_composition(np.random.default_rng(qk_seed), softmax_const=0.5, **kq))
    detail = _worst_ratios(runs, 4)
    return CheckResult("multi-head composition", _compose_claims(runs), detail, runs)
