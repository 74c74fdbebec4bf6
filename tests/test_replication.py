"""Chapter 9's pre-registered replication: the teacher draw (``teacher_seed``), the digits task, the
replication presets through the runner, and the three-stage bootstrap with the teacher as the top cluster."""
from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import torch

from bounds_lib.studies import stats as S
from bounds_lib.studies import study as ST
from bounds_lib.studies.grid import PRESETS, grid_configs, main
from bounds_lib.studies.replication import (DIGITS_GRID, REPLICATION_GRID, REPLICATION_LARGE_GRID,
                                            SMALL_DIGITS_GRID, SMALL_REPLICATION_GRID, cost_note,
                                            estimated_seconds, replication_configs, retraining_seconds,
                                            teacher_clusters)
from bounds_lib.studies.results import check_results, load_results, read_results
from bounds_lib.studies.tasks import (DIGITS_SHAPE, BooleanTask, all_bits, digits_data, digits_split, encode,
                                      heldout_digits, sample, teacher_labels_all, token_embedding)
from bounds_lib.studies.training import TrainConfig, exact_population, heldout_population, train


# ----------------------------------------------------------------------------- teacher_seed


def test_teacher_seed_round_trips_and_is_left_out_at_its_default():
    base = dict(L=1, N=4, n_train=16, kind="teacher", T=8, s=1, n_test=256, teacher_rank=1)
    c0 = TrainConfig(**base)
    assert "teacher_seed" not in c0.as_dict() and TrainConfig(**c0.as_dict()) == c0
    c2 = TrainConfig(**base, teacher_seed=2)
    d = json.loads(json.dumps(c2.as_dict()))
    assert d["teacher_seed"] == 2 and TrainConfig(**d) == c2 and c2 != c0


def test_committed_robust_rows_load_without_the_key_and_keep_their_identity():
    rows = load_results("robust")["rows"]
    for r in rows:
        assert "teacher_seed" not in r["config"]
        c = TrainConfig(**r["config"])
        assert c.teacher_seed == 0 and c.as_dict() == r["config"]


def test_teacher_seed_draws_another_teacher_and_zero_is_the_committed_one():
    assert np.array_equal(teacher_labels_all(10, 1), teacher_labels_all(10, 1, 0))
    assert not np.array_equal(teacher_labels_all(10, 1, 0), teacher_labels_all(10, 1, 1))
    task = BooleanTask(kind="teacher", T=10, s=1, N=4, teacher_rank=1, teacher_seed=1)
    _, y, bits = sample(task, 200, 0)
    assert np.array_equal(y, teacher_labels_all(10, 1, 1)[(bits > 0).astype(int) @ (1 << np.arange(10))])


def test_exact_population_uses_the_drawn_teacher():
    cfg = TrainConfig(L=1, N=4, n_train=32, kind="teacher", T=8, s=1, n_test=256, teacher_rank=1, teacher_seed=3,
                      steps=5)
    res = train(cfg)
    X = torch.as_tensor(encode(all_bits(8), token_embedding(8, 4, cfg.seed)), dtype=torch.float32)
    with torch.no_grad():
        f = res.torch_model(X).double().numpy()
    y = teacher_labels_all(8, 1, 3)
    assert res.test_error == pytest.approx(float(np.mean(y * f <= 0)), abs=1e-12)
    assert exact_population(res.torch_model, cfg.task())[1] == res.test_error


@pytest.mark.parametrize("kw, err, match", [
    ({"teacher_seed": -1}, ValueError, "teacher_seed"),
    ({"teacher_seed": 1.0}, TypeError, "teacher_seed"),
    ({"teacher_seed": 1, "kind": "parity"}, ValueError, "has none"),
])
def test_teacher_seed_is_validated(kw, err, match):
    args = dict(kind="teacher", T=8, s=1, N=4) | kw
    with pytest.raises(err, match=match):
        BooleanTask(**args)


# ----------------------------------------------------------------------------- the digits task


def test_digits_load_offline_with_their_shape_and_labels(monkeypatch):
    def no_network(*a, **k):
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    digits_data.cache_clear()
    pixels, labels, digits = digits_data()
    assert pixels.shape == (1797, 8, 8) and pixels.min() == 0.0 and pixels.max() == 1.0
    assert np.array_equal(labels, np.where(digits >= 5, 1.0, -1.0)) and int((labels > 0).sum()) == 896
    assert not pixels.flags.writeable


def test_digits_split_is_deterministic_and_the_test_set_is_every_other_image():
    a, b = digits_split(3), digits_split(3)
    assert np.array_equal(a, b) and not np.array_equal(a, digits_split(4))
    task = BooleanTask(kind="digits", T=8, s=1, N=4, seed=3)
    X, y, idx = sample(task, 128, 0)
    Xh, yh, hidx = heldout_digits(task, 128)
    assert X.shape == (128, 9, 4) and Xh.shape == (1669, 9, 4)
    assert np.array_equal(idx, a[:128]) and np.array_equal(hidx, a[128:])
    assert sorted(np.concatenate([idx, hidx]).tolist()) == list(range(DIGITS_SHAPE["images"]))
    labels = digits_data()[1]
    assert np.array_equal(y, labels[idx]) and np.array_equal(yh, labels[hidx])
    X2, _, _ = sample(task, 128, 0)
    assert np.array_equal(X, X2) and np.allclose(X[:, 0], X[0, 0])  # row 0 is the fixed [CLS] token


def test_digits_label_noise_flips_training_labels_only():
    clean = BooleanTask(kind="digits", T=8, s=1, N=4, seed=1)
    noisy = BooleanTask(kind="digits", T=8, s=1, N=4, seed=1, label_noise=0.2)
    X0, y0, i0 = sample(clean, 1000, 0)
    X1, y1, i1 = sample(noisy, 1000, 0)
    assert np.array_equal(X0, X1) and np.array_equal(i0, i1)
    assert 0.15 < np.mean(y0 != y1) < 0.25
    assert np.array_equal(heldout_digits(noisy, 1000)[1], heldout_digits(clean, 1000)[1])


@pytest.mark.parametrize("kw, match", [
    ({"T": 16}, "T = 8"), ({"random_labels": True}, "random_labels"), ({"teacher_rank": 1}, "teacher_rank"),
    ({"n_test": 1000}, "n_test"), ({"disjoint_test": True}, "disjoint_test"),
])
def test_digits_configs_are_validated(kw, match):
    args = dict(L=1, N=4, n_train=32, kind="digits", T=8, s=1, n_test=1765) | kw
    with pytest.raises(ValueError, match=match):
        TrainConfig(**args)


def test_digits_stream_and_sizes_are_validated():
    task = BooleanTask(kind="digits", T=8, s=1, N=4)
    with pytest.raises(ValueError, match="stream 0"):
        sample(task, 10, 1)
    with pytest.raises(ValueError, match="test image"):
        sample(task, 1797, 0)
    with pytest.raises(ValueError, match="digits task"):
        heldout_digits(BooleanTask(kind="parity", T=8, s=2), 10)


@pytest.mark.parametrize("eta", [0.0, 0.1])
def test_digits_test_error_is_the_held_out_error_under_the_label_noise(eta):
    cfg = TrainConfig(L=1, N=4, n_train=64, kind="digits", T=8, s=1, n_test=1733, steps=20, lr=0.03,
                      label_noise=eta)
    res = train(cfg)
    X, y, _ = heldout_digits(cfg.task(), 64)
    with torch.no_grad():
        m = y * res.torch_model(torch.as_tensor(X, dtype=torch.float32)).double().numpy()
    clean = float(np.mean(m <= 0))
    assert res.clean_test_error == pytest.approx(clean, abs=1e-12)
    assert res.test_error == pytest.approx(eta + (1 - 2 * eta) * clean, abs=1e-12)  # no margin is exactly 0
    assert heldout_population(res.torch_model, cfg.task(), 64)[1] == res.test_error


# ----------------------------------------------------------------------------- presets and the runner


def test_replication_presets_have_the_pre_registered_sizes_in_seed_major_order():
    teacher = replication_configs(REPLICATION_GRID)
    assert len(teacher) == 330 and len(replication_configs(DIGITS_GRID)) == 40
    assert len(replication_configs(REPLICATION_LARGE_GRID)) == 1750
    fact = [c for c in teacher if c.n_train == 128]
    assert len(fact) == 240 and {c.teacher_seed for c in teacher} == {0, 1, 2}
    assert {(c.lr, c.weight_decay) for c in teacher} == {(0.03, 0.0)}
    assert [c.seed for c in teacher] == sorted(c.seed for c in teacher)  # seed-major: resumable, balanced
    assert sorted({c.n_train for c in teacher}) == [64, 128, 256, 512]
    assert len(set(teacher)) == len(teacher)
    assert all(c.n_test == 1797 - 128 for c in replication_configs(DIGITS_GRID))
    assert grid_configs(PRESETS["robust-replication"]) == teacher  # the runner dispatches to them


def test_cost_estimate_stays_within_the_amendments_budget():
    teacher = estimated_seconds(replication_configs(REPLICATION_GRID)) / 60
    digits = estimated_seconds(replication_configs(DIGITS_GRID)) / 60
    assert teacher + digits <= 90
    assert "330 models" in cost_note(REPLICATION_GRID) and "CPU-min" in cost_note(DIGITS_GRID, jobs=2)
    noisy = cost_note(REPLICATION_GRID, select={"label_noise": {0.05}})
    assert "120 models" in noisy
    # sensitivity (b): the committed noisy arm's excluded models, retrained for 6000 steps, scaled to 120 models
    committed = load_results("robust")["rows"]
    b = retraining_seconds(committed) / 60 * 120 / 64
    assert teacher + digits + b <= 90
    assert retraining_seconds(committed, steps=3000) < retraining_seconds(committed)


def _check_study_rows(rows):
    ok, out = ST.with_axes(rows)  # the pre-registered exclusion rule: the analysed rows reached the loss
    assert len(ok) + len(out) == len(rows) and len(ok) >= 3
    for name in ST.MEASURES:
        v = ST.measure(ok, name)
        assert v.shape == (len(ok),) and np.all(np.isfinite(v)), name
    for r in rows:
        assert 0 <= r["population_error_clean"] <= 1 and "log10_theta" in r["study"]


def test_small_replication_preset_runs_through_the_runner_and_resumes(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--out", str(out), "--preset", "robust-replication", "--small"]) == 0
    assert "16 models, estimated" in capsys.readouterr().err
    res = read_results(out)
    rows = res["rows"]
    assert len(rows) == 16 and res["metadata"]["backend"] == "in process"
    assert {r["config"].get("teacher_seed", 0) for r in rows} == {0, 1}
    _check_study_rows(rows)
    again = tmp_path / "r2.json"
    assert main(["--out", str(again), "--preset", "robust-replication", "--small", "--reuse", str(out)]) == 0
    assert read_results(again)["metadata"]["reused_rows"] == 16
    # the three-stage bootstrap runs on the rows, with the teacher draw as the top cluster
    W = S.bootstrap_weights(ST.clusters(rows), n_boot=50, top=teacher_clusters(rows))
    g = [r["gap_error"] for r in rows]
    iv = S.kendall_interval(ST.measure(rows, "B_ours"), g, W)
    assert -1 <= iv.value <= 1


def test_small_digits_preset_runs_through_the_runner(tmp_path):
    out = tmp_path / "d.json"
    assert main(["--out", str(out), "--preset", "digits", "--small", "--jobs", "2"]) == 0
    res = check_results(json.loads(out.read_text()), "d.json")
    rows = res["rows"]
    assert res["metadata"]["backend"] == "process pool (2)"
    assert len(rows) == len(replication_configs(SMALL_DIGITS_GRID)) == 4
    assert {r["config"]["kind"] for r in rows} == {"digits"} and all(r["config"]["n_test"] == 1765 for r in rows)
    _check_study_rows(rows)
    assert teacher_clusters(rows) == [0] * 4


def test_teacher_clusters():
    rows = [{"config": {"teacher_rank": 1}}, {"config": {"teacher_rank": 0, "teacher_seed": 2}}]
    assert teacher_clusters(rows) == [0, 2]
    assert teacher_clusters(rows, by="teacher") == [(1, 0), (0, 2)]
    with pytest.raises(ValueError, match="draw"):
        teacher_clusters(rows, by="rank")
    assert len(replication_configs(SMALL_REPLICATION_GRID)) == 16


# ----------------------------------------------------------------------------- the three-stage bootstrap


def _two_stage_reference(clusters, n_boot, seed):
    """The two-stage bootstrap as it was written before the three-stage generalisation (reference copy)."""
    labels = list(clusters)
    keys = {k: j for j, k in enumerate(dict.fromkeys(labels))}
    idx = np.array([keys[k] for k in labels])
    C = len(keys)
    members = [np.flatnonzero(idx == j) for j in range(C)]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(C, np.full(C, 1.0 / C), size=n_boot)
    W = np.zeros((n_boot, len(labels)))
    for j, m in enumerate(members):
        if m.size == 1:
            W[:, m[0]] = counts[:, j]
        else:
            for b in np.flatnonzero(counts[:, j]):
                W[b, m] = rng.multinomial(counts[b, j] * m.size, np.full(m.size, 1.0 / m.size))
    return W


@pytest.mark.parametrize("seed", [0, 3])
def test_two_stage_bootstrap_is_unchanged(seed):
    rng = np.random.default_rng(seed)
    labels = [f"c{k}" for k in rng.integers(0, 9, size=40)]
    assert np.array_equal(S.bootstrap_weights(labels, 300, seed), _two_stage_reference(labels, 300, seed))
    rows = load_results("robust")["rows"][:60]
    cl = ST.clusters(rows)
    assert np.array_equal(S.bootstrap_weights(cl, 200, seed), _two_stage_reference(cl, 200, seed))


@pytest.mark.parametrize("seed", [0, 5])
def test_three_stage_reduces_to_two_stage_with_one_configuration_per_teacher(seed):
    rng = np.random.default_rng(seed)
    configs = [f"c{k}" for k in rng.integers(0, 7, size=30)]
    teachers = [f"t{c}" for c in configs]  # every teacher holds exactly one configuration group
    three = S.bootstrap_weights(configs, 400, seed, top=teachers)
    assert np.array_equal(three, S.bootstrap_weights(configs, 400, seed))


def test_three_stage_resamples_whole_teachers():
    teachers = np.repeat([0, 1, 2], 6)
    configs = np.tile(np.repeat([0, 1, 2], 2), 3)  # the same labels in every teacher: nested, not shared
    W = S.bootstrap_weights(list(configs), 500, 0, top=list(teachers))
    assert np.all(W.sum(axis=1) == 18)
    per_teacher = np.stack([W[:, teachers == t].sum(axis=1) for t in range(3)], axis=1)
    assert np.all(per_teacher % 6 == 0)  # a teacher's rows are drawn 6 at a time: once per drawn copy
    assert np.any(per_teacher == 0) and np.any(per_teacher == 18)
    with pytest.raises(ValueError, match="same rows"):
        S.bootstrap_weights([0, 1], 10, top=[0])


def _design(T, K, m):
    t = np.repeat(np.arange(T), K * m)
    k = np.tile(np.repeat(np.arange(K), m), T)
    return t, k


def test_three_stage_bootstrap_variance_of_the_mean_has_its_closed_form():
    """Nested resampling: Var*(mean) = (V_T + E V_K / K + E V_m / (K m)) / T, population variances."""
    T, K, m = 4, 3, 2
    t, k = _design(T, K, m)
    y = np.random.default_rng(1).standard_normal(t.size) + 2.0 * t + 0.5 * k
    W = S.bootstrap_weights(list(zip(t, k)), 4000, 0, top=list(t))
    draws = W @ y / t.size
    cell = y.reshape(T, K, m)
    V_m = cell.var(axis=2).mean()
    V_K = cell.mean(axis=2).var(axis=1).mean()
    V_T = cell.mean(axis=(1, 2)).var()
    closed = (V_T + V_K / K + V_m / (K * m)) / T
    assert draws.mean() == pytest.approx(y.mean(), abs=4 * np.sqrt(closed / 4000))
    assert draws.var() == pytest.approx(closed, rel=0.1)


def test_three_stage_intervals_cover_a_teacher_clustered_mean_where_two_stage_does_not():
    """Synthetic sample y = a_t + b_tk + e (true mean 0) with a strong teacher effect: the percentile
    interval of the three-stage bootstrap covers near its level; ignoring the teacher under-covers."""
    T, K, m = 10, 4, 2
    t, k = _design(T, K, m)
    cfg = list(zip(t, k))
    W3 = S.bootstrap_weights(cfg, 1000, 0, top=list(t))
    W2 = S.bootstrap_weights(cfg, 1000, 0)
    rng = np.random.default_rng(7)
    hit3 = hit2 = 0
    n_sim = 400
    for _ in range(n_sim):
        y = rng.standard_normal(T)[t] + 0.3 * rng.standard_normal(T * K)[t * K + k] + 0.3 * rng.standard_normal(t.size)
        for W, name in ((W3, 3), (W2, 2)):
            lo, hi = np.quantile(W @ y / W.sum(axis=1), [0.025, 0.975])
            if lo <= 0 <= hi:
                hit3, hit2 = (hit3 + 1, hit2) if name == 3 else (hit3, hit2 + 1)
    assert hit3 / n_sim >= 0.85 and hit2 / n_sim <= 0.8
