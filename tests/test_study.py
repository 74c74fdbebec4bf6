"""Chapter 9's robust study: the planted teacher and its exact population error, the measures' closed forms,
the statistics on synthetic data with known answers (power and null), and the pre-registration."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from bounds_lib.studies import stats as S
from bounds_lib.studies import study as ST
from bounds_lib.studies.grid import ROBUST_GRID, SMALL_ROBUST_GRID, grid_configs, robust_configs, run_grid
from bounds_lib.theory.model import forward
from bounds_lib.theory.norms import singular_values
from bounds_lib.studies.results import check_results
from bounds_lib.studies.tasks import (BooleanTask, all_bits, bit_index, encode, planted_teacher, sample,
                                      teacher_labels_all,
                              token_embedding)
from bounds_lib.studies.training import TrainConfig, exact_population, train

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- the planted teacher


def test_all_bits_enumerates_the_cube_and_bit_index_inverts_it():
    b = all_bits(5)
    assert b.shape == (32, 5) and len({row.tobytes() for row in b}) == 32
    assert np.array_equal(bit_index(b), np.arange(32))
    rng = np.random.default_rng(0)
    x = rng.choice([-1.0, 1.0], size=(50, 5))
    assert np.array_equal(b[bit_index(x)], x)


@pytest.mark.parametrize("rank", [1, 3, 0])
def test_teacher_matrices_have_the_planted_rank_and_labels_balance(rank):
    net, _ = planted_teacher(10, rank)
    for blk in net.blocks:
        for W in (blk.W_QK, blk.W_V, blk.W_M):
            s = singular_values(W)
            r = 16 if rank == 0 else rank
            assert np.allclose(s[:r], 3.0, atol=1e-12) and np.all(s[r:] < 1e-12)
    y = teacher_labels_all(10, rank)
    assert y.mean() == 0.0 and set(np.unique(y)) == {-1.0, 1.0}


def test_teacher_labels_are_the_median_threshold_of_the_teacher():
    net, emb = planted_teacher(8, 1)
    f = forward(net, encode(all_bits(8), emb))
    assert np.array_equal(teacher_labels_all(8, 1), np.where(f > np.median(f), 1.0, -1.0))


def test_label_noise_flips_labels_only():
    clean = BooleanTask(kind="teacher", T=12, s=1, N=8, teacher_rank=1)
    noisy = BooleanTask(kind="teacher", T=12, s=1, N=8, teacher_rank=1, label_noise=0.2)
    X0, y0, b0 = sample(clean, 4000, 0)
    X1, y1, b1 = sample(noisy, 4000, 0)
    assert np.array_equal(X0, X1) and np.array_equal(b0, b1)
    assert np.array_equal(y0, teacher_labels_all(12, 1)[bit_index(b0)])
    assert abs(np.mean(y0 != y1) - 0.2) < 0.02
    with pytest.raises(ValueError, match="label_noise"):
        BooleanTask(kind="teacher", label_noise=0.5)
    with pytest.raises(ValueError, match="enumerates all 2"):
        BooleanTask(kind="teacher", T=24, s=1)


def test_teacher_config_needs_the_whole_input_space_as_test_set_and_keeps_old_rows_keys():
    with pytest.raises(ValueError, match="n_test = 2\\*\\*T"):
        TrainConfig(kind="teacher", T=8, s=1, n_test=100)
    # fields at their default are left out of as_dict: rows of Chapters 7-8 keep their configuration keys
    assert "teacher_rank" not in TrainConfig().as_dict() and "label_noise" not in TrainConfig().as_dict()
    assert TrainConfig(kind="teacher", T=8, s=1, n_test=256, label_noise=0.1).as_dict()["label_noise"] == 0.1


@pytest.mark.parametrize("eta", [0.0, 0.2])
def test_exact_population_error_is_the_mean_over_all_inputs(eta):
    cfg = TrainConfig(kind="teacher", T=8, s=1, N=4, L=1, n_train=32, n_test=256, steps=20, lr=0.03,
                      teacher_rank=1, label_noise=eta)
    res = train(cfg, dtype=torch.float64)
    # the mean over every (input, label) pair of the noisy distribution, from the NumPy twin of the model
    bits = all_bits(8)
    f = forward(res.model, encode(bits, token_embedding(8, 4, cfg.seed)))
    ystar = teacher_labels_all(8, 1)
    err = np.mean((1 - eta) * (ystar * f <= 0) + eta * (-ystar * f <= 0))
    loss = np.mean((1 - eta) * np.logaddexp(0, -ystar * f) + eta * np.logaddexp(0, ystar * f))
    assert res.test_error == pytest.approx(err, abs=1e-12)
    assert res.test_loss == pytest.approx(loss, rel=1e-10)
    assert res.clean_test_error == pytest.approx(np.mean(ystar * f <= 0), abs=1e-12)
    assert res.gap_error == res.test_error - res.train_error
    assert exact_population(res.torch_model, cfg.task())[1] == res.test_error


# ----------------------------------------------------------------------------- measures


def test_spectral_complexity_and_pac_bayes_closed_forms():
    # two matrices with ‖W‖₂ = 2, ‖W‖_{2,1} = 4 and a unit readout: 4 · (1 + 2·2^{2/3})^{3/2}
    v = ST.spectral_complexity([2.0, 2.0], [4.0, 4.0], 1.0)
    assert 10 ** v == pytest.approx(4 * (1 + 2 * 2 ** (2 / 3)) ** 1.5, rel=1e-12)
    b = ST.pac_bayes_bound(8.0, 0.5, 0.1, 200, delta=0.05, n_grid=30)
    assert b == pytest.approx(0.1 + math.sqrt((16.0 + math.log(2 * math.sqrt(200) / 0.05) + math.log(30)) / 400))


def test_distance_to_init_is_the_euclidean_norm_of_the_parameter_change():
    """``‖θ − θ₀‖₂`` over every parameter, by hand: changes (3, 4) in a weight and 12 in a bias give
    √(9 + 16 + 144) = 13 (not its square, 169); and Chapter 9's measure is its log10."""
    m0 = torch.nn.Linear(2, 1)
    m = torch.nn.Linear(2, 1)
    with torch.no_grad():
        m0.weight.copy_(torch.tensor([[1.0, -2.0]]))
        m0.bias.copy_(torch.tensor([0.5]))
        m.weight.copy_(torch.tensor([[4.0, 2.0]]))
        m.bias.copy_(torch.tensor([12.5]))
    assert ST.distance_to_init(m, m0) == 13.0
    assert ST.distance_to_init(m0, m0) == 0.0
    # a float32 model: the difference is taken in float64 (1 + 2^-20 − 1 is exact there)
    m.load_state_dict(m0.state_dict())
    with torch.no_grad():
        m.bias.add_(2.0 ** -20)
    assert ST.distance_to_init(m, m0) == 2.0 ** -20
    row = {"config": {"n_train": 8}, "proxies": {"readout_norm": 1.0}, "study": {"dist_init": 13.0, "margin": 0.5}}
    assert ST.measure([row], "dist_init")[0] == pytest.approx(math.log10(13.0), rel=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_study_measures_store_the_distance_to_init_and_its_square_in_the_pac_bayes_bound(dtype):
    """A trained model's ``dist_init`` is ``√Σ(θ − θ₀)²`` against its own seeded initialisation in its own
    precision (summed here in NumPy), and the PAC-Bayes bound's KL term takes its square."""
    from bounds_lib.studies.training import initial_model

    cfg = TrainConfig(kind="teacher", T=8, s=1, N=4, L=1, n_train=32, n_test=256, steps=30, lr=0.03, teacher_rank=1)
    res = train(cfg, dtype=dtype)
    m = ST.study_measures(res)
    m0 = initial_model(cfg, dtype)
    sq = sum(float(np.sum((p.detach().numpy().astype(np.float64) - p0.detach().numpy().astype(np.float64)) ** 2))
             for p, p0 in zip(res.torch_model.parameters(), m0.parameters()))
    assert sq > 1e-4  # the model moved
    assert m["dist_init"] == pytest.approx(math.sqrt(sq), rel=1e-12)
    assert m["pac_bayes"] == pytest.approx(ST.pac_bayes_bound(sq, m["sigma_sharp"], m["err_q"], cfg.n_train),
                                           rel=1e-12)


def test_study_measures_by_their_definitions():
    """γ, Bartlett et al.'s spectral complexity (spectral norms by SVD, (2,1) norms, the readout's norm) and
    the sharpness drawn with the generator seed 1000 + the run's seed (seed 1 here: 1000 − 1 would differ)."""
    from bounds_lib.theory.norms import norm_21
    from bounds_lib.studies.training import TRAIN_STREAM

    cfg = TrainConfig(kind="teacher", T=8, s=1, N=4, L=1, n_train=32, n_test=256, steps=30, lr=0.03, teacher_rank=1,
                      seed=1)
    res = train(cfg)
    m = ST.study_measures(res)
    X, y, _ = sample(cfg.task(), cfg.n_train, TRAIN_STREAM)
    X, y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    margins = ST.training_margins(res.torch_model, X, y)
    assert m["margin"] == float(np.quantile(margins, 0.1))
    mats = [getattr(b, f"W_{a}") for b in res.model.blocks for a in ("QK", "V", "M")]
    s1 = [float(singular_values(W)[0]) for W in mats]
    assert m["log10_spectral"] == pytest.approx(
        ST.spectral_complexity(s1, [norm_21(W) for W in mats], float(np.linalg.norm(res.model.w))), rel=1e-12)
    assert (m["sigma_sharp"], m["err_q"]) == ST.perturbation_sharpness(res.torch_model, X, y, res.train_error,
                                                                       seed=1001)
    assert (m["sigma_sharp"], m["err_q"]) != ST.perturbation_sharpness(res.torch_model, X, y, res.train_error,
                                                                       seed=999)


def test_perturbation_sharpness_finds_the_largest_acceptable_sigma():
    cfg = TrainConfig(kind="teacher", T=8, s=1, N=4, L=1, n_train=32, n_test=256, steps=30, lr=0.03, teacher_rank=1)
    res = train(cfg)
    X, y, _ = sample(cfg.task(), 32, 0)
    X, y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    sigma, e = ST.perturbation_sharpness(res.torch_model, X, y, res.train_error, seed=3)
    assert sigma in ST.SIGMA_GRID
    assert e <= res.train_error + ST.SHARPNESS_TOLERANCE or sigma == ST.SIGMA_GRID[-1]
    # a much larger tolerance accepts a larger (or equal) perturbation
    assert ST.perturbation_sharpness(res.torch_model, X, y, res.train_error, seed=3, tolerance=1.0)[0] >= sigma


# ----------------------------------------------------------------------------- statistics with known answers


def _synthetic_rows(seed=0, n_configs=24, n_seeds=3):
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_configs):
        base = rng.normal()
        for s in range(n_seeds):
            rows.append({"config": {"c": c, "seed": s}, "gap_error": base + 0.3 * rng.normal()})
    return rows


def test_paired_interval_detects_a_planted_difference_under_every_bootstrap_seed():
    rows = _synthetic_rows()
    g = np.array([r["gap_error"] for r in rows])
    rng = np.random.default_rng(1)
    good, bad = g + 0.1 * rng.normal(size=g.size), g + 2.0 * rng.normal(size=g.size)
    ivs = [paired(rows, good, bad, g, s) for s in range(5)]
    assert ST.verdict([iv.sign for iv in ivs]) == "supported"


def paired(rows, a, b, g, seed):
    return ST.paired_interval(a, b, g, S.bootstrap_weights(ST.clusters(rows), n_boot=500, seed=seed))


def test_paired_interval_has_no_power_on_a_null_difference():
    # two measures with the same noise around the gap: no bootstrap seed may call one better
    rows = _synthetic_rows(seed=2)
    g = np.array([r["gap_error"] for r in rows])
    rng = np.random.default_rng(3)
    a, b = g + 0.5 * rng.normal(size=g.size), g + 0.5 * rng.normal(size=g.size)
    signs = [paired(rows, a, b, g, s).sign for s in range(5)]
    assert ST.verdict(signs) != "supported"
    assert signs.count("0") >= 4


def test_sign_errors_known_answers_and_summary():
    rows = [{"config": {"L": L, "N": N, "seed": s}, "gap_error": L + 0.1 * N + 0.01 * s}
            for L in (1, 2) for N in (1, 2) for s in (0, 1)]
    right = [r["config"]["L"] + 0.1 * r["config"]["N"] for r in rows]
    errs = ST.sign_errors(rows, right, axes=("L", "N"))
    assert len(errs) == 4 and all(e == 0.0 for _, e in errs)
    wrong_N = [r["config"]["L"] - r["config"]["N"] for r in rows]
    summary = ST.sign_error_summary(ST.sign_errors(rows, wrong_N, axes=("L", "N")))
    assert summary["L"][0] == 0.0 and summary["N"][0] == 1.0 and summary["all"] == (0.5, 1.0, 1.0, 4)
    const = [1.0] * len(rows)  # a constant measure ties every pair: sign error 1/2
    assert {e for _, e in ST.sign_errors(rows, const, axes=("L",))} == {0.5}


def test_verdict_rule():
    assert ST.verdict(["+"] * 10) == "supported"
    assert ST.verdict(["+"] * 9 + ["0"]) == "borderline"
    assert ST.verdict(["-"] * 10) == "refuted (reversed)"
    assert ST.verdict(["0", "-"]) == "refuted (no effect shown)"
    assert ST.verdict(["-"] * 3, claimed="-") == "supported"


@pytest.mark.parametrize("claimed", ["+", "-"])
@pytest.mark.parametrize("rest", ["0", "other side"])
def test_verdict_rule_at_every_count_of_ten_seeds(claimed, rest):
    """The pre-registered rule over the 10 bootstrap seeds: supported only at 10 of 10 on the claimed side,
    borderline at every count from 1 to 9 (one seed of ten is "under some seeds but not all"), refuted at 0
    — reversed when all ten exclude 0 on the other side. Through :class:`SweepResult` too, from intervals."""
    other = {"+": "-", "-": "+"}[claimed]
    r = other if rest == "other side" else "0"
    for k in range(11):
        signs = [claimed] * k + [r] * (10 - k)
        expected = ("supported" if k == 10 else "borderline" if k > 0 else
                    "refuted (reversed)" if r == other else "refuted (no effect shown)")
        assert ST.verdict(signs, claimed) == expected, k
        assert ST.verdict(signs[::-1], claimed) == expected, k  # the order of the seeds does not matter
        bound = {"+": (0.1, 0.5), "-": (-0.5, -0.1), "0": (-0.1, 0.1)}
        ivs = tuple(S.Interval(0.0, *bound[x], 1000) for x in signs)
        sweep = ST.SweepResult(ivs, claimed)
        assert (sweep.n_claimed, sweep.verdict) == (k, expected)


def test_seed_sweep_reports_monte_carlo_error_of_the_endpoints():
    rows = [{"config": {"L": 1, "N": 4, "lr": 0.1, "weight_decay": 0.0, "label_noise": 0.0, "teacher_rank": t,
                        "n_train": 8, "seed": s, "k": k}, "gap_error": float(k + 0.1 * s),
             "proxies": {"p_star": {"QK": [0.0], "V": [0.0], "M": [float(t == 1)]}}}
            for t in (0, 1) for k in range(6) for s in range(2)]
    sweep = ST.seed_sweep(ST.HYPOTHESES[-1], rows, seeds=range(4), n_boot=200)   # H9 on planted p*: +1/3 each
    assert sweep.value == pytest.approx(1 / 3) and sweep.verdict == "supported"
    assert sweep.lo_sd == 0.0 and sweep.widest.lo == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------- the pre-registration and the grid


def test_preregistration_lists_the_hypotheses_of_the_code():
    text = (ROOT / "bounds_lib" / "data" / "study_preregistration.md").read_text()
    ids = re.findall(r"^\| (H\d+) \|", text, re.M)
    assert ids == [h.id for h in ST.HYPOTHESES]
    for ax in ST.AXES:
        assert ax.replace("_", " ") in text.replace("_", " ") or ax in text
    assert "stopping loss" in text and "bootstrap seeds 0–9" in text


def test_robust_grid_is_the_preregistered_factorial_plus_the_sample_size_family():
    configs = robust_configs(ROBUST_GRID)
    assert len(configs) == len(set(configs)) == 2 * (64 + 6)
    factorial = [c for c in configs if c.n_train == 128 and c.seed == 0]
    combos = {tuple(getattr(c, k) for k in ST.AXES) for c in factorial}
    assert len(combos) == 64
    assert all(c.n_test == 2 ** 16 and c.stop_loss == 0.05 and c.kind == "teacher" for c in configs)
    assert grid_configs(ROBUST_GRID) == configs


def test_small_robust_grid_rows_carry_the_study_measures():
    res = run_grid({**SMALL_ROBUST_GRID, "seeds": (0,), "family_n": (16,)})
    check_results(res)
    for r in res["rows"]:
        assert set(r["study"]) >= {"margin", "dist_init", "log10_spectral", "sigma_sharp", "pac_bayes",
                                   "log10_theta", "theta_gap_bound"}
        assert r["population_error_clean"] <= 1 and r["test_error"] - r["train_error"] == r["gap_error"]
    ok, _ = ST.with_axes(res["rows"])
    for name in ST.MEASURES:
        assert np.all(np.isfinite(ST.measure(ok, name)))


def test_the_cluster_replication_is_configured():
    from bounds_lib.studies.grid import PRESETS, ROBUST_LARGE_GRID

    configs = robust_configs(ROBUST_LARGE_GRID)
    assert len(configs) == len(set(configs)) == 5 * (64 + 10)
    assert PRESETS["robust-large"] is ROBUST_LARGE_GRID and min(c.N for c in configs) == 32


def test_conditional_mi_detects_information_and_its_permutation_null_does_not_on_noise():
    rng = np.random.default_rng(4)
    rows = [{"config": {"L": L, "N": N, "seed": s}, "gap_error": 0.3 * L + rng.normal()}
            for L in (1, 2) for N in (1, 2) for s in range(10)]
    g = np.array([r["gap_error"] for r in rows])
    K, S_min, p = ST.conditional_mi(rows, g + 0.3 * rng.normal(size=g.size), axes=("L", "N"), k=1, n_perm=99)
    assert K > 0.1 and p == 0.01 and len(S_min) == 1
    K0, _, p0 = ST.conditional_mi(rows, rng.normal(size=g.size), axes=("L", "N"), k=1, n_perm=99)
    assert K0 < K and p0 > 0.05
    # a measure fixed by the conditioning axis carries no information given it
    assert ST.conditional_mi(rows, [r["config"]["L"] for r in rows], axes=("L", "N"), k=1)[0] == 0.0


def test_committed_results_are_the_preregistered_grid():
    import json

    from bounds_lib.studies.results import load_results
    from bounds_lib.studies.training import TrainConfig

    d = load_results("robust")
    assert d["metadata"]["grid"] == json.loads(json.dumps(ROBUST_GRID))
    assert [TrainConfig(**r["config"]) for r in d["rows"]] == robust_configs(ROBUST_GRID)
    ok, out = ST.with_axes(d["rows"])
    assert len(ok) + len(out) == len(d["rows"]) and all(r["train_loss"] <= 0.05 for r in ok)
    # the margin of every analysed model is positive (train error <= 0.05 / log 2 < 0.1), as pre-registered
    assert all(r["study"]["margin"] > 0 and r["train_error"] < 0.1 for r in ok)


def test_robust_preset_runs_from_the_command_line_and_resumes(tmp_path):
    import json

    from bounds_lib.studies.grid import main
    from bounds_lib.studies.results import read_results

    out = tmp_path / "robust.json"
    assert main(["--preset", "robust", "--small", "--out", str(out), "--select", "seed=0", "n_train=16"]) == 0
    d = read_results(out)
    assert d["metadata"]["n_rows"] == 4 and d["metadata"]["grid"]["task"]["kind"] == "teacher"
    # an interrupted run resumes from its progress file: a finished row there is reused, not retrained
    progress = tmp_path / "again.json.partial.jsonl"
    progress.write_text(json.dumps(d["rows"][0]) + "\n")
    assert main(["--preset", "robust", "--small", "--out", str(tmp_path / "again.json"), "--select", "seed=0",
                 "n_train=16"]) == 0
    again = read_results(tmp_path / "again.json")
    assert again["metadata"]["reused_rows"] == 1 and again["rows"][0] == d["rows"][0]


# ----------------------------------------------------------------------------- known answers (issue 33's mutation run)


def _study_rows(seed=5):
    """32 rows: L, N, teacher_rank, n_train at two levels, the other axes at one, seeds 0 and 1; every measure
    that needs no trained model (steps taken, −log n, training error, mean p*) and two targets."""
    rng = np.random.default_rng(seed)
    rows = []
    for L in (1, 2):
        for N in (4, 8):
            for t in (0, 1):
                for n in (16, 64):
                    for s in (0, 1):
                        g = 0.1 * L + 0.02 * N - 0.001 * n + 0.1 * rng.normal()
                        rows.append({"config": {"L": L, "N": N, "lr": 0.1, "weight_decay": 0.0, "label_noise": 0.0,
                                                "teacher_rank": t, "n_train": n, "seed": s},
                                     "gap_error": g, "test_error": 0.5 + 0.2 * rng.normal(),
                                     "steps_taken": float(g + 0.1 * rng.normal()), "train_error": rng.random(),
                                     "proxies": {"p_star": {"QK": [1.0], "V": [1.0],
                                                            "M": [1.0 + 0.5 * t + 0.3 * rng.normal()]}}})
    return rows


def _same_interval(a, b):
    assert (a.value, a.lo, a.hi, a.n_boot, a.n_undefined) == pytest.approx((b.value, b.lo, b.hi, b.n_boot,
                                                                            b.n_undefined), rel=1e-12, abs=0)


@pytest.mark.parametrize("target", [None, "test_error"])
def test_statistic_of_every_kind_is_its_definition(target):
    """Each kind of :func:`statistic` against its definition, with the two-stage bootstrap over configurations
    (clusters: the config without its seed) under the seed asked for, ``n_boot`` resamples, the level asked
    for and the target asked for (the gap by default); the point values by the independent point formulas."""
    rows = _study_rows()
    kw = {} if target is None else {"target": target}
    g = np.array([r[target or "gap_error"] for r in rows])
    W = S.bootstrap_weights(ST.clusters(rows), n_boot=300, seed=3)
    a, b = ST.measure(rows, "steps_taken"), ST.measure(rows, "neg_log_n")
    tau = ST.statistic(ST.Hypothesis("T", "", "tau", "steps_taken"), rows, 3, 300, 0.8, **kw)
    _same_interval(tau, S.kendall_interval(a, g, W, 0.8))
    assert tau.value == pytest.approx(S.kendall_tau(a, g), rel=1e-12) and tau.n_boot == 300
    assert tau.lo < tau.value < tau.hi
    assert ST.statistic(ST.Hypothesis("T", "", "tau", "steps_taken"), rows, 3, 300, 0.8, W=W, **kw) == tau
    W9 = S.bootstrap_weights(ST.clusters(rows), n_boot=100, seed=9)  # resamples passed in are the ones used
    _same_interval(ST.statistic(ST.Hypothesis("T", "", "tau", "steps_taken"), rows, 3, 300, 0.8, W=W9, **kw),
                   S.kendall_interval(a, g, W9, 0.8))
    assert ST.statistic(ST.Hypothesis("T", "", "tau", "steps_taken"), rows, 4, 300, 0.8, **kw) != tau
    diff = ST.statistic(ST.Hypothesis("D", "", "diff", "steps_taken", "neg_log_n"), rows, 3, 300, 0.8, **kw)
    _same_interval(diff, ST.paired_interval(a, b, g, W, 0.8))
    assert diff.value == pytest.approx(S.kendall_tau(a, g) - S.kendall_tau(b, g), rel=1e-12)
    psi = ST.statistic(ST.Hypothesis("P", "", "psi", "steps_taken"), rows, 3, 300, 0.8, **kw)
    hypers = ST.AXES + ("n_train",)
    _same_interval(psi, S.granulated_intervals(rows, a, W, hypers, (), target or "gap_error", 0.8)["Psi"])
    point = S.granulated_kendall(rows, lambda r: r["steps_taken"], target or "gap_error", hypers)["Psi"]
    assert psi.value == pytest.approx(point, rel=1e-12)
    with pytest.raises(ValueError, match=r"^unknown hypothesis kind 'nope'$"):
        ST.statistic(ST.Hypothesis("X", "", "nope", "steps_taken"), rows, **kw)


def test_statistic_of_the_sign_error_and_of_p_star_by_hand():
    """``sign_error``: ½ minus the mean sign error over environments, resampled over environments; a
    measure that ranks every environment right scores ½, backwards −½. ``pstar_rank``: the paired
    differences of mean p*, resampled with the seed asked for (the same seed, the same interval)."""
    rows = _study_rows()
    g = [r["gap_error"] for r in rows]
    for m, value in ((g, 0.5), ([-x for x in g], -0.5)):
        for r, x in zip(rows, m):
            r["steps_taken"] = x
        iv = ST.statistic(ST.Hypothesis("S", "", "sign_error", "steps_taken"), rows, 2, 150, 0.9)
        assert (iv.value, iv.lo, iv.hi, iv.n_boot) == (value, value, value, 150)
        # against another target the same measure has sign errors (the target is the one asked for)
        other = ST.statistic(ST.Hypothesis("S", "", "sign_error", "steps_taken"), rows, 2, 150, 0.9,
                             target="test_error")
        assert abs(other.value) < 0.5
    rows = _study_rows()
    errs = np.array([e for _, e in ST.sign_errors(rows, ST.measure(rows, "steps_taken"))])
    assert 0 < errs.mean() < 1 and errs.size == 32  # 4 axes at two levels, 8 environments each
    v = 0.5 - errs
    draws = v[np.random.default_rng(2).integers(v.size, size=(150, v.size))].mean(axis=1)
    iv = ST.statistic(ST.Hypothesis("S", "", "sign_error", "steps_taken"), rows, 2, 150, 0.9)
    assert iv.value == pytest.approx(v.mean(), rel=1e-12)
    assert (iv.lo, iv.hi) == pytest.approx(tuple(np.quantile(draws, [0.05, 0.95])), rel=1e-12)
    d = ST.pstar_rank_differences(rows)
    draws = d[np.random.default_rng(7).integers(d.size, size=(150, d.size))].mean(axis=1)
    iv = ST.statistic(ST.HYPOTHESES[-1], rows, 7, 150, 0.9)
    assert iv.value == pytest.approx(d.mean(), rel=1e-12) and iv.lo < iv.hi
    assert (iv.lo, iv.hi) == pytest.approx(tuple(np.quantile(draws, [0.05, 0.95])), rel=1e-12)
    sweep = ST.seed_sweep(ST.HYPOTHESES[-1], rows, seeds=(7, 8), n_boot=150, level=0.9)
    assert sweep.intervals[0] == iv and sweep.intervals[1] != iv
    tau = ST.Hypothesis("T", "", "tau", "steps_taken")
    assert ST.seed_sweep(tau, rows, seeds=(1,), n_boot=50, target="test_error").intervals == \
        (ST.statistic(tau, rows, 1, 50, target="test_error"),)


def test_pstar_rank_differences_pair_the_two_teachers_of_one_configuration():
    def row(t, m, **c):
        return {"config": {"L": 1, "seed": 0, "n_train": 16, "teacher_rank": t, **c},
                "proxies": {"p_star": {"QK": [m], "V": [m], "M": [m]}}}

    rows = [row(0, 1.0), row(1, 1.5), row(0, 2.0, L=2), row(1, 1.0, L=2), row(0, 3.0, L=3), row(1, 9.0, L=4)]
    # pairs: L=1 (+0.5), L=2 (−1.0); L=3 has only the full-rank teacher, L=4 only the rank-1 one
    np.testing.assert_array_equal(ST.pstar_rank_differences(rows), [0.5, -1.0])


def test_clusters_are_the_configuration_without_its_seed():
    rows = [{"config": {"L": 1, "seed": 0}}, {"config": {"seed": 1, "L": 1}}, {"config": {"L": 2, "seed": 0}}]
    assert ST.clusters(rows) == [(("L", 1),), (("L", 1),), (("L", 2),)]


def test_sign_errors_use_the_seeds_both_levels_have_and_count_ties_as_half():
    def row(L, N, s, g):
        return {"config": {"L": L, "N": N, "seed": s}, "gap_error": g}

    # environment N=1: L=1 has seeds 0, 1, L=2 only seed 1; environment N=2: L=1 and L=2 have no common
    # seed (skipped), L=1 and L=3 have seed 0 (ranked backwards); environment N=3: a tie in the gap (sign
    # error ½ whatever the measure) and gaps below 0
    rows = [row(1, 1, 0, 0.0), row(1, 1, 1, 0.1), row(2, 1, 1, 0.5),
            row(1, 2, 0, 0.0), row(2, 2, 1, 1.0), row(3, 2, 0, 2.0),
            row(1, 3, 0, -2.0), row(2, 3, 0, -1.0), row(1, 3, 1, -0.5), row(2, 3, 1, -0.5)]
    m = [0.0, 0.0, 1.0, 0.0, 1.0, -1.0, 5.0, 6.0, 1.0, 2.0]

    def along_L():
        return [e for e in ST.sign_errors(rows, m, axes=("L", "N")) if e[0] == "L"]

    assert along_L() == [("L", 0.0), ("L", 1.0), ("L", 0.25)]
    m[7] = 4.0  # the measure now ranks the N=3, seed-0 pair backwards
    assert along_L() == [("L", 0.0), ("L", 1.0), ("L", 0.75)]


def test_measure_closed_forms():
    """Every measure of :data:`MEASURES` on one row, by hand: the bounds over γ√n in log10."""
    n, gamma, w = 100, 0.01, 1000.0
    row = {"config": {"n_train": n}, "steps_taken": 17, "train_error": 0.25,
           "proxies": {"B_ours_sum": 5.0, "B_edelman": 7.0, "readout_norm": w, "n_params": 1234,
                       "p_star": {"QK": [1.0], "V": [2.0], "M": [3.0]}},
           "study": {"margin": gamma, "log10_theta": 4.0, "log10_spectral": 6.0, "dist_init": 1e3,
                     "sigma_sharp": 0.01, "pac_bayes": 0.1}}
    over = 2.0 - 1.0  # −log10 γ − ½ log10 n
    expected = {"B_ours": 5.0 + 3.0 + over, "theta": 4.0 + over, "B_edelman": 7.0 + 3.0 + over,
                "spectral": 6.0 + over, "dist_init": 3.0, "n_params": 1234, "mean_p_star": 2.0,
                "sharpness": 4.0, "pac_bayes": -1.0, "steps_taken": 17.0, "train_error": 0.25,
                "neg_log_n": -math.log(100)}
    assert set(expected) == set(ST.MEASURES)
    for name, v in expected.items():
        assert ST.measure([row], name)[0] == pytest.approx(v, rel=1e-14, abs=1e-14), name
    with pytest.raises(KeyError, match="unknown measure 'gap'; available: B_ours, theta, B_edelman, spectral, "
                                       "dist_init, n_params"):
        ST.measure([row], "gap")


def test_with_axes_fills_the_defaults_and_splits_by_the_target_loss():
    rows = [{"config": {"L": 1}, "reached_target": True, "x": 1},
            {"config": {"L": 2, "label_noise": 0.05}, "reached_target": False},
            {"config": {"L": 3}}]
    ok, out = ST.with_axes(rows)
    d = {"weight_decay": 0.0, "teacher_rank": 0, "teacher_seed": 0}  # the teacher draw: 0, the committed teacher
    assert ok == [{"config": {**d, "label_noise": 0.0, "L": 1}, "reached_target": True, "x": 1}]
    assert [r["config"] for r in out] == [{**d, "label_noise": 0.05, "L": 2}, {**d, "label_noise": 0.0, "L": 3}]
    assert rows[0]["config"] == {"L": 1}  # the input rows are not changed


def test_margin_gap_bound_closed_form():
    row = {"config": {"n_train": 400}, "study": {"margin": 0.25, "log10_theta": 0.5, "theta_gap_bound": 30.0}}
    main = 24.0 * 10 ** 0.5 / 20.0
    assert ST.margin_gap_bound(row) == pytest.approx(0.1 + (30.0 - main) + main / 0.25, rel=1e-14)


def test_spectral_complexity_reads_the_readout_norm():
    assert 10 ** ST.spectral_complexity([2.0], [2.0], 10.0) == pytest.approx(10 * 2 * 2 ** 1.5, rel=1e-12)


def test_training_margins_are_float64_products_of_labels_and_outputs():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -1.0]]))
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = torch.tensor([[1.0], [1.0], [-1.0]])
    m = ST.training_margins(model, X, y)
    assert m.dtype == np.float64
    np.testing.assert_array_equal(m, [[0.5], [-1.0], [0.5]])


class _Probe(torch.nn.Module):
    """Outputs ``(c − |p|, c − |p|, 0)`` for any input, ``p`` one float64 parameter (0 unperturbed): under
    the perturbation ``p = σz`` the first two examples are errors iff ``σ|z| ≥ c``, the third (a tie) always."""

    def __init__(self, c):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
        self.c = c

    def forward(self, X):
        v = self.c - self.p.abs()
        return torch.cat([v, v, torch.zeros(1, dtype=torch.float64)])


def _sharpness_by_hand(c, train_error, tolerance, seed, draws=ST.SHARPNESS_DRAWS):
    """The largest σ of the grid whose mean perturbed error is at most ``train_error + tolerance`` (the
    smallest σ and its error if none), from the draws ``z`` of a torch generator seeded by ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    z = [float(torch.randn((1,), generator=gen, dtype=torch.float64)) for _ in range(draws)]
    err = [float(np.mean([(1.0 + 2.0 * (c - abs(s * zk) <= 0)) / 3.0 for zk in z])) for s in ST.SIGMA_GRID]
    ok = [i for i, e in enumerate(err) if e <= train_error + tolerance]
    i = ok[0] if ok else len(ST.SIGMA_GRID) - 1
    return float(ST.SIGMA_GRID[i]), err[i], z


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_perturbation_sharpness_by_hand(seed):
    """The bisection's answer equals the brute-force one over the whole grid, for thresholds that make the
    answer the first grid point, an interior one, the last acceptable one, or none (then the smallest σ),
    with ties counted as errors and equality with the allowed error accepted."""
    X, y = torch.zeros(3, 1), torch.ones(3, dtype=torch.float64)
    z = _sharpness_by_hand(1.0, 1 / 3, 0.1, seed)[2]
    zmax = max(abs(v) for v in z)
    grid = ST.SIGMA_GRID
    cases = [(100.0, 1 / 3, 0.1),                  # σ = 1 already acceptable
             (0.5, 1 / 3, 0.1),                    # at most 1 of the 8 draws may exceed c
             (0.5, 1 / 3, 0.0),                    # equality: no draw may exceed c, e = 1/3 exactly accepted
             (1.2 * grid[-1] * zmax, 1 / 3, 0.0),  # only the smallest σ is acceptable
             (0.5, 0.0, 0.1),                      # the tie alone (1/3) is over the allowed error: none
             (0.5, 1 / 3, 0.5)]                    # up to 3 of the 8 draws may exceed c
    answers = set()
    for c, train_error, tol in cases:
        sigma, e, _ = _sharpness_by_hand(c, train_error, tol, seed)
        got = ST.perturbation_sharpness(_Probe(c), X, y, train_error, seed, tolerance=tol)
        assert got == (sigma, pytest.approx(e, rel=1e-15)), (c, train_error, tol)
        answers.add(sigma)
    assert {float(grid[0]), float(grid[-1])} <= answers and len(answers) >= 3
    assert ST.perturbation_sharpness(_Probe(0.5), X, y, 0.0, seed, tolerance=0.1)[0] == float(grid[-1])


def _cmi_by_hand(rows, m, axes, k):
    """``min_S I(V_m; V_g | U_S) / H(V_g | U_S)`` with plain dictionaries of counts (``U_S``: the pair's values
    of the axes of ``S``), and the minimising ``S`` (the first of equal ones)."""
    import itertools
    from collections import Counter

    g = [r["gap_error"] for r in rows]
    pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    best = (float("nan"), None)
    for S_ in itertools.combinations(axes, k):
        joint = Counter((tuple((rows[i]["config"][h], rows[j]["config"][h]) for h in S_),
                         float(np.sign(m[i] - m[j])), float(np.sign(g[i] - g[j]))) for i, j in pairs)
        n = len(pairs)
        pu, pum, pug = Counter(), Counter(), Counter()
        for (u, a, b), c in joint.items():
            pu[u] += c / n
            pum[u, a] += c / n
            pug[u, b] += c / n
        mi = sum(c / n * math.log((c / n) * pu[u] / (pum[u, a] * pug[u, b])) for (u, a, b), c in joint.items())
        h = -sum(p * math.log(p / pu[u]) for (u, b), p in pug.items())
        v = mi / h if h > 1e-12 else float("nan")
        if not math.isnan(v) and (math.isnan(best[0]) or v < best[0] - 1e-12):
            best = (v, S_)
    return best


@pytest.mark.parametrize("levels", [(3, 2, 4), (2, 2, 2)])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_conditional_mi_by_hand(k, levels):
    """K and its conditioning set against plain counting, for every size of the set, on three axes with
    different or equal numbers of levels (the cells of two axes must be coded without collisions), for a
    measure that carries information, one fixed by the last axis (the minimum at the last set), and noise."""
    rng = np.random.default_rng(11)
    rows = [{"config": {"A": a, "B": b, "C": c, "seed": s},
             "gap_error": 0.5 * a - 0.3 * b + 0.2 * c + rng.normal()}
            for a in range(levels[0]) for b in range(levels[1]) for c in range(levels[2]) for s in range(3)]
    g = np.array([r["gap_error"] for r in rows])
    for m in (g + 0.5 * rng.normal(size=g.size), np.array([r["config"]["C"] for r in rows], dtype=float),
              rng.normal(size=g.size)):
        K, S_min, p = ST.conditional_mi(rows, m, axes=("A", "B", "C"), k=k)
        K_ref, S_ref = _cmi_by_hand(rows, m, ("A", "B", "C"), k)
        assert K == pytest.approx(K_ref, rel=1e-9, abs=1e-12) and S_min == S_ref
        assert math.isnan(p)


def test_conditional_mi_permutation_p_value_edges():
    """The p-value counts the permutations that reach K (ties included, plus one); none asked: NaN; the
    default seed is 0; a gap whose order no conditioning leaves open gives (NaN, None)."""
    rng = np.random.default_rng(12)
    rows = [{"config": {"L": L, "N": N}, "gap_error": rng.normal()} for L in (1, 2) for N in (1, 2) for _ in range(4)]
    g = np.array([r["gap_error"] for r in rows])
    const = np.ones(g.size)
    assert ST.conditional_mi(rows, const, axes=("L", "N"), k=1, n_perm=9)[2] == 1.0  # K = 0 = every null value
    assert ST.conditional_mi(rows, g, axes=("L", "N"), k=1, n_perm=1)[2] == 0.5  # one permutation, below K = 1
    noisy = g + 2.0 * rng.normal(size=g.size)
    p = {s: ST.conditional_mi(rows, noisy, axes=("L", "N"), k=1, n_perm=49, seed=s)[2] for s in (0, 1, 2)}
    assert ST.conditional_mi(rows, noisy, axes=("L", "N"), k=1, n_perm=49)[2] == p[0]
    assert len(set(p.values())) > 1
    ordered = [{"config": {"L": 1}, "gap_error": float(i)} for i in range(6)]
    K, S_min, p = ST.conditional_mi(ordered, rng.normal(size=6), axes=("L",), k=0)
    assert math.isnan(K) and S_min is None and math.isnan(p)


def test_conditional_mi_p_value_is_the_share_of_the_seeded_permutations_and_k_defaults_to_one():
    """The permutation null is the generator ``seed``'s permutations of the measure, in order (recomputed here
    from ``default_rng(seed)``): the p-value of each seed is reproducible, not one draw of many; and without
    ``k`` the conditioning sets are the single axes (``k = 1``)."""
    rng = np.random.default_rng(13)
    rows = [{"config": {"L": L, "N": N}, "gap_error": rng.normal()} for L in (1, 2) for N in (1, 2) for _ in range(4)]
    noise = rng.normal(size=len(rows))  # unrelated to the gap: p-values spread over seeds (0.1 to 0.2 here)
    for seed in (0, 1, 2, 3):
        K, S_min, p = ST.conditional_mi(rows, noise, axes=("L", "N"), k=1, n_perm=29, seed=seed)
        perm = np.random.default_rng(seed)
        null = [ST.conditional_mi(rows, perm.permutation(noise), axes=("L", "N"), k=1)[0] for _ in range(29)]
        assert p == (1 + sum(v >= K for v in null)) / 30, seed
    K, S_min, p = ST.conditional_mi(rows, noise, axes=("L", "N"))
    assert (K, S_min) == ST.conditional_mi(rows, noise, axes=("L", "N"), k=1)[:2] and len(S_min) == 1


def test_conditional_mi_raises_no_warning_on_empty_cells_or_a_gap_fixed_by_the_conditioning():
    """Empty cells (0·log 0) and a conditioning set on which the gap's order is fixed (H = 0: NaN for that
    set, not 0/0) are handled without a NumPy warning, in the score and in its permutation null."""
    import warnings

    rng = np.random.default_rng(14)
    rows = [{"config": {"L": L, "N": N}, "gap_error": float(L) + 0.01 * rng.normal()}   # L fixes the gap's order
            for L in (1, 2) for N in (1, 2, 3) for _ in range(3)]
    m = rng.normal(size=len(rows))
    ordered = [{"config": {"L": 1}, "gap_error": float(i)} for i in range(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K, S_min, p = ST.conditional_mi(rows, m, axes=("L", "N"), k=1, n_perm=5)
        assert np.isfinite(K) and S_min == ("N",) and 0 < p <= 1
        K, S_min, p = ST.conditional_mi(ordered, rng.normal(size=6), axes=("L",), k=1)
        assert math.isnan(K) and S_min is None


def test_statistic_and_seed_sweep_default_to_seed_0_and_1000_resamples():
    """The pre-registered defaults: bootstrap seed 0 and 1000 resamples (recorded in the interval)."""
    rows = _study_rows()
    h = ST.Hypothesis("T", "", "tau", "steps_taken")
    iv = ST.statistic(h, rows)
    assert iv.n_boot == 1000 and iv == ST.statistic(h, rows, 0, 1000)
    assert ST.seed_sweep(h, rows, seeds=(0,)).intervals == (iv,)


def test_spectral_complexity_is_computed_in_float64_whatever_the_input_precision():
    """float32 spectra (a float32 checkpoint's) give the complexity of their values in float64, to the bit."""
    s1 = np.array([3.1, 2.7, 1.3], dtype=np.float32)
    n21 = np.array([5.9, 4.1, 2.2], dtype=np.float32)
    ref = ST.spectral_complexity([float(x) for x in s1], [float(x) for x in n21], 1.7)
    assert ST.spectral_complexity(s1, n21, 1.7) == ref


def test_verdict_rows_format_every_hypothesis():
    """One row per pre-registered hypothesis: the seed-0 interval, the widest over seeds, the Monte Carlo sd of
    the endpoints, the seeds with the claimed sign and the verdict; 2 decimals, or 4 where an endpoint that is
    not 0 is below 0.005 in size (0 itself and 0.005 keep 2; undefined endpoints are left out)."""
    iv = S.Interval
    nan = float("nan")
    given = {"H1": (iv(0.3, 0.1, 0.5, 1000), iv(0.31, 0.12, 0.52, 1000)),
             "H2": (iv(0.01, 0.001, 0.02, 1000),),
             "H3": (iv(0.1, 0.0, 0.2, 1000), iv(0.1, -0.005, 0.3, 1000)),
             "H4": (iv(nan, nan, nan, 1000), iv(0.2, 0.003, 0.4, 1000)),
             "H5": (iv(-0.2, -0.4, -0.1, 1000),) * 3}
    sweeps = {h.id: ST.SweepResult(given.get(h.id, (iv(0.2, 0.1, 0.3, 1000),)), h.claimed) for h in ST.HYPOTHESES}
    rows = ST.verdict_rows(sweeps)
    assert [r[:2] for r in rows] == [(h.id, h.text) for h in ST.HYPOTHESES]
    by = {r[0]: r[2:] for r in rows}
    assert by["H1"] == ("+0.30 [+0.10, +0.50]", "+0.30 [+0.10, +0.52]", "0.014 / 0.014", "2 of 2", "supported")
    assert by["H2"] == ("+0.0100 [+0.0010, +0.0200]", "+0.0100 [+0.0010, +0.0200]", "0.000 / 0.000", "1 of 1",
                        "supported")
    assert by["H3"] == ("+0.10 [+0.00, +0.20]", S.format_interval(iv(0.1, -0.005, 0.3, 1000), 2), "0.004 / 0.071",
                        "0 of 2", "refuted (no effect shown)")
    assert by["H4"][:2] == ("n/a", "n/a") and by["H4"][3:] == ("1 of 2", "borderline")
    assert by["H5"][3:] == ("0 of 3", "refuted (reversed)")
    four = ST.verdict_rows({**sweeps, "H4": ST.SweepResult((iv(0.2, 0.003, 0.4, 1000),), "+")})
    assert four[3][2] == "+0.2000 [+0.0030, +0.4000]"


def test_plot_bounds_vs_gap_draws_each_teacher_against_both_bounds():
    """Left: (gap, the corrected bound of :func:`margin_gap_bound`); right: (population error, PAC-Bayes); the
    rank-1 teacher in C0, the full-rank one in C3, both on a log scale with the dashed line bound = 1."""
    from matplotlib.colors import to_rgba

    def row(t, gap, test, pac, theta):
        return {"config": {"teacher_rank": t, "n_train": 100}, "gap_error": gap, "test_error": test, "other": -gap,
                "study": {"theta_gap_bound": 10.0 ** theta, "log10_theta": theta, "margin": 0.5, "pac_bayes": pac}}

    rows = [row(0, 0.1, 0.2, 0.9, 1.0), row(1, 0.2, 0.3, 0.8, 2.0), row(1, 0.05, 0.1, 0.7, 3.0)]
    for target in ("gap_error", "other"):
        fig = ST.plot_bounds_vs_gap(rows, **({} if target == "gap_error" else {"target": target}))
        assert tuple(fig.get_size_inches()) == (5.0, 3.0) and len(fig.axes) == 2
        a, b = fig.axes
        for ax, x, y in ((a, lambda r: r[target], ST.margin_gap_bound), (b, lambda r: r["test_error"],
                                                                            lambda r: r["study"]["pac_bayes"])):
            assert ax.get_yscale() == "log"
            (one,) = ax.lines
            assert (list(one.get_ydata()), one.get_color(), one.get_linewidth(), one.get_linestyle()) == \
                ([1.0, 1.0], "k", 0.8, "--")
            assert [c.get_label() for c in ax.collections] == ["rank-1 teacher", "full-rank teacher"]
            for c, t, colour in zip(ax.collections, (1, 0), ("C0", "C3")):
                rs = [r for r in rows if r["config"]["teacher_rank"] == t]
                np.testing.assert_allclose(c.get_offsets(), [(x(r), y(r)) for r in rs], rtol=1e-14)
                assert list(c.get_sizes()) == [12] and tuple(c.get_facecolor()[0]) == to_rgba(colour)
        assert (a.get_xlabel(), a.get_ylabel(), a.get_title()) == ("measured gap (exact)",
                                                                   "corrected bound on the 0-1 gap",
                                                                   "Chapter 5's theorem")
        assert (b.get_xlabel(), b.get_ylabel(), b.get_title()) == ("population error (exact)", "PAC-Bayes bound",
                                                                   "prior at initialisation")
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ["rank-1 teacher", "full-rank teacher"]
        assert (legend._loc, legend._outside_loc, legend._ncols) == (8, "lower", 2)  # "outside lower center"
        import matplotlib.pyplot as plt

        plt.close(fig)
