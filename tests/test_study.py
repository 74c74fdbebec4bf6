"""Chapter 9's robust study: the planted teacher and its exact population error, the measures' closed forms,
the statistics on synthetic data with known answers (power and null), and the pre-registration."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from bounds_lib import stats as S
from bounds_lib import study as ST
from bounds_lib.grid import ROBUST_GRID, SMALL_ROBUST_GRID, grid_configs, robust_configs, run_grid
from bounds_lib.model import forward
from bounds_lib.norms import singular_values
from bounds_lib.results import check_results
from bounds_lib.tasks import (BooleanTask, all_bits, bit_index, encode, planted_teacher, sample, teacher_labels_all,
                              token_embedding)
from bounds_lib.training import TrainConfig, exact_population, train

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


def test_study_measures_store_the_distance_to_init_and_its_square_in_the_pac_bayes_bound():
    """A trained model's ``dist_init`` is ``√Σ(θ − θ₀)²`` against its own seeded initialisation (summed here
    in NumPy), and the PAC-Bayes bound's KL term takes its square."""
    from bounds_lib.training import initial_model

    cfg = TrainConfig(kind="teacher", T=8, s=1, N=4, L=1, n_train=32, n_test=256, steps=30, lr=0.03, teacher_rank=1)
    res = train(cfg)
    m = ST.study_measures(res)
    m0 = initial_model(cfg, next(res.torch_model.parameters()).dtype)
    sq = sum(float(np.sum((p.detach().numpy().astype(np.float64) - p0.detach().numpy().astype(np.float64)) ** 2))
             for p, p0 in zip(res.torch_model.parameters(), m0.parameters()))
    assert sq > 1e-4  # the model moved
    assert m["dist_init"] == pytest.approx(math.sqrt(sq), rel=1e-12)
    assert m["pac_bayes"] == pytest.approx(ST.pac_bayes_bound(sq, m["sigma_sharp"], m["err_q"], cfg.n_train),
                                           rel=1e-12)


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
    from bounds_lib.grid import PRESETS, ROBUST_LARGE_GRID

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

    from bounds_lib.results import load_results
    from bounds_lib.training import TrainConfig

    d = load_results("robust")
    assert d["metadata"]["grid"] == json.loads(json.dumps(ROBUST_GRID))
    assert [TrainConfig(**r["config"]) for r in d["rows"]] == robust_configs(ROBUST_GRID)
    ok, out = ST.with_axes(d["rows"])
    assert len(ok) + len(out) == len(d["rows"]) and all(r["train_loss"] <= 0.05 for r in ok)
    # the margin of every analysed model is positive (train error <= 0.05 / log 2 < 0.1), as pre-registered
    assert all(r["study"]["margin"] > 0 and r["train_error"] < 0.1 for r in ok)


def test_robust_preset_runs_from_the_command_line_and_resumes(tmp_path):
    import json

    from bounds_lib.grid import main
    from bounds_lib.results import read_results

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
