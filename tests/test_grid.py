"""The training grids (bounds_lib.studies.grid): the small presets' format, the runner's backends (processes,
Dask), resuming, reuse, merging and the progress bar (Chapters 7–8). Regenerating the committed rows
on this machine, to the measured tolerance: tests/test_reproduce.py."""
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from bounds_lib.studies import grid as G, results as R
from bounds_lib.studies.grid import SMALL_COMMON_LOSS_GRID, SMALL_GRID, grid_configs, main, run_config
from bounds_lib.studies.results import load_model
from bounds_lib.analysis.single_head import PROXY_NAMES, single_head_proxies
from bounds_lib.studies.training import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "bounds_lib" / "data"
COMMITTED = DATA / "trained_grid.json"
COMMITTED_COMMON_LOSS = DATA / "trained_common_loss.json"


def _structure(d):
    skip = {"note", "schema_note", "backend", "select"}
    return {"metadata": sorted(k for k in d["metadata"] if k not in skip), "row": sorted(d["rows"][0]),
            "proxies": sorted(d["rows"][0]["proxies"]), "config": sorted(d["rows"][0]["config"])}


def test_small_grid_reproduces_the_format_and_checkpoints(tmp_path):
    out = tmp_path / "g.json"
    assert main(["--out", str(out), "--small", "--weights-dir", str(tmp_path / "w")]) == 0
    small = json.loads(out.read_text())
    assert len(small["rows"]) == len(grid_configs(SMALL_GRID))
    assert small["metadata"]["command"].startswith("python -m bounds_lib.studies.grid --out")
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


def test_reuse_copies_identical_rows(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    main(["--out", str(first), "--small"])
    main(["--out", str(second), "--small", "--reuse", str(first)])
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    assert b["metadata"]["reused_rows"] == len(a["rows"]) and a["metadata"]["reused_rows"] == 0
    assert a["rows"] == b["rows"]


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
    assert _strip(json.loads(one.read_text())["rows"]) == _strip(small["rows"])
    committed = json.loads(COMMITTED_COMMON_LOSS.read_text())
    assert _structure(small) == _structure(committed)


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_dask_local_cluster_gives_the_rows_of_the_local_path():
    from distributed import Client, LocalCluster

    local = G.run_grid(G.SMALL_STUDY_GRID)
    # two in-process workers on Dask's inproc transport (no network), one thread each
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert len(cluster.workers) == 2
        remote = G.run_grid(G.SMALL_STUDY_GRID, scheduler=client)
    assert remote["metadata"]["backend"] == "dask" and local["metadata"]["backend"] == "in process"
    assert _strip(remote["rows"]) == _strip(local["rows"])
    assert len({r["test_correct_hex"] for r in local["rows"]}) > 1  # the rows differ from each other


def test_interrupted_grid_resumes_from_its_progress_file(tmp_path, monkeypatch):
    out = tmp_path / "s.json"
    calls = []
    real_run = G.run_config

    def flaky(config, weights_dir=None):
        if len(calls) == 5:
            raise KeyboardInterrupt  # the machine went away after five rows
        calls.append(config)
        return real_run(config, weights_dir)

    monkeypatch.setattr(G, "run_config", flaky)
    with pytest.raises(KeyboardInterrupt):
        main(["--out", str(out), "--preset", "study", "--small"])
    progress = tmp_path / "s.json.partial.jsonl"
    assert not out.exists() and len(progress.read_text().splitlines()) == 5
    with pytest.raises(R.ResultsError, match="progress file"):
        R.read_results(progress)  # a partial grid is never read as results
    whole = progress.read_text()
    with open(progress, "a") as f:  # and the process was killed while it appended a sixth row
        f.write(whole.splitlines()[0][:40])
    calls.clear()
    monkeypatch.setattr(G, "run_config", lambda c, w=None: (calls.append(c), real_run(c, w))[1])
    assert main(["--out", str(out), "--preset", "study", "--small"]) == 0
    resumed = R.read_results(out)
    n = len(grid_configs(G.SMALL_STUDY_GRID))
    assert len(calls) == n - 5 and resumed["metadata"]["reused_rows"] == 5 and not progress.exists()
    fresh = G.run_grid(json.loads(json.dumps(G.SMALL_STUDY_GRID)))
    assert _strip(resumed["rows"]) == _strip(fresh["rows"])


def test_a_progress_file_ending_in_half_a_line_is_cut_back_to_its_whole_lines(tmp_path):
    """The half line's row is trained again; the file is rewritten with its whole rows, so the next row
    is appended on a line of its own; a row written whole but killed before its newline is kept."""
    progress = tmp_path / "s.json.partial.jsonl"
    rows = [{"config": {"L": i}, "x": 0.1 * i} for i in range(3)]
    text = "".join(json.dumps(r) + "\n" for r in rows[:2])
    progress.write_text(text + json.dumps(rows[2])[:-5])
    part = R.read_results(progress, allow_partial=True)
    assert part["rows"] == rows[:2] and part["metadata"]["half_line_dropped"] == len(json.dumps(rows[2])) - 5
    assert R.reused_rows((), progress) == {"rows": rows[:2]}
    assert progress.read_text() == text
    progress.write_text(text + json.dumps(rows[2]))  # whole, without its newline
    assert R.reused_rows((), progress) == {"rows": rows}
    with open(progress, "a") as f:
        f.write(json.dumps(rows[0]) + "\n")
    assert R.read_results(progress, allow_partial=True)["rows"] == rows + rows[:1]


def test_a_progress_file_corrupted_before_its_last_line_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "s.json"
    progress = tmp_path / "s.json.partial.jsonl"
    progress.write_text('{"config": {"L": 1}}\n{"conf\n{"config": {"L": 2}}\n')
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), "--preset", "study", "--small"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(f"error: {progress}: corrupted progress file (line 2: "
                                                 "Unterminated string starting at)")


def test_select_and_budget_extension_reuse(tmp_path):
    """A stop-loss run that reached its target after k steps is the same run under any budget > k."""
    first = tmp_path / "a.json"
    main(["--out", str(first), "--preset", "common-loss", "--small"])
    a = R.read_results(first)
    budget = a["metadata"]["max_steps"] * 3
    second = tmp_path / "b.json"
    main(["--out", str(second), "--preset", "common-loss", "--small", "--max-steps", str(budget),
          "--select", "L=1", "--reuse", str(first)])
    b = R.read_results(second)
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


def test_committed_study_rows_are_complete_and_self_consistent():
    """(Regenerating committed rows on this machine, to the measured tolerance: tests/test_reproduce.py.)"""
    study = R.load_results("study")
    assert len(study["rows"]) == len(grid_configs(study["metadata"]["grid"]))
    for row in study["rows"]:
        assert R.unpack_correct(row).mean() == 1 - row["test_error"]


def test_merge_concatenates_parts_and_keeps_their_commands(tmp_path):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    main(["--out", str(a), "--preset", "common-loss", "--small", "--select", "L=1"])
    main(["--out", str(b), "--preset", "common-loss", "--small", "--select", "L=2"])
    assert main(["--out", str(out), "--merge", str(a), str(b)]) == 0
    m = R.read_results(out)
    ra, rb = R.read_results(a), R.read_results(b)
    assert m["rows"] == ra["rows"] + rb["rows"] and m["metadata"]["n_rows"] == len(m["rows"])
    assert m["metadata"]["commands"] == [ra["metadata"]["command"], rb["metadata"]["command"]]
    assert m["metadata"]["n_reached"] == sum(r["reached_target"] for r in m["rows"])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(R.ResultsError):
        main(["--out", str(out), "--merge", str(a), str(tmp_path / "bad.json")])


def test_unreachable_scheduler_is_refused_with_a_clear_line(tmp_path, capsys):
    # port 1 on the loopback interface: nothing listens there, the connection is refused at once
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "x.json"), "--preset", "study", "--small", "--scheduler", "tcp://127.0.0.1:1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "cannot reach a Dask scheduler at 'tcp://127.0.0.1:1'" in err and "Traceback" not in err


def test_progress_bar_goes_to_stderr_and_the_jsonl_log_is_kept(tmp_path):
    """tqdm on stderr (the JSON-lines progress file stays a log); TQDM_DISABLE=1 silences the bar."""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"} | {"OMP_NUM_THREADS": "1"}
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "bounds_lib.studies.grid", "--out", str(out), "--preset", "study", "--small",
           "--select", "seed=0", "n_train=16", "rank=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    n = len(R.read_results(out)["rows"])
    assert n == 2 and "training: 100%" in proc.stderr and f"{n}/{n}" in proc.stderr
    assert "train_err=" in proc.stderr and proc.stdout == ""
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env | {"TQDM_DISABLE": "1"}, timeout=300)
    assert quiet.returncode == 0 and "training:" not in quiet.stderr and "wrote 2 rows" in quiet.stderr


def test_bad_jobs_are_refused_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "x.json"), "--small", "--jobs", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "jobs (worker processes) == 0, must be >= 1" in err and "Traceback" not in err
    with pytest.raises(TypeError, match="jobs .* must be an integer, got float 2.0"):
        G.run_grid(G.SMALL_GRID, jobs=2.0)
