"""The ``bounds-lib`` command line: reports, plots, and every bad input.

Each bad input must give a non-zero exit, exactly one line on stderr (no traceback unless
``--debug``) and no report file.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiny_checkpoints import write_tiny_bert  # noqa: E402

from bounds_lib.cli import main  # noqa: E402


def _bert(path, *, L=2, N=16, H=2, F=32, seed=0, init_std=0.02):
    """A tiny BERT written into ``path`` (the one writer of the test suite, :mod:`tiny_checkpoints`)."""
    return write_tiny_bert(path, layers=L, hidden=N, heads=H, intermediate=F, seed=seed, init_std=init_std)


def _edit_config(path, **kw):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(kw)
    (path / "config.json").write_text(json.dumps(cfg))


def _rewrite_tensors(path, fn):
    from safetensors.numpy import load_file, save_file

    f = path / "model.safetensors"
    t = load_file(f)
    t = fn(t)
    save_file(t, f)


def _truncate(path):
    f = path / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _garbage(path):
    f = path / "model.safetensors"
    data = bytearray(f.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    data[8:8 + n] = b"#" * n
    f.write_bytes(bytes(data))


def _nan(path):
    def fn(t):
        k = "encoder.layer.1.output.dense.weight"
        t[k] = t[k].copy()
        t[k][0, 0] = np.nan
        t[k][0, 1] = np.inf
        return t
    _rewrite_tensors(path, fn)


def _missing_tensor(path):
    def fn(t):
        del t["encoder.layer.1.attention.self.value.weight"]
        return t
    _rewrite_tensors(path, fn)


BAD = {
    # case: (prepare(tmp model dir) -> model argument, expected message fragment)
    "missing path": (lambda p: str(p / "does-not-exist"), "no such model directory"),
    "empty directory": (lambda p: (p.mkdir(exist_ok=True), str(p))[1], "is empty"),
    "no config": (lambda p: (_bert(p), (p / "config.json").unlink(), str(p))[2], "no config.json"),
    "truncated safetensors": (lambda p: (_bert(p), _truncate(p), str(p))[2], "truncated"),
    "garbage header": (lambda p: (_bert(p), _garbage(p), str(p))[2], "garbage header"),
    "nan weights": (lambda p: (_bert(p), _nan(p), str(p))[2], "2 NaN or infinite entries"),
    "missing layer tensor": (lambda p: (_bert(p), _missing_tensor(p), str(p))[2],
                             "layer 1 has no 'attention.self.value.weight'"),
    "heads not dividing": (lambda p: (_bert(p), _edit_config(p, num_attention_heads=3), str(p))[2],
                           "3 attention heads do not divide the hidden size 16"),
    "unknown architecture": (lambda p: (_bert(p), _edit_config(p, model_type="bart"), str(p))[2],
                             "unsupported architecture 'bart'"),
    "hub id offline": (lambda p: "bounds-lib-tests/never-cached-model", "nor a Hub model in the local cache"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_one_line_no_report(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("BOUNDS_LIB_ALLOW_DOWNLOAD", raising=False)
    prepare, fragment = BAD[case]
    model = prepare(tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    capsys.readouterr()  # drop what writing the checkpoint printed
    rc = main(["analyze", model, "--json", str(out / "r.json"), "--csv", str(out / "r.csv"),
               "--plots", str(out / "plots"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("bounds-lib: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in err
    assert list(out.iterdir()) == []  # no partial report, no plots folder


def test_hub_offline_wins_over_allow_download(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["analyze", "bounds-lib-tests/never-cached-model", "--allow-download", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "HF_HUB_OFFLINE is set" in err and err.count("\n") == 1


def test_debug_shows_traceback_in_a_real_process(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "bounds_lib", "analyze", str(tmp_path / "nope")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    r = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "Traceback" in r.stderr and "CheckpointError" in r.stderr


def test_usage_error_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["analyze"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["analyze", "x", "--logit-scale", "-3"])
    assert e.value.code == 2


def test_output_folder_missing_is_checked_before_work(tmp_path, capsys):
    _bert(tmp_path / "m")
    rc = main(["analyze", str(tmp_path / "m"), "--json", str(tmp_path / "no" / "r.json")])
    assert rc == 1 and "does not exist" in capsys.readouterr().err


def test_analyze_writes_reports_and_plots(tmp_path, capsys):
    _bert(tmp_path / "m", L=3)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["analyze", str(tmp_path / "m"), "--json", str(out / "r.json"), "--csv", str(out / "r.csv"),
               "--plots", str(out / "plots"), "--mode", "paper", "--logit-scale", "inv_sqrt_dh", "--progress",
               "--entrywise"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "B_Edelman" in cap.out and "extension" in cap.out and "not computed" not in cap.out
    assert "12/12" in cap.err and "12/12" not in cap.out  # tqdm bar: 3 layers × 4 matrix groups, on stderr only
    rep = json.loads((out / "r.json").read_text())
    assert rep["mode"] == "paper" and rep["dtype"] == "float64"
    assert rep["options"]["logit_scale_value"] == pytest.approx(1 / np.sqrt(8))
    assert rep["meta"]["versions"]["numpy"] == np.__version__
    assert "blas" in rep["meta"] and rep["meta"]["mode"] == "paper"
    assert len(rep["matrices"]) == 3 * (2 * 2 + 2)
    csv_lines = (out / "r.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 1 + 3 * 6 and csv_lines[0].startswith("layer,head,expert,kind")
    pngs = sorted(p.name for p in (out / "plots").iterdir())
    assert pngs == ["T_ratio.png", "esd.png", "norms.png", "p_star_histogram.png", "prefix_depth.png",
                    "spectral_decay.png"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_scaling_family(tmp_path, capsys):
    paths = []
    for L in (1, 2):
        for N in (8, 16):
            p = tmp_path / f"L{L}_N{N}"
            _bert(p, L=L, N=N, H=2, F=2 * N, seed=L * 100 + N)
            paths.append(str(p))
    rc = main(["scaling", *paths, "--csv", str(tmp_path / "s.csv"), "--json", str(tmp_path / "s.json"),
               "--plots", str(tmp_path / "plots"), "--no-progress"])
    assert rc == 0
    rows = (tmp_path / "s.csv").read_text().strip().splitlines()
    assert len(rows) == 5
    assert (tmp_path / "plots" / "scaling.png").is_file()
    assert len(json.loads((tmp_path / "s.json").read_text())["models"]) == 4


def test_no_entrywise_and_threads(tmp_path, capsys):
    _bert(tmp_path / "m")
    rc = main(["analyze", str(tmp_path / "m"), "--no-entrywise", "--threads", "2", "--json", str(tmp_path / "r.json"),
               "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "not computed (opt in: --entrywise)" in out
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["summary"]["B_edelman_11_extension"]["log10"] is None
    assert rep["meta"]["entrywise_11_norms_of_heads"] is False
    # the (1,1) norms are opt-in: without either flag they are not computed either
    assert main(["analyze", str(tmp_path / "m"), "--no-progress"]) == 0
    assert "not computed (opt in: --entrywise)" in capsys.readouterr().out
    assert main(["analyze", str(tmp_path / "m"), "--threads", "-1"]) == 1


def _fake_hub_cache(cache, repo_id, L, N, H):
    """Lay out a Hugging Face cache entry (refs/main → snapshots/<rev>/) holding a tiny random BERT."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    base = cache / ("models--" + repo_id.replace("/", "--"))
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    _bert(snap, L=L, N=N, H=H, F=4 * N, seed=L * 1000 + N)


def test_hub_ids_resolve_through_the_local_cache_offline(tmp_path):
    cache = tmp_path / "hub"
    ids = []
    for L in (2, 4):
        rid = f"google/bert_uncased_L-{L}_H-128_A-2"
        _fake_hub_cache(cache, rid, L, 128, 2)
        ids.append(rid)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    env.pop("BOUNDS_LIB_ALLOW_DOWNLOAD", None)
    r = subprocess.run([sys.executable, "-m", "bounds_lib", "scaling", *ids, "--csv", str(tmp_path / "s.csv"),
                        "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "s.csv").read_text().strip().splitlines()
    assert len(rows) == 3 and rows[1].startswith(ids[0]) and ",2,128," in rows[1] and ",4,128," in rows[2]
    # one id missing from the cache: a clear error, nothing written
    r = subprocess.run([sys.executable, "-m", "bounds_lib", "scaling", ids[0], "google/bert_uncased_L-6_H-128_A-2",
                        "--csv", str(tmp_path / "t.csv")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1 and "L-6_H-128" in r.stderr and not (tmp_path / "t.csv").exists()


def test_failed_plot_leaves_no_folder(tmp_path):
    from bounds_lib.cli.outputs import OutputSet, _stage_plots

    def broken():
        raise RuntimeError("a figure that cannot be drawn")

    def attempt(folder, figures):
        out = OutputSet()
        with pytest.raises(RuntimeError):
            try:
                _stage_plots(out, folder, figures)
                out.commit()
            except BaseException:
                out.rollback()
                raise
        assert out.state == "nothing"

    folder = tmp_path / "new" / "plots"
    attempt(folder, {"ok": lambda: __import__("matplotlib.pyplot").pyplot.figure(), "bad": broken})
    assert not (tmp_path / "new").exists()  # both folders this run made are gone
    folder.mkdir(parents=True)  # a folder the user already had is kept, and stays as it was
    attempt(folder, {"bad": broken})
    assert folder.is_dir() and list(folder.iterdir()) == []


@pytest.mark.parametrize("exc", [TypeError("n_layers must be an integer, got float 2.0"),
                                 ValueError("n_layers == 5, must be <= 2")])
def test_type_and_value_errors_give_one_line(exc, tmp_path, capsys, monkeypatch):
    """The library's TypeError (wrong type) and ValueError (wrong value) both end as one clean line, exit 1."""
    import bounds_lib.analysis.spectra

    _bert(tmp_path / "m")
    capsys.readouterr()

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(bounds_lib.analysis.spectra, "compute_spectra", fail)
    assert main(["analyze", str(tmp_path / "m"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err == f"bounds-lib: error: {exc}\n"


def test_progress_bar_only_on_a_terminal_by_default(tmp_path, capsys, monkeypatch):
    """Default: a tqdm bar on stderr only when stderr is a terminal; never anything on stdout."""
    _bert(tmp_path / "m")
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "m"), "--quiet"]) == 0  # captured stderr: not a terminal
    cap = capsys.readouterr()
    assert cap.out == "" and "8/8" not in cap.err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["analyze", str(tmp_path / "m"), "--quiet"]) == 0
    cap = capsys.readouterr()
    assert cap.out == "" and "8/8" in cap.err  # 2 layers × 4 matrix groups
    assert main(["analyze", str(tmp_path / "m"), "--quiet", "--no-progress"]) == 0
    assert "8/8" not in capsys.readouterr().err
