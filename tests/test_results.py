"""Results files and single-head checkpoints (bounds_lib.studies.results): the checkpoint round trip, refusing
files of another version or corrupted ones, and the committed files loading from the package (Chapters 7–8)."""
import json
import pathlib

import numpy as np
import pytest
import torch

from bounds_lib.studies import results as R
from bounds_lib.theory.model import forward, random_transformer
from bounds_lib.studies.results import load_model, save_model
from bounds_lib.analysis.single_head import single_head_proxies
from bounds_lib.studies.training import TrainConfig, train

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "bounds_lib" / "data"
COMMITTED = DATA / "trained_grid.json"


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


def test_results_from_another_version_or_corrupted_are_refused(tmp_path):
    good = json.loads(COMMITTED.read_text())
    R.check_results(good)
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
        with pytest.raises(R.ResultsError, match=msg):
            R.read_results(tmp_path / name)
    (tmp_path / "broken.json").write_text(COMMITTED.read_text()[:5000])
    with pytest.raises(R.ResultsError, match="corrupted results file"):
        R.read_results(tmp_path / "broken.json")
    with pytest.raises(R.ResultsError, match="cannot read"):
        R.read_results(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="available"):
        R.load_results("no_such_results")


def test_committed_results_load_from_the_package():
    for name, file in R.RESULTS_FILES.items():
        if (DATA / file).is_file():
            d = R.load_results(name)
            assert d["metadata"]["n_rows"] == len(d["rows"])


# ----------------------------------------------------------------------------- the command a chapter shows
@pytest.mark.parametrize("name", sorted(R.RESULTS_FILES))
def test_rerun_command_of_every_committed_file(name):
    import shlex

    meta = R.load_results(name)["metadata"]
    shown = R.rerun_command(meta)
    lines = shown.splitlines()
    assert all(len(line) <= 78 for line in lines), lines
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    # the shell reads the same arguments as recorded, without the note, under today's module name
    recorded = meta["command"].split(" --note", 1)[0].split()
    # a backslash-newline is removed by the shell (a line continuation); shlex does not know it
    typed = shlex.split(shown.replace("\\\n", " "))
    assert typed[:3] == R.GRID_COMMAND.split() and typed[3:] == recorded[3:]
    assert "--note" not in typed and "bounds_lib.experiments" not in shown


def test_rerun_command_wraps_and_refuses():
    meta = {"command": "python -m bounds_lib.studies.grid --select a=1 b=2 c=3 d=4 e=5 f=6 --jobs 2"}
    assert R.rerun_command(meta) == meta["command"]
    narrow = R.rerun_command(meta, width=36).splitlines()
    assert narrow[0] == "python -m bounds_lib.studies.grid \\"
    # an option with more values than fit: its values continue on the next line, within the width
    assert all(len(line) <= 36 for line in narrow) and "    --select a=1 b=2 c=3 d=4 e=5 \\" in narrow
    # the module paths the command had before (the shim module, then the flat module) are today's
    for old in ("python -m bounds_lib.experiments", "python -m bounds_lib.grid"):
        assert R.rerun_command({"command": old + " --preset robust"}) == R.GRID_COMMAND + " --preset robust"
    other = R.rerun_command({"command": "bounds-lib analyze model --json out.json"}, width=30)
    assert other.splitlines()[0].startswith("bounds-lib ")
    for bad in ({}, {"command": "  "}, {"command": 3}, None):
        with pytest.raises(ValueError, match="records no command"):
            R.rerun_command(bad)
    for w in (19, 2.5, True):
        with pytest.raises(ValueError, match="width"):
            R.rerun_command(meta, width=w)


def test_rerun_command_edges():
    grid = R.GRID_COMMAND  # 25 characters
    # the default width is 78: a line of 76 characters stays one line (two are left for " \")
    fits = {"command": f"{grid} --out {'x' * (76 - len(grid) - 7)}.json"[:76]}
    assert len(fits["command"]) == 76 and R.rerun_command(fits) == fits["command"]
    over = {"command": fits["command"] + "n"}
    assert R.rerun_command(over).splitlines() == [f"{grid} \\", "    " + over["command"][len(grid) + 1:]]
    # an option keeps its value on its line: "--preset" alone would fit after "--out x.json" at 50
    meta = {"command": f"{grid} --out x.json --preset study"}
    assert R.rerun_command(meta, width=50).splitlines() == [f"{grid} --out x.json \\", "    --preset study"]
    # the head alone on the first line when even "-m bounds_lib.studies.grid" would not follow "python"
    assert R.rerun_command(meta, width=24).splitlines()[0] == f"{grid} \\"
    # an option with its values exactly filling a line (4 + 24 = 28 = 30 - 2) stays whole ...
    whole = {"command": f"{grid} --select aaaaa=1 bb=2 cc"}
    assert len("--select aaaaa=1 bb=2 cc") == 24
    assert R.rerun_command(whole, width=30).splitlines() == [f"{grid} \\", "    --select aaaaa=1 bb=2 cc"]
    # ... two characters more and its values go on as needed, every line within the width
    split = R.rerun_command({"command": whole["command"] + "cc"}, width=30).splitlines()
    assert split == [f"{grid} \\", "    --select aaaaa=1 bb=2 \\", "    cccc"]
    # the note is cut at its first " --note" (a note may itself mention --note)
    noted = {"command": f"{grid} --jobs 2 --note see --note of run 3"}
    assert R.rerun_command(noted) == f"{grid} --jobs 2"
    assert R.rerun_command(meta, width=20).startswith(grid)
    with pytest.raises(ValueError, match="width must be an integer of at least 20 characters, not 25.0"):
        R.rerun_command(meta, width=25.0)
    with pytest.raises(ValueError, match=r"records no command \(metadata\['command'\], which bounds_lib.studies.grid "
                                         r"writes into every results file\)"):
        R.rerun_command({"command": None})


def test_rerun_command_keeps_a_fitting_option_whole_on_a_new_line():
    # at width 60 the option and its values (54 characters + 4 of indent = 58) fit a line of their own
    # but not after "--out x.json": they start the next line whole, not split across two lines
    unit = "--select " + " ".join(["aaaaa=1"] * 5) + " bbbbb"
    assert len(unit) == 54
    meta = {"command": f"{R.GRID_COMMAND} --out x.json {unit}"}
    assert R.rerun_command(meta, width=60).splitlines() == [f"{R.GRID_COMMAND} --out x.json \\", "    " + unit]
