"""The grid runner, its proxies, the checkpoint round trip and the committed results (Chapter 7)."""
import dataclasses
import json
import math
import pathlib

import numpy as np
import pytest
import torch

from bounds_lib.experiments import (PROXY_NAMES, SMALL_COMMON_LOSS_GRID, SMALL_GRID, grid_configs, load_model,
                                    main, run_config, save_model, single_head_proxies)
from bounds_lib.model import Block, SingleHeadTransformer, forward, random_transformer
from bounds_lib.training import TrainConfig, train

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "bounds_lib" / "data"
COMMITTED = DATA / "trained_grid.json"
COMMITTED_COMMON_LOSS = DATA / "trained_common_loss.json"


def scaled_identity(L, N, c):
    I = c * np.eye(N)
    return SingleHeadTransformer(tuple(Block(I, I, I) for _ in range(L)), np.ones(N) / np.sqrt(N))


@pytest.mark.parametrize("N", [4, 16])
def test_proxies_closed_form_large_weights(N):
    # c = 2, L = 1: K_QK = 2·c² = 8, K_V = c = 2, K_M = 1; c·K > 1 so p* = 0 and T* = √(rank·N) = N
    c = 2.0
    P = single_head_proxies(scaled_identity(1, N, c))
    assert P["p_star"] == {"QK": [0.0], "V": [0.0], "M": [0.0]}
    assert math.isclose(10 ** P["B_ours_sum"], 3 * N + 1, rel_tol=1e-12)
    assert math.isclose(10 ** P["B_ours_rss"], math.sqrt(3) * N + 1, rel_tol=1e-12)
    xi = (c * c * c * N) ** (2 / 3) + (c * c * N) ** (2 / 3) + (c * N) ** (2 / 3)
    assert math.isclose(10 ** P["B_edelman"], (1 + xi) ** 1.5, rel_tol=1e-12)
    assert math.isclose(10 ** P["B_11"], (1 + xi) ** 1.5, rel_tol=1e-12)  # ‖cI‖_{1,1} = ‖cI‖_{2,1}
    assert math.isclose(10 ** P["prod_spectral"], c**3, rel_tol=1e-12)
    assert math.isclose(10 ** P["sum_frobenius"], 3 * c * math.sqrt(N), rel_tol=1e-12)
    assert math.isclose(10 ** P["n_params"], 3 * N * N + N, rel_tol=1e-12)


def test_proxies_closed_form_small_weights_and_depth_weight():
    # c = 1/2: every c·K < 1, so T(p) = N (cK)^{p/(p+2)} decreases in p and p* = 2 for all matrices
    N, c = 8, 0.5
    P = single_head_proxies(scaled_identity(1, N, c))
    assert P["p_star"] == {"QK": [2.0], "V": [2.0], "M": [2.0]}
    T = [N * (c * 2 * c * c) ** 0.5, N * (c * c) ** 0.5, N * c**0.5]
    assert math.isclose(10 ** P["B_ours_sum"], sum(T) + 1, rel_tol=1e-12)
    # L = 2: α^{(0)} = Λ_1 = 1.13 · c · c · (1 + 4c) (released constants), α^{(1)} = 1
    P2 = single_head_proxies(scaled_identity(2, N, 2.0))
    assert math.isclose(10 ** P2["log10_alpha"][0], 1.13 * 4 * 9, rel_tol=1e-12)
    assert P2["log10_alpha"][1] == 0.0


def test_checkpoint_path_gives_the_same_proxies(tmp_path):
    torch.set_num_threads(1)
    res = train(TrainConfig(L=2, N=8, n_train=32, T=8, s=3, steps=10, n_test=64, seed=1))
    model = res.model
    save_model(model, tmp_path / "ck", meta={"note": "test"})
    back = load_model(tmp_path / "ck")
    for a, b in zip(model.blocks, back.blocks):
        assert np.array_equal(a.W_QK, b.W_QK) and np.array_equal(a.W_V, b.W_V) and np.array_equal(a.W_M, b.W_M)
    assert np.array_equal(model.w, back.w)
    assert single_head_proxies(back) == single_head_proxies(model)
    X = np.random.default_rng(0).standard_normal((5, 9, 8))
    assert np.array_equal(forward(back, X), forward(model, X))
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["model_type"] == "bert" and cfg["num_attention_heads"] == 1


def test_checkpoint_reader_rejects_multihead(tmp_path):
    from bounds_lib.checkpoints import CheckpointError

    save_model(random_transformer(1, 4, np.random.default_rng(0)), tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg["num_attention_heads"] = 2
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="single-head"):
        load_model(tmp_path / "ck")


def _structure(d):
    skip = {"note", "schema_note", "backend", "select"}
    return {"metadata": sorted(k for k in d["metadata"] if k not in skip), "row": sorted(d["rows"][0]),
            "proxies": sorted(d["rows"][0]["proxies"]), "config": sorted(d["rows"][0]["config"])}


def test_small_grid_reproduces_the_format_and_checkpoints(tmp_path):
    out = tmp_path / "g.json"
    assert main(["--out", str(out), "--small", "--weights-dir", str(tmp_path / "w")]) == 0
    small = json.loads(out.read_text())
    assert len(small["rows"]) == len(grid_configs(SMALL_GRID))
    assert small["metadata"]["command"].startswith("python -m bounds_lib.experiments --out")
    for r in small["rows"]:
        assert set(PROXY_NAMES) <= set(r["proxies"])
        assert math.isclose(r["gap_error"], r["test_error"] - r["train_error"], abs_tol=1e-12)
        back = load_model(tmp_path / "w" / r["weights_file"])
        again = json.loads(json.dumps(single_head_proxies(back)))
        assert again == r["proxies"]  # proxies from the saved checkpoint equal those of the run
    committed = json.loads(COMMITTED.read_text())
    s, c = _structure(small), _structure(committed)
    c["row"] = [k for k in c["row"] if k != "weights_file"]
    s["row"] = [k for k in s["row"] if k != "weights_file"]
    assert s == c


def test_committed_row_regenerates_exactly():
    committed = json.loads(COMMITTED.read_text())
    rows = committed["rows"]
    assert len(rows) == len(grid_configs(committed["metadata"]["grid"]))
    cheapest = min(rows, key=lambda r: (r["config"]["L"] * r["config"]["N"] ** 2 * r["config"]["n_train"]))
    torch.set_num_threads(1)
    fresh = json.loads(json.dumps(run_config(TrainConfig(**cheapest["config"]))))
    for key in ("train_loss", "train_error", "test_loss", "test_error", "gap_loss", "gap_error",
                "loss_curve_every_10", "proxies", "config"):
        assert fresh[key] == cheapest[key], key


def _rows(gap):
    rows = []
    for L in (1, 2):
        for N in (4, 8, 16):
            for n in (10, 20):
                rows.append({"config": {"L": L, "N": N, "n_train": n}, "gap_error": gap(L, N, n),
                             "proxies": {"B_ours_sum": math.log10(L * N / n)}})
    return rows


def test_granulated_kendall_closed_form():
    from bounds_lib.experiments import granulated_kendall, proxy_value

    keys = ("overall", "L", "N", "n_train", "Psi")
    perfect = granulated_kendall(_rows(lambda L, N, n: L * N / n), lambda r: proxy_value(r, "B_ours_sum"))
    assert all(math.isclose(perfect[k], 1.0) for k in keys)
    assert (perfect["groups_L"], perfect["groups_N"], perfect["groups_n_train"]) == (6, 4, 6)
    reverse = granulated_kendall(_rows(lambda L, N, n: -L * N / n), lambda r: proxy_value(r, "B_ours_sum"))
    assert all(math.isclose(reverse[k], -1.0) for k in keys)
    # a measure blind to n (the parameter count) ranks nothing within a group that varies n: τ = 0
    blind = granulated_kendall(_rows(lambda L, N, n: L * N / n), lambda r: math.log10(r["config"]["L"] * r["config"]["N"]))
    assert blind["n_train"] == 0.0 and blind["groups_n_train"] == 6 and math.isclose(blind["L"], 1.0)
    # a gap that depends on n only: within-depth and within-width groups the gap is constant (τ undefined)
    only_n = granulated_kendall(_rows(lambda L, N, n: 1.0 / n), lambda r: proxy_value(r, "B_ours_sum"))
    assert math.isnan(only_n["L"]) and math.isnan(only_n["N"]) and math.isclose(only_n["n_train"], 1.0)
    assert math.isclose(only_n["Psi"], 1.0)


def test_scaling_slopes_closed_form():
    from bounds_lib.experiments import scaling_slopes

    rows = _rows(lambda L, N, n: 0.0)
    assert math.isclose(scaling_slopes(rows, "B_ours_sum", "N"), 1.0)
    assert math.isclose(scaling_slopes(rows, "B_ours_sum", "L"), 1.0)
    assert math.isclose(scaling_slopes(rows, "B_ours_sum", "n_train"), -1.0)


def test_reuse_copies_identical_rows(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    main(["--out", str(first), "--small"])
    main(["--out", str(second), "--small", "--reuse", str(first)])
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    assert b["metadata"]["reused_rows"] == len(a["rows"]) and a["metadata"]["reused_rows"] == 0
    assert a["rows"] == b["rows"]


def test_multihead_proxies_of_the_checkpoint_agree(tmp_path):
    """bounds_lib.proxies.analyze (the BERT path of Chapter 6) on the saved one-head checkpoint.

    The checkpoint stores M_in = I, so per-matrix T* and p* of QK, Ṽ = W_V and M_out = W_M must equal
    the single-head ones, and B_ours (sum) must equal ours once the identity M_in terms are removed.
    """
    from scipy.special import logsumexp

    from bounds_lib.proxies import analyze

    torch.set_num_threads(1)
    model = train(TrainConfig(L=3, N=8, n_train=32, T=8, s=3, steps=10, n_test=64, seed=2)).model
    save_model(model, tmp_path / "ck")
    rep = analyze(str(tmp_path / "ck"), mode="paper")
    ours = single_head_proxies(model)
    kind_of = {"QK": "QK", "V": "V", "M_out": "M"}
    for m in rep.matrices:
        if m.kind == "M_in":
            assert m.sigma1 == 1.0
            continue
        a = kind_of[m.kind]
        assert m.p_star == ours["p_star"][a][m.layer]
        assert math.isclose(m.log_T_star / math.log(10), ours["log10_T_star"][a][m.layer], rel_tol=1e-12)
    log_T = [m.log_T_star for m in rep.matrices if m.kind != "M_in"]
    ours_sum = float(np.logaddexp(logsumexp(log_T), 0.5 * math.log(model.L))) / math.log(10)
    assert math.isclose(ours_sum, ours["B_ours_sum"], rel_tol=1e-12)


def test_common_loss_preset_small_runs_and_matches_the_committed_format(tmp_path):
    out = tmp_path / "c.json"
    assert main(["--out", str(out), "--preset", "common-loss", "--small", "--jobs", "2"]) == 0
    small = json.loads(out.read_text())
    configs = grid_configs(SMALL_COMMON_LOSS_GRID)
    assert [r["config"] for r in small["rows"]] == [c.as_dict() for c in configs]
    meta = small["metadata"]
    target = SMALL_COMMON_LOSS_GRID["stop_loss"]
    assert meta["stop_loss"] == target and meta["max_steps"] == SMALL_COMMON_LOSS_GRID["steps"]
    assert meta["steps_taken"] == [r["steps_taken"] for r in small["rows"]]
    assert meta["n_reached"] + meta["n_not_reached"] == len(configs)
    assert 0 < meta["n_reached"] < len(configs)  # the tiny preset exercises both outcomes
    for r in small["rows"]:
        assert r["config"]["stop_loss"] == target
        if r["reached_target"]:
            assert r["train_loss"] <= target + 1e-6 and r["steps_taken"] < r["config"]["steps"]
        else:
            assert r["train_loss"] > target and r["steps_taken"] == r["config"]["steps"]
    # two worker processes give the rows a single process gives
    one = tmp_path / "one.json"
    main(["--out", str(one), "--preset", "common-loss", "--small"])
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    assert strip(json.loads(one.read_text())["rows"]) == strip(small["rows"])
    committed = json.loads(COMMITTED_COMMON_LOSS.read_text())
    assert _structure(small) == _structure(committed)


def test_committed_common_loss_row_regenerates_exactly():
    committed = json.loads(COMMITTED_COMMON_LOSS.read_text())
    rows = committed["rows"]
    assert len(rows) + committed["metadata"].get("n_cut", 0) == len(grid_configs(committed["metadata"]["grid"]))
    reached = [r for r in rows if r["reached_target"]]
    cheapest = min(reached, key=lambda r: (r["config"]["L"] * r["config"]["N"] ** 2 * r["config"]["n_train"]
                                           * r["steps_taken"]))
    torch.set_num_threads(1)
    fresh = json.loads(json.dumps(run_config(TrainConfig(**cheapest["config"]))))
    for key in ("train_loss", "train_error", "test_loss", "test_error", "gap_loss", "gap_error",
                "loss_curve_every_10", "proxies", "config", "steps_taken", "reached_target"):
        assert fresh[key] == cheapest[key], key


def test_granulated_kendall_fixed_keys_split_groups():
    from bounds_lib.experiments import granulated_kendall, proxy_value

    # two seeds: within each seed the measure ranks the gap perfectly, but seed 1 shifts every gap up,
    # so pooling the seeds in one group would mix concordant and discordant pairs
    rows = []
    for seed in (0, 1):
        for r in _rows(lambda L, N, n: L * N / n):
            r = {**r, "config": {**r["config"], "seed": seed}, "gap_error": r["gap_error"] + 10 * seed}
            r["proxies"] = {"B_ours_sum": r["proxies"]["B_ours_sum"] - seed}
            rows.append(r)
    m = lambda r: proxy_value(r, "B_ours_sum")
    split = granulated_kendall(rows, m, fixed=("seed",))
    assert all(math.isclose(split[k], 1.0) for k in ("L", "N", "n_train", "Psi"))
    assert (split["groups_L"], split["groups_N"], split["groups_n_train"]) == (12, 8, 12)
    pooled = granulated_kendall(rows, m)
    assert pooled["L"] < 1.0 and pooled["groups_L"] == 6


# ----------------------------------------------------------------------------- runner backends, resuming, reading

def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_dask_local_cluster_gives_the_rows_of_the_local_path():
    from distributed import Client, LocalCluster

    from bounds_lib.experiments import SMALL_STUDY_GRID, run_grid

    local = run_grid(SMALL_STUDY_GRID)
    # two in-process workers on Dask's inproc transport (no network), one thread each
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert len(cluster.workers) == 2
        remote = run_grid(SMALL_STUDY_GRID, scheduler=client)
    assert remote["metadata"]["backend"] == "dask" and local["metadata"]["backend"] == "in process"
    assert _strip(remote["rows"]) == _strip(local["rows"])
    assert len({r["test_correct_hex"] for r in local["rows"]}) > 1  # the rows differ from each other


def test_interrupted_grid_resumes_from_its_progress_file(tmp_path, monkeypatch):
    from bounds_lib import experiments as E

    out = tmp_path / "s.json"
    calls = []
    real_run = E.run_config

    def flaky(config, weights_dir=None):
        if len(calls) == 5:
            raise KeyboardInterrupt  # the machine went away after five rows
        calls.append(config)
        return real_run(config, weights_dir)

    monkeypatch.setattr(E, "run_config", flaky)
    with pytest.raises(KeyboardInterrupt):
        main(["--out", str(out), "--preset", "study", "--small"])
    progress = tmp_path / "s.json.partial.jsonl"
    assert not out.exists() and len(progress.read_text().splitlines()) == 5
    with pytest.raises(E.ResultsError, match="progress file"):
        E.read_results(progress)  # a partial grid is never read as results
    calls.clear()
    monkeypatch.setattr(E, "run_config", lambda c, w=None: (calls.append(c), real_run(c, w))[1])
    assert main(["--out", str(out), "--preset", "study", "--small"]) == 0
    resumed = E.read_results(out)
    n = len(grid_configs(E.SMALL_STUDY_GRID))
    assert len(calls) == n - 5 and resumed["metadata"]["reused_rows"] == 5 and not progress.exists()
    fresh = E.run_grid(json.loads(json.dumps(E.SMALL_STUDY_GRID)))
    assert _strip(resumed["rows"]) == _strip(fresh["rows"])


def test_select_and_budget_extension_reuse(tmp_path):
    """A stop-loss run that reached its target after k steps is the same run under any budget > k."""
    from bounds_lib import experiments as E

    first = tmp_path / "a.json"
    main(["--out", str(first), "--preset", "common-loss", "--small"])
    a = E.read_results(first)
    budget = a["metadata"]["max_steps"] * 3
    second = tmp_path / "b.json"
    main(["--out", str(second), "--preset", "common-loss", "--small", "--max-steps", str(budget),
          "--select", "L=1", "--reuse", str(first)])
    b = E.read_results(second)
    assert {r["config"]["L"] for r in b["rows"]} == {1} and b["metadata"]["select"] == {"L": [1]}
    n_reached_before = sum(r["reached_target"] for r in a["rows"] if r["config"]["L"] == 1)
    assert b["metadata"]["reused_rows"] == n_reached_before
    torch.set_num_threads(1)
    for r in b["rows"]:
        assert r["config"]["steps"] == budget
        if r["reached_target"] and r["steps_taken"] < a["metadata"]["max_steps"]:
            fresh = json.loads(json.dumps(run_config(TrainConfig(**r["config"]))))
            assert _strip([fresh])[0] == {k: v for k, v in _strip([r])[0].items()}
            break
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "c.json"), "--small", "--select", "depth=1"])


def test_results_from_another_version_or_corrupted_are_refused(tmp_path):
    from bounds_lib import experiments as E

    good = json.loads(COMMITTED.read_text())
    E.check_results(good)
    cases = {
        "old.json": ({**good, "metadata": {k: v for k, v in good["metadata"].items() if k != "schema"}},
                     "schema None is not supported"),
        "future.json": ({**good, "metadata": {**good["metadata"], "schema": "bounds_lib.trained-results/2"}},
                        "not supported"),
        "cut.json": ({**good, "rows": good["rows"][:-3]}, "n_rows = 80 but the file holds 77"),
        "partial.json": ({**good, "metadata": {**good["metadata"], "partial": True}}, "partial results file"),
        "noproxy.json": ({**good, "rows": [{**good["rows"][0], "proxies": {}}] + good["rows"][1:]},
                         "row 0 lacks the proxies"),
        "nan.json": ({**good, "rows": [{**good["rows"][0], "gap_error": float("nan")}] + good["rows"][1:]},
                     "non-finite"),
    }
    for name, (data, msg) in cases.items():
        (tmp_path / name).write_text(json.dumps(data))
        with pytest.raises(E.ResultsError, match=msg):
            E.read_results(tmp_path / name)
    (tmp_path / "broken.json").write_text(COMMITTED.read_text()[:5000])
    with pytest.raises(E.ResultsError, match="corrupted results file"):
        E.read_results(tmp_path / "broken.json")
    with pytest.raises(E.ResultsError, match="cannot read"):
        E.read_results(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="available"):
        E.load_results("no_such_results")


def test_committed_results_load_from_the_package():
    from bounds_lib import experiments as E

    for name, file in E.RESULTS_FILES.items():
        if (DATA / file).is_file():
            d = E.load_results(name)
            assert d["metadata"]["n_rows"] == len(d["rows"])


def test_committed_study_row_regenerates_exactly():
    from bounds_lib import experiments as E

    study = E.load_results("study")
    assert len(study["rows"]) == len(grid_configs(study["metadata"]["grid"]))
    cheap = [r for r in study["rows"] if r["config"]["n_train"] == 64 and r["config"].get("rank")]
    row = min(cheap, key=lambda r: r["seconds"])
    torch.set_num_threads(1)
    fresh = json.loads(json.dumps(run_config(TrainConfig(**row["config"]))))
    assert _strip([fresh]) == _strip([row])  # every number, the per-example results and the spectra
    assert E.unpack_correct(row).mean() == 1 - row["test_error"]


def test_merge_concatenates_parts_and_keeps_their_commands(tmp_path):
    from bounds_lib import experiments as E

    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    main(["--out", str(a), "--preset", "common-loss", "--small", "--select", "L=1"])
    main(["--out", str(b), "--preset", "common-loss", "--small", "--select", "L=2"])
    assert main(["--out", str(out), "--merge", str(a), str(b)]) == 0
    m = E.read_results(out)
    ra, rb = E.read_results(a), E.read_results(b)
    assert m["rows"] == ra["rows"] + rb["rows"] and m["metadata"]["n_rows"] == len(m["rows"])
    assert m["metadata"]["commands"] == [ra["metadata"]["command"], rb["metadata"]["command"]]
    assert m["metadata"]["n_reached"] == sum(r["reached_target"] for r in m["rows"])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(E.ResultsError):
        main(["--out", str(out), "--merge", str(a), str(tmp_path / "bad.json")])


def test_unreachable_scheduler_is_refused_with_a_clear_line(tmp_path, capsys):
    # port 1 on the loopback interface: nothing listens there, the connection is refused at once
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "x.json"), "--preset", "study", "--small", "--scheduler", "tcp://127.0.0.1:1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "cannot reach a Dask scheduler at 'tcp://127.0.0.1:1'" in err and "Traceback" not in err


def test_corrected_theorem_on_stored_spectra():
    import math

    from bounds_lib import experiments as E, trained_report as T

    rows = E.load_results("study")["rows"]
    plain = next(r for r in rows if E.variant_name(r["config"]) == "plain")
    L, N = plain["config"]["L"], plain["config"]["N"]
    rep = T.corrected_report(plain)
    # read as a one-head BERT checkpoint with M_in = I: the released proxy gains L full-rank terms N (p* = 0)
    assert math.isclose(10 ** plain["proxies"]["B_ours_sum"], 3 * L * N + math.sqrt(L), rel_tol=1e-12)
    assert math.isclose(math.exp(rep.log_B_released), 4 * L * N + math.sqrt(L), rel_tol=1e-9)
    assert math.isfinite(rep.log_Theta) and rep.log_Theta > rep.log_rss  # the Dudley factor exceeds 1
    assert T.measure([plain], "corrected_theta")[0] == rep.log_Theta / math.log(10)
    with pytest.raises(KeyError, match="no spectra"):
        T.corrected_report(E.load_results("trained_grid")["rows"][0])
