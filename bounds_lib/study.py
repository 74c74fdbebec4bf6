"""The robust evaluation of Chapter 9: measures as the theory writes them, and statistics that hold up.

Chapter 9 asks whether the spectrum-adaptive bound tracks generalization on a planted-spectrum teacher
(:func:`bounds_lib.tasks.planted_teacher`), where the population error is exact. Its protocol is
pre-registered in ``bounds_lib/data/study_preregistration.md``; :data:`HYPOTHESES` is the same list in code.

Measured on each trained model (:func:`study_measures`, stored in ``row["study"]`` by the grid runner):
the training margins' 10th percentile ``γ``, the distance to initialisation ``‖θ − θ₀‖₂``, Bartlett et
al.'s spectral complexity, the corrected ``Θ`` of Chapter 5, and a perturbation sharpness with the
PAC-Bayes bound whose prior sits at the initialisation (Jiang et al. 2020; Dziugaite & Roy 2017).

Statistics (:func:`paired_interval`, :func:`sign_errors`, :func:`seed_sweep`, :func:`verdict`):
Kendall τ and its paired differences on the same bootstrap resamples (:mod:`bounds_lib.stats`),
Dziugaite et al. (2020)'s sign error over environments, and the Monte Carlo error of interval endpoints
across bootstrap seeds, from which each hypothesis gets *supported*, *borderline* or *refuted*.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["AXES", "SIGMA_GRID", "PAC_DELTA", "MARGIN_QUANTILE", "training_margins", "spectral_complexity",
           "distance_to_init", "perturbation_sharpness", "pac_bayes_bound", "study_measures"]

#: The axes of the factorial grid (config keys), each at two levels; ``n_train`` varies in the family.
AXES = ("L", "N", "lr", "weight_decay", "label_noise", "teacher_rank")
#: The perturbation scales searched by :func:`perturbation_sharpness`: ``2^{−k/2}``, ``k = 0…29``.
SIGMA_GRID = 2.0 ** (-np.arange(30) / 2.0)
#: Confidence of the PAC-Bayes bound.
PAC_DELTA = 0.05
#: The margin ``γ`` is this quantile of the training margins ``y_i f(x_i)`` (Jiang et al. 2020).
MARGIN_QUANTILE = 0.10
#: Allowed rise of the perturbed training error in :func:`perturbation_sharpness`.
SHARPNESS_TOLERANCE = 0.1
#: Perturbation draws per ``σ``.
SHARPNESS_DRAWS = 8


# ----------------------------------------------------------------------------- measures of one model


def training_margins(model, X, y) -> np.ndarray:
    """Margins ``y_i f(x_i)`` of a torch model on its training set (float64)."""
    import torch

    with torch.no_grad():
        return (y * model(X)).to(torch.float64).numpy()


def spectral_complexity(sigma1, norms21, readout_norm) -> float:
    """``log10`` of ``‖w‖₂ Π_j‖W_j‖₂ · (1 + Σ_j (‖W_j‖_{2,1}/‖W_j‖₂)^{2/3})^{3/2}`` (Bartlett et al. 2017).

    The reference matrices are 0 and the readout is the last layer (its ratio ``‖w‖_{2,1}/‖w‖₂`` is 1:
    the ``1 +``). Chapter 9 divides it by ``γ√n``.

    >>> round(10 ** spectral_complexity([2.0], [2.0], 1.0), 12)   # 2 · (1 + 1)^{3/2}
    5.656854249492
    """
    s1 = np.asarray(sigma1, dtype=float)
    r = np.asarray(norms21, dtype=float) / s1
    return float((np.sum(np.log10(s1)) + math.log10(readout_norm)
                  + 1.5 * math.log10(1.0 + np.sum(r ** (2.0 / 3.0)))))


def distance_to_init(model, model0) -> float:
    """``‖θ − θ₀‖₂``: the Euclidean distance of all parameters from their initial values."""
    sq = 0.0
    for p, p0 in zip(model.parameters(), model0.parameters()):
        sq += float(((p.detach().double() - p0.detach().double()) ** 2).sum())
    return math.sqrt(sq)


def perturbation_sharpness(model, X, y, train_error, seed, grid=SIGMA_GRID, draws=SHARPNESS_DRAWS,
                           tolerance=SHARPNESS_TOLERANCE):
    """``(σ', ê_Q)``: the largest ``σ`` of ``grid`` whose Gaussian perturbation keeps the training error low.

    For ``σ`` on ``grid`` (descending), ``ê_Q(σ)`` is the mean training 0-1 error of ``draws`` copies of
    the model with every parameter perturbed by ``𝒩(0, σ²)`` (a torch generator seeded by ``seed``); ``σ'``
    is found by bisection (assuming ``ê_Q`` grows with ``σ``) as the largest ``σ`` with
    ``ê_Q(σ) ≤ train_error + tolerance`` — the smallest grid point if none. Jiang et al. (2020)'s
    sharpness is ``1/σ'²``.
    """
    import copy

    import torch

    def err_q(sigma):
        gen = torch.Generator().manual_seed(int(seed))
        errs = []
        for _ in range(draws):
            m = copy.deepcopy(model)
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * sigma)
                errs.append(float((y * m(X) <= 0).double().mean()))
        return float(np.mean(errs))

    lo, hi = 0, len(grid) - 1   # grid descending: find the first index whose error is acceptable
    e_hi = err_q(grid[hi])
    if e_hi > train_error + tolerance:
        return float(grid[hi]), e_hi
    best = (hi, e_hi)
    while lo < hi:
        mid = (lo + hi) // 2
        e = err_q(grid[mid])
        if e <= train_error + tolerance:
            hi, best = mid, (mid, e)
        else:
            lo = mid + 1
    return float(grid[best[0]]), best[1]


def pac_bayes_bound(dist2, sigma, err_q, n, delta=PAC_DELTA, n_grid=len(SIGMA_GRID)) -> float:
    """``ê_Q + √((‖θ−θ₀‖²/(2σ²) + log(2√n/δ) + log G)/(2n))``: a PAC-Bayes bound with the prior at init.

    Posterior ``Q = 𝒩(θ, σ²I)``, prior ``P = 𝒩(θ₀, σ²I)`` (``KL = ‖θ−θ₀‖²/(2σ²)``); Maurer's bound relaxed
    by Pinsker, with a union bound over the ``G`` grid points of ``σ``. It bounds the error of the
    stochastic classifier ``Q``, given its training error ``ê_Q`` (here a Monte Carlo estimate).

    >>> b = pac_bayes_bound(0.0, 1.0, 0.0, 100, delta=0.05, n_grid=1)
    >>> round(b, 12) == round(math.sqrt(math.log(2 * 10 / 0.05) / 200), 12)
    True
    """
    kl = dist2 / (2.0 * sigma ** 2)
    return float(err_q + math.sqrt((kl + math.log(2.0 * math.sqrt(n) / delta) + math.log(n_grid)) / (2.0 * n)))


def study_measures(res) -> dict:
    """Chapter 9's measures of one trained :class:`~bounds_lib.training.TrainResult` (a teacher-task run).

    Returns a dict of plain values: ``margin`` (γ, the 10th percentile of the training margins),
    ``dist_init``, ``log10_spectral`` (:func:`spectral_complexity`), ``sigma_sharp`` and ``err_q``
    (:func:`perturbation_sharpness`), ``pac_bayes`` (:func:`pac_bayes_bound`); the corrected theorem's
    ``log10_theta`` and ``theta_gap_bound`` are added by the grid runner from the stored spectra.
    """
    import torch

    from .norms import norm_21
    from .tasks import sample
    from .training import TRAIN_STREAM, initial_model

    config, tm = res.config, res.torch_model
    dtype = next(tm.parameters()).dtype
    X, y, _ = sample(config.task(), config.n_train, TRAIN_STREAM)
    X, y = torch.as_tensor(X, dtype=dtype), torch.as_tensor(y, dtype=dtype)
    margins = training_margins(tm, X, y)
    model = res.model
    mats = [getattr(b, f"W_{a}") for b in model.blocks for a in ("QK", "V", "M")]
    s1 = [float(np.linalg.norm(W, 2)) for W in mats]
    n21 = [norm_21(W) for W in mats]
    dist = distance_to_init(tm, initial_model(config, dtype))
    sigma, err_q = perturbation_sharpness(tm, X, y, res.train_error, seed=1000 + config.seed)
    return {"margin": float(np.quantile(margins, MARGIN_QUANTILE)), "dist_init": dist,
            "log10_spectral": spectral_complexity(s1, n21, float(np.linalg.norm(model.w))),
            "sigma_sharp": sigma, "err_q": err_q,
            "pac_bayes": pac_bayes_bound(dist ** 2, sigma, err_q, config.n_train)}
