"""Tables and figures of Chapters 7–8 (bounds_lib.studies.trained_report) on the committed results."""
import math

import numpy as np
import pytest

from bounds_lib.studies import results as R, stats as S, trained_report as T


def test_corrected_theorem_on_stored_spectra():
    rows = R.load_results("study")["rows"]
    plain = next(r for r in rows if R.variant_name(r["config"]) == "plain")
    L, N = plain["config"]["L"], plain["config"]["N"]
    rep = T.corrected_report(plain)
    # read as a one-head BERT checkpoint with M_in = I: the released proxy gains L full-rank terms N (p* = 0)
    assert math.isclose(10 ** plain["proxies"]["B_ours_sum"], 3 * L * N + math.sqrt(L), rel_tol=1e-12)
    assert math.isclose(math.exp(rep.log_B_released), 4 * L * N + math.sqrt(L), rel_tol=1e-9)
    assert math.isfinite(rep.log_Theta) and rep.log_Theta > rep.log_rss  # the Dudley factor exceeds 1
    assert T.measure([plain], "corrected_theta")[0] == rep.log_Theta / math.log(10)
    with pytest.raises(KeyError, match="no spectra"):
        T.corrected_report(R.load_results("trained_grid")["rows"][0])


def test_interval_table_points_are_the_granulated_kendall_values():
    real = [r for r in R.load_results("trained_grid")["rows"] if not r["config"]["random_labels"]]
    W = S.bootstrap_weights(T.clusters(real), n_boot=50)
    tab = T.interval_table(real, ["B_ours_sum", "n_params"], W)
    for k, t in tab.items():
        ref = S.granulated_kendall(real, lambda r: R.proxy_value(r, k))
        for h in ("overall", "L", "N", "n_train", "Psi"):
            assert math.isclose(t[h].value, ref[h], abs_tol=1e-12), (k, h)
        share, groups = t["wrong_N"]
        taus = S.group_taus(real, T.measure(real, k), "N", S.HYPERPARAMETERS)
        assert groups == int(np.isfinite(taus).sum()) and share == float(np.mean(taus[np.isfinite(taus)] < 0))
    only_tau = T.interval_table(real, ["B_ours_sum"], W, hypers=())
    assert set(only_tau["B_ours_sum"]) == {"overall"}
    text = T.markdown_table(tab, [("overall", "τ"), ("wrong_N", "wrong along N")])
    assert text.splitlines()[2].startswith("| B_ours (sum) | ") and " of " in text.splitlines()[2]


def test_measure_refuses_what_the_rows_do_not_store():
    rows = R.load_results("trained_grid")["rows"]
    with pytest.raises(KeyError, match="steps_taken"):
        T.measure(rows, "steps_taken")
    with pytest.raises(KeyError, match="no proxy 'B_nonsense'"):
        T.measure(rows, "B_nonsense")
    assert np.array_equal(T.measure(rows, "train_error"), [r["train_error"] for r in rows])


def test_plot_spectra_takes_the_matrix_type():
    rows = R.load_results("study")["rows"][:8]
    fig = T.plot_spectra(rows, ["plain"], layer=0, matrix_type="V")
    assert fig.axes[0].get_ylabel() == "σ_i of W^V, layer 0"


def test_pair_changes_are_random_minus_real_pair_by_pair():
    pairs = T.label_pairs(R.load_results("common_loss")["rows"])
    assert pairs and all(not a["config"]["random_labels"] and b["config"]["random_labels"] for a, b in pairs)
    change = T.pair_changes(pairs)
    assert set(change) == set(T.PROXIES)
    for k, d in change.items():
        assert d.shape == (len(pairs),)
        i = len(pairs) // 2
        a, b = pairs[i]
        assert d[i] == R.proxy_value(b, k) - R.proxy_value(a, k)
    # the order matters: swapping the two networks of every pair flips every sign
    swapped = T.pair_changes([(b, a) for a, b in pairs], names=["B_edelman"])
    assert list(swapped) == ["B_edelman"] and np.array_equal(swapped["B_edelman"], -change["B_edelman"])
