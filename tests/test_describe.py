"""bounds_lib.analysis.describe: the architecture-alone statement and the descriptive standouts, each able to fail."""
import numpy as np
import pytest

from bounds_lib.analysis.describe import COLUMNS, architecture_alone, report_rows, standouts
from bounds_lib.analysis.scoring import analyze
from bounds_lib.checkpoints import random_bert_state_dict

N, H, F = 16, 2, 32


def _report(edit=None, std=0.5):
    sd, cfg = random_bert_state_dict(n_layers=3, hidden=N, n_heads=H, d_ff=F, seed=4, std=std)
    if edit:
        sd = edit(dict(sd))
    return analyze(sd, config=cfg)


def test_architecture_alone_only_when_every_p_star_is_zero_at_full_rank():
    full = architecture_alone(_report())
    assert full["architecture_alone"] and "function of the architecture alone" in full["statement"]

    def low_rank(sd):  # layer 1's M_in of rank 4 (< min(N, F) = 16)
        name = "encoder.layer.1.intermediate.dense.weight"
        sd[name] = sd[name][:, :4] @ np.eye(4, N)
        return sd

    low = architecture_alone(_report(low_rank))
    assert low["all_p_star_zero"] and not low["all_full_rank"] and not low["architecture_alone"]
    assert "below full rank" in low["statement"]
    tiny = _report(std=1e-4)  # K far below 1: a positive p wins somewhere
    t = architecture_alone(tiny)
    assert not t["all_p_star_zero"] and f"{int(np.sum(tiny.p_stars > 0))} of 18 matrices have p* > 0" in t["statement"]


def test_standouts_find_the_low_rank_matrix():
    def low_rank(sd):
        name = "encoder.layer.2.output.dense.weight"
        sd[name] = sd[name][:, :2] @ np.eye(2, F)
        return sd

    top = standouts(_report(low_rank), 3)
    assert top[0]["label"] == "L2.M_out" and top[0]["quantity"] in ("rank_fraction", "stable_rank", "term_share")
    assert abs(top[0]["log10_ratio"]) >= abs(top[-1]["log10_ratio"])
    assert {r["label"] for r in top} == {"L2.M_out"}  # rank, stable rank and share all single it out
    # with the spectra the rank measure is the effective rank's share of the full rank
    sd, cfg = random_bert_state_dict(n_layers=3, hidden=N, n_heads=H, d_ff=F, seed=4)
    sd = low_rank(dict(sd))
    from bounds_lib.analysis.scoring import score
    from bounds_lib.analysis.spectra import compute_spectra

    sp = compute_spectra(sd, config=cfg)
    eff = standouts(score(sp), 60, sp)
    assert {r["quantity"] for r in eff} == {"effective_rank_fraction", "stable_rank", "term_share"}
    assert next(r for r in eff if r["quantity"] == "effective_rank_fraction")["label"] == "L2.M_out"
    # on an unedited model nothing is far from its kind
    assert abs(standouts(_report(), 1)[0]["log10_ratio"]) < abs(top[0]["log10_ratio"]) / 2


def test_rows_carry_tensor_names_and_documented_columns():
    rows = report_rows(_report())
    assert tuple(rows[0]) == tuple(COLUMNS)
    qk1 = next(r for r in rows if r["kind"] == "QK" and r["head"] == 1 and r["layer"] == 0)
    assert qk1["tensors"] == ("encoder.layer.0.attention.self.query.weight[8:16] · "
                              "encoder.layer.0.attention.self.key.weight[8:16]")


def test_to_dataframe_without_pandas_is_a_clear_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pandas(name, *a, **kw):
        if name == "pandas":
            raise ImportError("no pandas")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match=r"pip install 'bounds_lib\[pandas\]'"):
        _report().to_dataframe()
