"""Checks of Chapter 3, single head: softmax, logits, the layer factor Λ, parameter perturbation, composition.

Each bound of :mod:`bounds_lib.theory.propagation` for the single-head transformer of
:mod:`bounds_lib.theory.model` — Lemmas ``ch03-lem-softmax`` and ``ch03-lem-logits``, Theorems
``ch03-thm-layer``, ``ch03-thm-param`` and ``ch03-thm-compose`` — by random draws (``falsify_*``), an
optimiser (``adversarial_*``) and the chapter's one-line checks (``check_*``, with power), all on the
harness of :mod:`bounds_lib.checks.harness`. The multi-head surrogate's are in
:mod:`bounds_lib.checks.ch3_multihead`.
"""
from __future__ import annotations

import numpy as np

from ..core.validation import check_scalar
from ..theory import propagation as P
from ..theory.model import SINGLE_HEAD_MATRIX_TYPES, project_rows, softmax_rows
from ..theory.propagation import (SOFTMAX_LINF_L1_TIGHT, log_alpha, log_gamma,
                                  log_layer_lipschitz)
from .harness import (TINY_DENOMINATOR, VIOLATION_TOL, CheckResult, Falsification, _spectral, _worst_ratios,
                      falsify)

__all__ = [
    "falsify_softmax",
    "falsify_logits",
    "falsify_layer_lipschitz",
    "check_softmax",
    "check_logits",
    "check_layer_lipschitz",
    "falsify_parameter_perturbation",
    "adversarial_layer_lipschitz",
    "adversarial_parameter_perturbation",
    "check_parameter_perturbation",
    "falsify_composition",
    "check_composition",
]


def falsify_softmax(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖softmax(z) − softmax(z')‖₁ / (c‖z − z'‖∞)`` over random logits (T = 2–16, scales 1e-3–30)."""
    out, per = [], 500
    for _ in range(int(np.ceil(trials / per))):
        T = int(rng.integers(2, 17))
        z = rng.standard_normal((per, T)) * np.exp(rng.uniform(np.log(1e-3), np.log(30), (per, 1)))
        d = rng.standard_normal((per, T)) * np.exp(rng.uniform(np.log(1e-6), np.log(3), (per, 1)))
        if rng.random() < 0.5:  # near-worst directions: ±δ on a balanced split
            d = np.sign(d) * np.abs(d).max(axis=1, keepdims=True)
        num = np.abs(softmax_rows(z + d) - softmax_rows(z)).sum(axis=1)
        out.append(num / (softmax_const * np.abs(d).max(axis=1)))
    return Falsification("softmax l∞→l1", np.concatenate(out)[:trials])


def falsify_logits(rng, trials=10_000):
    """Ratios ``|x_t W x_sᵀ − x'_t W x'_sᵀ| / (2‖W‖₂ δ)`` for rows in the unit ball (Chapter 3, ``ch03-lem-logits``),
    ``δ = max(‖x_t−x'_t‖, ‖x_s−x'_s‖)``."""
    out, per = [], 500
    for _ in range(int(np.ceil(trials / per))):
        N = int(rng.integers(1, 9))
        W = _spectral(rng, (N, N), float(np.exp(rng.uniform(-2, 2))))
        X = project_rows(rng.standard_normal((per, 4, N)) * rng.uniform(0.1, 3, (per, 1, 1)))
        Xp = project_rows(X + rng.standard_normal((per, 4, N)) * np.exp(rng.uniform(-6, 0, (per, 1, 1))))
        num = np.abs(X[:, 0] @ W * X[:, 1] - (Xp[:, 0] @ W) * Xp[:, 1]).sum(axis=1)
        delta = np.maximum(np.linalg.norm(X[:, 0] - Xp[:, 0], axis=1), np.linalg.norm(X[:, 1] - Xp[:, 1], axis=1))
        out.append(num / (2 * np.linalg.norm(W, 2) * np.maximum(delta, TINY_DENOMINATOR)))
    return Falsification("bilinear logits", np.concatenate(out)[:trials])


def falsify_layer_lipschitz(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for the single-head block of
    :mod:`bounds_lib.theory.model` (N = 1–6, T = 1–5, spectral norms 0.2–5, all four activations)."""
    from ..theory import model as M
    out, per = [], 250
    acts = sorted(M.ACTIVATIONS)
    for i in range(int(np.ceil(trials / per))):
        N, T, act = int(rng.integers(1, 7)), int(rng.integers(1, 6)), acts[i % len(acts)]
        sc = np.exp(rng.uniform(np.log(0.2), np.log(5), 3))
        blk = M.Block(*(_spectral(rng, (N, N), s) for s in sc))
        X = project_rows(rng.standard_normal((per, T, N)) * rng.uniform(0.1, 2, (per, 1, 1)))
        Xp = project_rows(X + np.exp(rng.uniform(np.log(1e-4), 0, (per, 1, 1))) * rng.standard_normal((per, T, N)))
        num = np.max(np.linalg.norm(M.block_forward(X, blk, act) - M.block_forward(Xp, blk, act), axis=-1), axis=-1)
        den = np.max(np.linalg.norm(X - Xp, axis=-1), axis=-1)
        lam = np.exp(log_layer_lipschitz(sc[2], sc[1], sc[0], M.ACTIVATION_LIPSCHITZ[act], softmax_const))
        out.append(num / (lam * np.maximum(den, TINY_DENOMINATOR)))
    return Falsification("layer Lipschitz Λ", np.concatenate(out)[:trials])


def check_softmax(rng, trials=10_000, points=20_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Lemma ``ch03-lem-softmax`` (softmax is ``c``-Lipschitz from ℓ∞ to ℓ1 with ``c = 1``), checked.

    In this order on ``rng``: the exact ``∞→1`` norm of the Jacobian
    (:func:`bounds_lib.theory.propagation.softmax_jacobian_linf_l1`) at ``points`` random logits of 6 tokens
    (scales ``e^{-4}`` to ``e^2``); :func:`falsify_softmax` with ``softmax_const`` and with
    ``softmax_const / 1.1``. Claims: the Jacobian norm is at most ``c`` everywhere and equals ``c``
    at ``z = 0``, ``T = 2`` (the constant cannot be lowered); no difference quotient exceeds ``c``;
    as power, ``c/1.1`` is broken. ``values``: ``jacobian`` (the norms), ``random``, ``weakened``.
    """
    from ..theory.propagation import softmax_jacobian_linf_l1

    points = check_scalar(points, "points", int, min_val=1)
    Z = rng.standard_normal((points, 6)) * np.exp(rng.uniform(-4, 2, (points, 1)))
    jac = softmax_jacobian_linf_l1(Z)
    soft = falsify_softmax(rng, trials=trials, softmax_const=softmax_const)
    weak = falsify_softmax(rng, trials=trials, softmax_const=softmax_const / 1.1)
    claims = (
        (f"Jacobian norm <= c at {points} points", float(jac.max()) <= softmax_const * (1 + 1e-12)),
        ("Jacobian norm = c at z = 0, T = 2", softmax_jacobian_linf_l1(np.zeros(2))[0] == softmax_const),
        (f"no difference quotient above c in {soft.trials} draws",
         soft.trials >= trials and soft.worst_ratio <= 1 + VIOLATION_TOL),
        ("power: c / 1.1 is broken", weak.violations > 0),
    )
    detail = f"max Jacobian norm {jac.max():.6f}; worst quotient ratio {soft.worst_ratio:.10f}"
    return CheckResult("softmax l∞→l1", claims, detail, dict(jacobian=jac, random=soft, weakened=weak))


def check_logits(rng, trials=10_000, weaken=1.1):
    """Lemma ``ch03-lem-logits`` (bilinear logits), checked by :func:`falsify_logits`.

    Claims: no violation in ``trials`` draws; as power, the same draws break the bound divided by
    ``weaken``. ``values``: ``random`` (the :class:`~bounds_lib.checks.harness.Falsification`), ``weak_violations``.
    """
    logit = falsify_logits(rng, trials=trials)
    weak_viol = int(np.count_nonzero(weaken * logit.ratios > 1))
    claims = (
        (f"no violation in {logit.trials} draws", logit.trials >= trials and logit.worst_ratio <= 1),
        (f"power: the same draws break the bound / {weaken:g}", weak_viol > 0),
    )
    return CheckResult("bilinear logits", claims, f"worst ratio {logit.worst_ratio:.6f}; "
                       f"{weak_viol} violations of the bound / {weaken:g}",
                       dict(random=logit, weak_violations=weak_viol))


def check_layer_lipschitz(rng, trials=10_000, false_const=0.25, **search):
    """Theorem ``ch03-thm-layer`` (the per-layer factor Λ), checked; random draws alone have no power.

    In this order on ``rng``: :func:`falsify_layer_lipschitz` with the tight softmax constant and with
    the false ``false_const``; :func:`adversarial_layer_lipschitz` (keywords ``search``) with both.
    Claims: no violation in the random draws or by the optimiser; as power, the optimiser breaks the
    false constant. What the random draws find against it is reported (``detail``), not claimed: a
    random search's failure to find is a property of one seed. With ``qk="indefinite"`` in ``search``
    the optimiser draws the family of the witness (``W_QK = q·diag(−1, 1)``), where ``c = ½`` is false
    by a factor near 2 at large ``q``. ``values``: ``random``, ``random_false``, ``optimiser``,
    ``optimiser_false``.
    """
    runs = dict(
        random=falsify_layer_lipschitz(rng, trials=trials, softmax_const=SOFTMAX_LINF_L1_TIGHT),
        random_false=falsify_layer_lipschitz(rng, trials=trials, softmax_const=false_const),
        optimiser=adversarial_layer_lipschitz(rng, **search),
        optimiser_false=adversarial_layer_lipschitz(rng, softmax_const=false_const, **search),
    )
    claims = (
        (f"no violation in {runs['random'].trials} random draws",
         runs["random"].trials >= trials and runs["random"].violations == 0),
        ("no violation found by the optimiser", runs["optimiser"].violations == 0),
        (f"power: the optimiser breaks c = {false_const:g}", runs["optimiser_false"].violations > 0),
    )
    detail = _worst_ratios(runs, 3)
    return CheckResult("layer Lipschitz Λ", claims, detail, runs)


def falsify_parameter_perturbation(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT, released=False):
    """Ratios ``|f_W(X) − f_{W'}(X)| / (‖w‖ Σ_{ℓ,a} γ^{(ℓ,a)} α^{(ℓ)} ‖W'^{(ℓ,a)} − W^{(ℓ,a)}‖₂)`` for whole
    single-head networks (L = 1–5, N = 2–6, T = 1–4); γ, α from the unperturbed network's norms.
    ``released=True`` uses γ without L_φ (and the released constant if ``softmax_const=2``)."""
    from ..theory import model as M
    out, per = [], 50
    acts = sorted(M.ACTIVATIONS)
    for i in range(int(np.ceil(trials / per))):
        L, N, T, act = int(rng.integers(1, 6)), int(rng.integers(2, 7)), int(rng.integers(1, 5)), acts[i % len(acts)]
        sn = float(np.exp(rng.uniform(np.log(0.3), np.log(3))))
        net = M.random_transformer(L, N, rng, spectral_norm=sn, act=act)
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.3))))
        D = np.zeros((L, 3))
        mask = rng.random((L, 3)) < 0.6
        mask[rng.integers(L), rng.integers(3)] = True
        blocks = []
        for ell, b in enumerate(net.blocks):
            new = []
            for a, W in enumerate((b.W_QK, b.W_V, b.W_M)):
                if mask[ell, a]:
                    E = _spectral(rng, W.shape, eps * sn)
                    D[ell, a] = np.linalg.norm(E, 2)
                    W = W + E
                new.append(W)
            blocks.append(M.Block(*new))
        net2 = M.SingleHeadTransformer(tuple(blocks), net.w, act=act)
        X = rng.standard_normal((per, T, N)) * rng.uniform(0.2, 3, (per, 1, 1))
        d = np.abs(M.forward(net, X) - M.forward(net2, X))
        C = np.array([[np.linalg.norm(W, 2) for W in (b.W_QK, b.W_V, b.W_M)] for b in net.blocks])
        g = log_gamma(C[:, 2], C[:, 1], C[:, 0], L_phi=None if released else net.L_phi, softmax_const=softmax_const)
        la = log_alpha(log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], net.L_phi, softmax_const))
        G = np.exp(np.stack([g["QK"], g["V"], np.broadcast_to(g["M"], (L,))], axis=1) + la[:, None])
        out.append(d / (np.linalg.norm(net.w) * np.sum(G * D)))
    return Falsification("network parameter perturbation", np.concatenate(out)[:trials])


def _block_ratio(x, T, N, softmax_const, weaken, qk="identity"):
    """Λ-ratio of the identity-activation block with ``W_QK = qI`` (``qk="identity"``) or the indefinite
    ``q·diag(−1, 1, …, 1)`` (``qk="indefinite"``, the shape of the witness), ``W_V = W_M = I`` at
    ``x = (log q, X, X')``."""
    from ..theory import model as M

    q = float(np.exp(np.clip(x[0], -4.0, 4.0)))
    X = project_rows(x[1:1 + T * N].reshape(T, N))
    Xp = project_rows(x[1 + T * N:1 + 2 * T * N].reshape(T, N))
    den = float(np.max(P._row_norms(X - Xp)))
    if den < 1e-12:
        return 0.0
    sign = np.ones(N)
    if qk == "indefinite":
        sign[0] = -1.0
    elif qk != "identity":
        raise ValueError(f"qk must be 'identity' or 'indefinite', got {qk!r}")
    # block_forward and log_layer_lipschitz past their validation (the matrices are built here)
    blk = ((q * np.diag(sign), np.eye(N), np.eye(N)),)
    phi = M.ACTIVATIONS["identity"]
    B = M._blocks_forward(np.stack((X, Xp)), blk, phi, 1.0)  # the block at X and at X', one pass
    num = float(np.max(P._row_norms(B[0] - B[1])))
    lam = float(np.exp(P._log_lambda(1.0, 1.0, q, 1.0, float(softmax_const))))
    return weaken * num / (lam * den)


def adversarial_layer_lipschitz(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, tokens=(2, 3, 4),
                                qs=(0.5, 1.0, 3.0), N=2, trials=60, restarts=2, maxiter=1500, qk="identity"):
    """Adversarial search against Λ (Chapter 3, ``ch03-thm-layer``): for every number of tokens ``T`` and
    logit gain ``q``, random draws of ``(X, X')`` and Nelder–Mead from the best ones maximise
    ``weaken · ‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for the block with ``W_QK = qI``,
    ``W_V = W_M = I`` and identity activation (rows projected onto the unit ball). ``q`` is held fixed
    per search: left free, the optimiser drifts to ``q → 0``, where the ratio tends to 1 for any
    constant. ``qk="indefinite"`` uses ``W_QK = q·diag(−1, 1, …)``, where Λ is attained as ``q → ∞``
    (:func:`bounds_lib.checks.ch3_witnesses.layer_qk_witness`). Run it with a wrong ``softmax_const`` (e.g. 0.25) or
    ``weaken = 1.1`` to check its power."""
    parts = []
    for T in tokens:
        for q in qs:
            lq = float(np.log(check_scalar(q, "q (the logit gain)", float, min_val=0.0, include_boundaries="neither")))
            parts.append(falsify("Λ", lambda x, T=T, lq=lq: _block_ratio(np.concatenate([[lq], x]), T, N,
                                                                          softmax_const, weaken, qk),
                                 lambda r, T=T: r.normal(0.0, 0.6, 2 * T * N), rng,
                                 trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification("layer Lipschitz Λ, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def _network_ratio(x, L, N, T, act, softmax_const, weaken, perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Parameter-perturbation ratio at ``x = (W: 3L N², E: 3L N², X: T N, log ε)`` (single-head network).

    The forward pass runs on the raw matrices (:func:`bounds_lib.theory.model._blocks_forward`, the loop of
    :func:`~bounds_lib.theory.model.forward`), the network and its perturbation stacked; a non-finite ``x``,
    which the model's validation rejects, has ratio 0 as before."""
    from ..theory import model as M

    if not np.all(np.isfinite(x)):
        return 0.0
    k = 3 * L * N * N
    Ws = x[:k].reshape(L, 3, N, N)
    perturbed = np.array([a in perturb for a in SINGLE_HEAD_MATRIX_TYPES])
    Es = x[k:2 * k].reshape(L, 3, N, N) * perturbed[None, :, None, None]
    H = project_rows(x[2 * k:2 * k + T * N].reshape(1, T, N))
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    w = np.ones(N) / np.sqrt(N)
    phi, L_phi = M.ACTIVATIONS[act], M.ACTIVATION_LIPSCHITZ[act]
    mats = np.array((Ws, Ws + eps * Es)).transpose(1, 2, 0, 3, 4)[:, :, :, None]  # mats[ℓ, a]: (2, 1, N, N)
    f = M._blocks_forward(H, mats, phi, 1.0)[:, :, 0, :] @ w  # the network and its perturbation, one stacked pass
    d = abs(float(f[0, 0]) - float(f[1, 0]))
    S = P._spectral_norms(np.array((Ws, Es)))
    C, D = S[0], eps * S[1]
    c, lp = float(softmax_const), np.log(L_phi)
    # log_gamma and log_layer_lipschitz past their validation (C is finite and >= 0 by construction)
    g = P._log_gamma(C[:, 2], C[:, 1], c, lp, np.log(1.0))
    la = P._log_alpha(P._log_lambda(C[:, 2], C[:, 1], C[:, 0], L_phi, c))
    G = np.exp(np.stack([g["QK"], g["V"], np.broadcast_to(g["M"], (L,))], axis=1) + la[:, None])
    bound = float(np.sum(G * D))
    return weaken * d / bound if bound > 0 else 0.0


def adversarial_parameter_perturbation(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2),
                                       N=2, T=2, act="identity", trials=150, restarts=2, maxiter=4000,
                                       perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Adversarial search against the whole-network parameter-perturbation bound (Chapter 3,
    ``ch03-thm-param``): random draws of weights, perturbation directions, input and ``log ε``,
    then Nelder–Mead from the best, maximising ``weaken·|f_W(X) − f_{W'}(X)| / (‖w‖₂ Σ γ α ‖ΔW‖₂)``
    (``‖w‖₂ = 1``); ``perturb`` names the matrix types that are perturbed (``("QK",)`` isolates the
    softmax constant). Power check: a wrong ``softmax_const`` or ``weaken = 1.1``."""
    parts = []
    for L in depths:
        dim = 6 * L * N * N + T * N + 1

        def sample(r, L=L, dim=dim):
            x = r.normal(0.0, 0.8, dim)
            x[-1] = r.uniform(-8.0, -2.0)
            return x

        parts.append(falsify("param", lambda x, L=L: _network_ratio(x, L, N, T, act, softmax_const, weaken, perturb),
                             sample,
                             rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == SINGLE_HEAD_MATRIX_TYPES else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("network parameter perturbation, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def check_parameter_perturbation(rng, trials=10_000):
    """Theorem ``ch03-thm-param`` (the change of the network under a change of its matrices), checked.

    Five runs, in this order on ``rng``: :func:`falsify_parameter_perturbation` (``trials`` random
    draws, tight softmax constant) and :func:`adversarial_parameter_perturbation` for every matrix, for
    ``W^{QK}`` alone, for ``W^{QK}`` with the softmax constant 1/4 and against the bound divided by 1.1.
    Claims: the first three find no violation; as power, the last two do. ``values``: the five
    :class:`~bounds_lib.checks.harness.Falsification` (``random``, ``optimiser``, ``qk``, ``qk_c_quarter``,
    ``weakened``).
    """
    runs = dict(
        random=falsify_parameter_perturbation(rng, trials=trials, softmax_const=SOFTMAX_LINF_L1_TIGHT),
        optimiser=adversarial_parameter_perturbation(rng),
        qk=adversarial_parameter_perturbation(rng, perturb=("QK",)),
        qk_c_quarter=adversarial_parameter_perturbation(rng, perturb=("QK",), softmax_const=0.25),
        weakened=adversarial_parameter_perturbation(rng, weaken=1.1),
    )
    claims = (
        (f"no violation in {runs['random'].trials} random draws",
         runs["random"].trials >= trials and runs["random"].violations == 0),
        ("no violation found by the optimiser", runs["optimiser"].violations == 0),
        ("no violation found by the optimiser changing W^QK alone", runs["qk"].violations == 0),
        ("power: softmax constant 1/4 broken through W^QK", runs["qk_c_quarter"].violations > 0),
        ("power: the bound / 1.1 broken", runs["weakened"].violations > 0),
    )
    detail = _worst_ratios(runs, 4)
    return CheckResult("network parameter perturbation", claims, detail, runs)


def _composition_ratio(x, L, N, T, act, softmax_const, weaken, perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Composition-lemma ratio at ``x = (W: 3L N², E: 3L N², X: T N, log ε)``, on the raw matrices
    (:func:`bounds_lib.theory.propagation._composition_sides`, the core of ``composition_bound``); a
    non-finite ``x``, which the model's validation rejects, has ratio 0 as before."""
    if not np.all(np.isfinite(x)):
        return 0.0
    k = 3 * L * N * N
    perturbed = np.array([a in perturb for a in SINGLE_HEAD_MATRIX_TYPES])
    Ws, Es = x[:k].reshape(L, 3, N, N), x[k:2 * k].reshape(L, 3, N, N) * perturbed[None, :, None, None]
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    w = np.ones(N) / np.sqrt(N)
    lhs, rhs, _, _ = P._composition_sides(Ws, Ws + eps * Es, w, w, X, act, 1.0, softmax_const)
    return weaken * lhs / rhs if rhs > 0 else 0.0


def falsify_composition(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2), N=2, T=2,
                        acts=("identity", "tanh"), trials=150, restarts=2, maxiter=4000,
                        perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Random draws, then Nelder–Mead, against the composition lemma (``ch03-thm-compose``):
    ``weaken · max_i|f_W − f_Ŵ| / Σ_j κ_j d_j`` over weights, perturbation directions, input and scale.
    ``weaken = 1.1`` checks the search's power; ``perturb=("QK",)`` isolates the softmax constant (the
    whole-network optimum goes through V and M), so a wrong ``softmax_const`` must then be found."""
    parts = []
    for L in depths:
        for act in acts:
            dim = 6 * L * N * N + T * N + 1

            def sample(r, dim=dim):
                x = r.normal(0.0, 0.8, dim)
                x[-1] = r.uniform(-8.0, -2.0)
                return x

            parts.append(falsify("compose", lambda x, L=L, act=act: _composition_ratio(x, L, N, T, act, softmax_const,
                                                                                        weaken, tuple(perturb)),
                                 sample, rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == SINGLE_HEAD_MATRIX_TYPES else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("composition (data metric), optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))



def _compose_claims(runs):
    """The four claims of a composition check: no violation (whole, QK alone); power (÷1.1, false c)."""
    return (
        ("no violation", runs["whole"].violations == 0),
        ("power: the bound / 1.1 is broken", runs["weakened"].violations > 0),
        ("no violation perturbing W^QK alone", runs["qk"].violations == 0),
        ("power: softmax constant 1/2 broken through W^QK", runs["qk_false"].violations > 0),
    )


def check_composition(rng, qk_seed=20260509, trials=60, restarts=1):
    """Theorem ``ch03-thm-compose`` (composition of data-dependent covers), checked.

    :func:`falsify_composition` on ``rng`` against the bound and the bound divided by 1.1; then,
    each from ``numpy.random.default_rng(qk_seed)``, perturbing ``W^{QK}`` alone (depth 1) with the
    tight softmax constant and with ``c = 1/2``. Claims: no violation in either proved run; as
    power, the weakened bound and the false constant are broken. ``values``: ``whole``,
    ``weakened``, ``qk``, ``qk_false``.
    """
    qk = dict(trials=trials, restarts=restarts, depths=(1,), perturb=("QK",))
    runs = dict(whole=falsify_composition(rng, trials=trials, restarts=restarts),
                weakened=falsify_composition(rng, trials=trials, restarts=restarts, weaken=1.1),
                qk=falsify_composition(np.random.default_rng(qk_seed), **qk),
                qk_false=falsify_composition(np.random.default_rng(qk_seed), softmax_const=0.5, **qk))
    detail = _worst_ratios(runs, 5)
    return CheckResult("composition of covers", _compose_claims(runs), detail, runs)
