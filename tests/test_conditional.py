"""Chapter 9's conditional analyses (bounds_lib.studies.conditional, amendment 2): the statistics on
planted data with known answers, each able to fail, and every stored entry recomputed."""
import numpy as np
import pytest

from bounds_lib.studies import conditional as K
from bounds_lib.studies import stats as S
from bounds_lib.studies import study as ST


def _planted(n_cells=6, per=8, seed=0):
    """Rows in cells (the cell = η, n); L, N vary inside; the gap = cell effect + within-cell part."""
    rng = np.random.default_rng(seed)
    rows, cell_effect, inside = [], [], []
    for c in range(n_cells):
        for i in range(per):
            cfg = {"label_noise": c % 2 * 0.05, "n_train": 64 * (1 + c // 2), "L": 1 + i % 2,
                   "N": 16 * (1 + i // 2 % 2), "seed": i // 4}
            e, w = 3.0 * c, rng.standard_normal()
            rows.append({"config": cfg, "gap_error": e + w})
            cell_effect.append(e)
            inside.append(w)
    return rows, np.array(cell_effect), np.array(inside)


DESIGN = K.Design("planted", ("L", "N", "label_noise", "n_train"), "seed")


def test_stratified_tau_is_kendalls_tau_inside_one_cell():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(12), rng.standard_normal(12)
    assert K.stratified_tau(x, y, np.zeros(12, int), np.ones(12))[0] == pytest.approx(S.kendall_tau(x, y), abs=1e-12)


def test_stratified_tau_weights_cells_by_their_pairs():
    g = np.arange(7.0)
    cells = np.array([0, 0, 0, 0, 1, 1, 1])  # 6 pairs at τ = 1, 3 pairs at τ = −1
    m = np.concatenate([g[:4], -g[4:]])
    assert K.stratified_tau(m, g, cells, np.ones(7))[0] == pytest.approx((6 - 3) / 9)


def test_a_measure_that_only_knows_the_cells_is_credited_overall_but_not_within_cells():
    rows, cell_effect, inside = _planted()
    g = np.array([r["gap_error"] for r in rows])
    cells = K.cell_labels(rows, DESIGN)
    # the weakened analysis (τ over all models) credits the cell effect; the stratified τ does not
    assert S.kendall_tau(cell_effect, g) > 0.8
    assert K.stratified_tau(cell_effect, g, cells, np.ones(len(g)))[0] == 0.0
    assert K.stratified_tau(inside, g, cells, np.ones(len(g)))[0] == pytest.approx(1.0)


def test_incremental_delta_is_zero_for_the_cells_and_positive_for_the_within_cell_part():
    rows, cell_effect, inside = _planted()
    W = S.bootstrap_weights(ST.clusters(rows), n_boot=200, seed=0)
    h, _, d_cells = K.incremental(rows, cell_effect, DESIGN, W)
    _, hm, d_inside = K.incremental(rows, inside, DESIGN, W)
    assert abs(d_cells.value) < 0.02 and d_inside.lo > 0.05 and hm.value > h.value


def test_cross_fitting_never_sees_the_predicted_fold():
    rows, _, _ = _planted()
    X = K.hyper_columns(rows, DESIGN.axes)
    y = np.array([r["gap_error"] for r in rows])
    folds = np.array([r["config"]["seed"] for r in rows])
    y2 = y.copy()
    y2[folds == 0] += 100.0
    assert np.array_equal(K.cross_fitted(X, y, folds)[folds == 0], K.cross_fitted(X, y2, folds)[folds == 0])
    assert not np.array_equal(K.cross_fitted(X, y, folds)[folds == 1], K.cross_fitted(X, y2, folds)[folds == 1])
    with pytest.raises(ValueError, match="two folds"):
        K.cross_fitted(X, y, np.zeros(len(y)))


def test_the_within_cell_shuffle_keeps_each_cells_values():
    rows, _, inside = _planted()
    cells = K.cell_labels(rows, DESIGN)
    v = K.shuffled_in_cells(inside, cells, seed=3)
    for c in np.unique(cells):
        assert sorted(v[cells == c]) == sorted(inside[cells == c])
    assert not np.array_equal(v, inside)


def test_the_planted_measure_has_the_planted_within_cell_tau():
    rows, _, _ = _planted(n_cells=20, per=40)
    g = np.array([r["gap_error"] for r in rows])
    cells = K.cell_labels(rows, DESIGN)
    t = [K.stratified_tau(K.plant(g, cells, 0.3, np.random.default_rng(s)), g, cells, np.ones(len(g)))[0]
         for s in range(20)]
    assert np.mean(t) == pytest.approx(0.3, abs=0.03)


def test_the_verdict_rule_reads_all_ten_seeds_the_floor_and_the_power():
    d80 = {"tau": 0.1, "delta": 0.1}
    assert K.verdict([0.1] * 10, [0.1] * 10, 0.5, 0.2, d80) == "information beyond the hyperparameters"
    assert K.verdict([0.1] * 9 + [-0.1], [0.1] * 10, 0.5, 0.2, d80) == "mixed"
    assert K.verdict([0.1] * 10, [0.1] * 10, 0.1, 0.2, d80) == "mixed"  # 𝒦 inside its floor
    assert K.verdict([-0.1], [-0.1], 0.1, 0.2, d80).endswith("(an effect of interest would have been seen)")
    assert K.verdict([-0.1], [-0.1], 0.1, 0.2, {"tau": 0.1, "delta": 0.2}).endswith("(not testable at this power)")


# ----------------------------------------------------------------------------- the stored report


@pytest.fixture(scope="module")
def stored():
    return K.load_conditional()


@pytest.fixture(scope="module")
def sets():
    return K.analysed_sets()


DESIGNS = {"replication": K.REPLICATION, "committed": K.COMMITTED, "digits": K.DIGITS}


@pytest.mark.parametrize("key", DESIGNS)
def test_every_stored_point_value_recomputes(stored, sets, key):
    rows, design, t = sets[key], DESIGNS[key], stored[key]
    W = K.bootstrap(rows, design, n_boot=2)  # point values do not depend on the resamples
    assert t["n_models"] == len(rows)
    for name, entry in t["measures"].items():
        e = K.measure_row(rows, name, design, W)
        for k in ("tau", "Psi", "tau_hm", "delta"):
            assert e[k][0] == pytest.approx(entry[k][0], abs=1e-12, nan_ok=True), (key, name, k)
        assert e["cmi"] == pytest.approx(entry["cmi"], abs=1e-12, nan_ok=True)


@pytest.mark.parametrize("key", ["committed", "digits"])
def test_stored_intervals_of_mu_ours_and_the_controls_recompute(stored, sets, key):
    rows, design, t = sets[key], DESIGNS[key], stored[key]
    W = K.bootstrap(rows, design, stored["n_boot"], seed=0)
    for name in ("B_ours", "shuffled_cells:B_ours"):
        assert K.measure_row(rows, name, design, W) == t["measures"][name]


def test_the_stored_verdicts_follow_the_rule(stored):
    for key in DESIGNS:
        t = stored[key]
        assert t["verdict"] == K.verdict(t["seeds"]["tau"], t["seeds"]["delta"], t["measures"]["B_ours"]["cmi"],
                                         t["floor"]["cmi"][1], t["power"]["d80"])
        assert t["power"]["rates"]["tau"][0] <= 0.05 and t["power"]["rates"]["delta"][0] <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize("key", DESIGNS)
def test_every_stored_entry_recomputes(stored, sets, key):
    rows, design, t = sets[key], DESIGNS[key], stored[key]
    names = tuple(t["measures"])
    fresh = K.table(rows, design, names, stored["n_boot"], stored["n_perm"])
    assert fresh == {k: t[k] for k in fresh}
    assert K.seed_lows(rows, design, n_boot=stored["n_boot"]) == t["seeds"]


@pytest.mark.slow
@pytest.mark.parametrize("key", DESIGNS)
def test_a_stored_power_entry_recomputes(stored, sets, key):
    p = stored[key]["power"]
    k = 2
    one = K.power(sets[key], DESIGNS[key], (p["deltas"][k],), p["n_sim"], p["n_boot"], k0=k)
    assert one["rates"]["tau"][0] == p["rates"]["tau"][k] and one["rates"]["delta"][0] == p["rates"]["delta"][k]
