"""Chapter 9's confirmatory analysis (bounds_lib.studies.replication_report): the stored tables recompute."""
import numpy as np
import pytest

from bounds_lib.studies import controls as C
from bounds_lib.studies import replication_report as RR
from bounds_lib.studies import results as R
from bounds_lib.studies import stats as S
from bounds_lib.studies import study as ST
from bounds_lib.studies import verdicts as V


@pytest.fixture(scope="module")
def rows():
    ok, _ = ST.with_axes(R.load_results("replication")["rows"])
    return ok


def test_the_committed_rows_keep_their_positive_control_key():
    row = {"config": {"L": 1, "seed": 0}}
    assert C._config_key(row["config"]) == C._config_key({"L": 1, "seed": 0, "teacher_seed": 0})
    assert C._config_key(row["config"]) != C._config_key({"L": 1, "seed": 0, "teacher_seed": 1})


def test_weights_resample_teacher_draws_first(rows):
    W = RR.weights(rows, (0,), n_boot=20)[0]
    assert W.shape == (20, len(rows))
    draws = np.array([r["config"]["teacher_seed"] for r in rows])
    drawn = [{int(d) for d in draws[w > 0]} for w in W]
    assert any(len(d) < 3 for d in drawn)  # a resample can miss a whole teacher draw


def test_environments_are_matched_within_a_teacher_draw(rows):
    envs = RR.environments(rows, "B_ours")
    assert envs and all(e.axis in RR.HYPERS for e in envs)
    for e in envs[:50]:
        for i, j in e.pairs:
            assert rows[i]["config"]["teacher_seed"] == rows[j]["config"]["teacher_seed"]
            assert rows[i]["config"]["seed"] == rows[j]["config"]["seed"]


def test_pstar_pairs_match_the_study_within_each_draw(rows):
    d, draws = RR.pstar_pairs(rows)
    assert d.size == len(draws) and set(draws) <= {0, 1, 2}
    sub = [r for r in rows if r["config"]["teacher_seed"] == 1]
    assert np.allclose(np.sort(d[np.array(draws) == 1]), np.sort(ST.pstar_rank_differences(sub)))


def test_one_stored_sweep_entry_recomputes_exactly(rows):
    stored = RR.load_report()
    h = ST.HYPOTHESES[0]
    W = RR.weights(rows, (3,), stored["n_boot"])
    sw = RR.hypothesis_sweep(h, rows, W, (3,), stored["n_boot"])
    assert [sw.intervals[0].value, sw.intervals[0].lo, sw.intervals[0].hi] == stored["sweeps"][h.id]["intervals"][3]


def test_h9_cluster_entry_and_a_ranking_point_value_recompute(rows):
    stored = RR.load_report()
    sw = RR.pstar_cluster_sweep(rows, (0,), stored["n_boot"])
    iv = sw.intervals[0]
    assert [iv.value, iv.lo, iv.hi] == stored["sweeps"]["H9′"]["intervals"][0]
    g = np.array([r["gap_error"] for r in rows])
    t = S.kendall_tau(V.measure_values(rows, "control:4096"), g)
    assert t == pytest.approx(stored["ranking"]["measures"]["control:4096"]["tau"][0], abs=1e-12)


def test_digits_entry_recomputes():
    stored = RR.load_report()["digits"]
    drows, _ = ST.with_axes(R.load_results("digits")["rows"])
    out = RR.digits_ranking(drows, names=("B_ours",), n_boot=1000)
    assert out["measures"]["B_ours"]["tau"] == stored["measures"]["B_ours"]["tau"]


@pytest.mark.slow
def test_one_stored_power_entry_recomputes_exactly(rows):
    stored = RR.load_replication_power()
    p = stored["tests"]["A3"]
    k = 2
    sub = [r for r in rows if r["config"]["label_noise"] == p["level"]]
    pr = V.power_curve(sub, (stored["deltas"][k],), paired=True, seed=stored["seed"] + k, n_sim=stored["n_sim"],
                       n_boot=stored["n_boot"], tau_base=p["tau_base"], noise_corr=p["noise_corr"],
                       icc=max(p["icc"], 0.0), top=RR.teacher_clusters(sub))
    assert pr.power[0] == p["power"][k]


# ----------------------------------------------------------------------------- exclusion sensitivity


@pytest.fixture(scope="module")
def budget():
    return R.load_results("replication_6000")


def test_sensitivity_sets_follow_the_amendment(budget):
    raw = R.load_results("replication")["rows"]
    sets = RR.sensitivity_sets(raw, budget)
    ok, out = ST.with_axes(raw)
    arm = lambda r: r["config"].get("label_noise") == 0.05  # noqa: E731  (the arm the budget file selects)
    # (a): every model but the excluded ones without a positive margin
    assert len(sets["a"]) + sets["a_no_margin"] == len(raw)
    assert sets["a_no_margin"] == sum(r["study"]["margin"] <= 0 for r in out) > 0
    assert all(r["study"]["margin"] > 0 for r in sets["a"])
    # (b): the analysed models outside the arm, and the arm as trained for the larger budget
    reached = [r for r in budget["rows"] if r["reached_target"]]
    assert sets["arm"] == sum(arm(r) for r in raw) == len(budget["rows"])
    assert len(sets["b"]) == sum(not arm(r) for r in ok) + len(reached)
    assert {r["steps_taken"] for r in sets["b"] if arm(r)} == {r["steps_taken"] for r in reached}
    assert max(r["steps_taken"] for r in sets["b"] if arm(r)) > 3000  # models that needed the larger budget


def test_sensitivity_sets_refuse_a_budget_without_its_arm(budget):
    raw = R.load_results("replication")["rows"]
    with pytest.raises(ValueError, match="name no arm"):
        RR.sensitivity_sets(raw, {**budget, "metadata": {**budget["metadata"], "select": {}}})
    with pytest.raises(ValueError, match="has no row in the budget results"):
        RR.sensitivity_sets(raw, {**budget, "rows": budget["rows"][1:]})


def test_a_stored_sensitivity_entry_recomputes_exactly(budget):
    stored = RR.load_report()["sensitivity"]
    sets = RR.sensitivity_sets(R.load_results("replication")["rows"], budget)
    h = ST.HYPOTHESES[0]
    for k in ("a", "b"):
        assert stored[k]["n_models"] == len(sets[k])
        sw = RR.hypothesis_sweep(h, sets[k], RR.weights(sets[k], (0,), 1000), (0,), 1000)
        iv = sw.intervals[0]
        assert [iv.value, iv.lo, iv.hi] == stored[k]["claims"][h.id]["intervals"][0]


def test_the_stored_confound_tables_recompute(rows):
    # Least squares (LAPACK) and logarithms (SIMD) differ in the last bits between CPU kinds: measured
    # 6e-15 relative with NumPy's AVX-512/AVX2 paths off and OpenBLAS as Haswell; compared at 1e-9.
    tol = dict(rel=1e-9, abs=1e-12)
    stored = RR.load_report()["confound"]
    axes = RR.HYPERS + RR.FIXED
    vs = C.gap_variance_by_axis(rows, axes=axes)
    assert stored["shares"] == pytest.approx(dict(vs.shares), **tol)
    assert stored["residual"] == pytest.approx(vs.residual, **tol)
    v = V.measure_values(rows, "B_ours")
    k1, best, _ = ST.conditional_mi(rows, v, axes=axes, k=1)
    k0 = ST.conditional_mi(rows, v, axes=axes, k=0)[0]
    assert stored["cmi"]["B_ours"][:2] == pytest.approx([k0, k1], **tol)
    assert stored["cmi"]["B_ours"][2] == list(best)
    # the floor is the central 95 % of 1000 permuted 𝒦₁: 40 of them recomputed, most inside it
    lo, hi = stored["cmi_floor"]
    perm = [ST.conditional_mi(rows, C.shuffled_control(v, s), axes=axes, k=1)[0] for s in range(40)]
    inside = np.mean([lo <= p <= hi for p in perm])
    assert inside >= 0.8, inside
    assert k1 > 10 * hi  # μ_ours's 𝒦₁ is far above the floor (the page's reading)


def _planted(L, eta, seed, reached, margin, steps=3000):
    return {"config": {"L": L, "label_noise": eta, "seed": seed, "steps": steps}, "reached_target": reached,
            "study": {"margin": margin}}


def test_sensitivity_sets_on_planted_rows_keep_order_defaults_and_the_margin_rule():
    rows = [_planted(1, 0.0, 0, True, 1.0), _planted(1, 0.05, 0, False, 0.0), _planted(2, 0.05, 0, True, 0.5),
            _planted(2, 0.0, 0, False, -1.0), _planted(1, 0.0, 1, True, 0.0)]
    budget = {"metadata": {"select": {"label_noise": [0.05]}},
              "rows": [_planted(1, 0.05, 0, True, 0.3, steps=6000), _planted(2, 0.05, 0, True, 0.6, steps=6000)]}
    sets = RR.sensitivity_sets(rows, budget)
    # (a): an analysed model is kept whatever its margin; an excluded one only with a positive margin
    assert [(r["config"]["L"], r["config"]["seed"], r["config"]["label_noise"]) for r in sets["a"]] == [
        (1, 0, 0.0), (2, 0, 0.05), (1, 1, 0.0)]
    assert sets["a_no_margin"] == 2
    # (b): the arm's rows from the budget file, in the replication's order; the excluded outside the arm dropped
    assert [(r["config"]["L"], r["config"]["seed"], r["config"]["steps"]) for r in sets["b"]] == [
        (1, 0, 3000), (1, 0, 6000), (2, 0, 6000), (1, 1, 3000)]
    assert sets["arm"] == 2 and sets["arm_reached"] == 2
    # every row has the axes' defaults filled in (the teacher draw), as the analysis reads them
    assert all(r["config"]["teacher_seed"] == 0 for k in ("a", "b") for r in sets[k])
    budget["rows"][0]["reached_target"] = False
    again = RR.sensitivity_sets(rows, budget)
    assert again["arm_reached"] == 1 and len(again["b"]) == 3
    with pytest.raises(ValueError, match=r"^the budget results name no arm \(metadata\['select'\] is empty\)$"):
        RR.sensitivity_sets(rows, {**budget, "metadata": {}})


def test_sensitivity_and_confound_tables_are_the_pieces_they_are_made_of(rows, budget):
    raw = R.load_results("replication")["rows"]
    sub = RR.sensitivity(raw, budget, n_boot=20)
    sets = RR.sensitivity_sets(raw, budget)
    assert {k: sub[k] for k in ("a_no_margin", "arm", "arm_reached")} == {
        k: sets[k] for k in ("a_no_margin", "arm", "arm_reached")}
    for k in ("a", "b"):
        assert sub[k]["n_models"] == len(sets[k])
        assert sub[k]["claims"] == RR.claims_sweeps(sets[k], (0,), 20)
    # the teacher draw's own indicator: 𝒦₁ = 0 only when the draw is among the conditioning axes
    names = ("B_ours", "n_params", "shuffled:B_ours", "axis:teacher_seed")
    conf = RR.confound_tables(rows, names=names, n_perm=6)
    assert conf["cmi"]["axis:teacher_seed"][1:] == [0.0, ["teacher_seed"]]
    axes = RR.HYPERS + RR.FIXED
    vs = C.gap_variance_by_axis(rows, axes=axes)
    assert conf["shares"] == dict(vs.shares) and conf["marginal"] == dict(vs.marginal)
    assert conf["residual"] == vs.residual and list(conf["cmi"]) == list(names)
    for k in names:
        v = V.measure_values(rows, k)
        k1, best, _ = ST.conditional_mi(rows, v, axes=axes, k=1)
        assert conf["cmi"][k] == [ST.conditional_mi(rows, v, axes=axes, k=0)[0], k1, list(best)]
    ours = V.measure_values(rows, "B_ours")
    floor = V.permutation_range([ST.conditional_mi(rows, C.shuffled_control(ours, s), axes=axes, k=1)[0]
                                 for s in range(6)])
    assert conf["cmi_floor"] == list(floor)


def test_the_stored_tables_were_made_with_the_functions_defaults():
    import inspect

    stored = RR.load_report()
    default = lambda f, name: inspect.signature(f).parameters[name].default  # noqa: E731
    assert default(RR.confound_tables, "n_perm") == stored["n_perm"]
    assert default(RR.sensitivity, "n_boot") == default(RR.confirmatory_report, "n_boot") == stored["n_boot"]
    assert default(RR.sensitivity, "seeds") == (0,)
