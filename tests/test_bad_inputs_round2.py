"""Bad input, round two (issue 21): ambiguous checkpoints, activations, falsy config values, outputs that
are not regular files, inputs a run must not write over, concurrent runs, signals, zero matrices,
odd paths and deadlines.

Same contract as tests/test_bad_inputs.py (its helpers are reused): a refused case exits ≠ 0 with one
``bounds-lib: error:`` line naming the problem and what is supported, and leaves no output; an
accepted case gives the numbers derived here independently (never typed in).
"""
from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_bad_inputs import CONFIG, F, H, L, N, assert_one_clear_line, run_cli, tensors, write_model

from bounds_lib.checkpoints import ACTIVATION_L_PHI, CheckpointError, detect_architecture, open_checkpoint
from bounds_lib.cli import main
from bounds_lib.analysis.scoring import analyze, score
from bounds_lib.analysis.spectra import compute_spectra

SIZES = {"hidden": N, "heads": H, "intermediate": F, "layers": L}


def _two_stacks(d: Path, a: str, b: str) -> Path:
    """One file holding two BERT layer stacks, under the name prefixes ``a`` and ``b`` (other weights)."""
    t = {a + k: v for k, v in tensors(seed=0).items()}
    t.update({b + k: v for k, v in tensors(seed=1).items()})
    return write_model(d, t)


# ------------------------------------------------------------------ 1. two layer stacks in one file


@pytest.mark.parametrize("a, b", [("student.", "teacher."), ("encoder_q.", "encoder_k."), ("bert.", "bart."),
                                  ("", "teacher.")],
                         ids=["student/teacher", "encoder_q/encoder_k", "bert/bart", "bare/teacher"])
def test_two_layer_stacks_are_refused_with_the_candidates(a, b, tmp_path, capsys):
    """Which stack was read used to follow the hash seed (the same file gave 10^2.70 or 10^1.37); now the
    file is refused, the message lists both prefixes and says how to choose."""
    model = _two_stacks(tmp_path / "m", a, b)
    rc, cap, out = run_cli(capsys, tmp_path, model)
    assert_one_clear_line(rc, cap, out, "2 'bert' layer stacks")
    assert repr(a) in cap.err and repr(b) in cap.err and "--prefix" in cap.err
    with pytest.raises(CheckpointError, match="ambiguous"):
        detect_architecture(open_checkpoint(model))


def test_prefix_picks_a_stack_and_gives_that_models_numbers(tmp_path, capsys):
    """``--prefix teacher.`` gives exactly the numbers of the teacher's weights saved alone."""
    model = _two_stacks(tmp_path / "m", "student.", "teacher.")
    alone = write_model(tmp_path / "teacher_alone", tensors(seed=1))
    for prefix, ref in (("teacher.", alone), ("student.", write_model(tmp_path / "student_alone", tensors(seed=0)))):
        got = analyze(model, prefix=prefix)
        want = analyze(ref)
        assert got.arch.prefix == prefix
        assert (got.log_B_ours_sum, got.log_B_edelman) == (want.log_B_ours_sum, want.log_B_edelman)
    # the two stacks differ, so the choice matters (the test has power)
    assert analyze(model, prefix="student.").log_B_edelman != analyze(model, prefix="teacher.").log_B_edelman
    (tmp_path / "out").mkdir()
    assert main(["analyze", str(model), "--prefix", "teacher.", "--json", str(tmp_path / "out" / "r.json"),
                 "--quiet", "--no-progress"]) == 0
    d = json.loads((tmp_path / "out" / "r.json").read_text())
    assert d["summary"]["B_edelman"]["log10"] == pytest.approx(analyze(alone).log_B_edelman / math.log(10),
                                                               rel=1e-15)


def test_prefix_that_names_no_stack(tmp_path, capsys):
    model = _two_stacks(tmp_path / "m", "student.", "teacher.")
    rc, cap, out = run_cli(capsys, tmp_path, model, "--prefix", "nobody.")
    assert_one_clear_line(rc, cap, out, "no layer stack under the prefix 'nobody.'")
    assert "'student.'" in cap.err and "'teacher.'" in cap.err
    with pytest.raises(TypeError, match="prefix must be"):
        detect_architecture(open_checkpoint(model), prefix=1)


# ------------------------------------------------------------------ 3. the activation of every architecture


def test_every_listed_activation_is_transformers_own_with_its_lipschitz_constant():
    """Each name is a key of transformers' ``ACT2FN``, and its ``L_φ`` bounds the largest slope of
    transformers' own implementation (autograd on a fine grid) and is within 0.002 of it (tight)."""
    torch = pytest.importorskip("torch")
    from transformers.activations import ACT2FN

    x = torch.linspace(-12, 12, 480_001, dtype=torch.float64, requires_grad=True)
    for name, L_phi in ACTIVATION_L_PHI.items():
        assert name in ACT2FN, name
        (g,) = torch.autograd.grad(ACT2FN[name](x).sum(), x)
        slope = float(g.abs().max())
        assert slope <= L_phi + 1e-12 and L_phi - slope < 2e-3, (name, slope, L_phi)


def test_unknown_activation_is_refused_as_transformers_does(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    with pytest.raises(KeyError):  # transformers cannot build such a model
        transformers.BertModel(transformers.BertConfig(hidden_size=N, num_hidden_layers=1, num_attention_heads=H,
                                                       intermediate_size=F, vocab_size=10,
                                                       hidden_act="no_such_activation"))
    for bad in ("no_such_activation", None, 3, "relu2"):
        model = write_model(tmp_path / f"m{bad}", hidden_act=bad)
        rc, cap, out = run_cli(capsys, tmp_path, model)
        assert_one_clear_line(rc, cap, out, f"hidden_act = {bad!r} is not a supported activation; supported: ")
        assert "relu" in cap.err and "silu" in cap.err


def test_score_uses_the_configs_activation(tmp_path):
    """ReLU (L_φ = 1) and GELU (the released 1.13) give Λ that differ by exactly log 1.13 per layer; an
    explicit ``L_phi`` still overrides; a hand-made spectrum with an unknown activation is refused."""
    from dataclasses import replace

    relu = compute_spectra(write_model(tmp_path / "relu", hidden_act="relu"))
    gelu = compute_spectra(write_model(tmp_path / "gelu", hidden_act="gelu"))
    r, g = score(relu), score(gelu)
    assert r.L_phi == ACTIVATION_L_PHI["relu"] == 1.0 and g.L_phi == ACTIVATION_L_PHI["gelu"]
    np.testing.assert_allclose(g.log_Lambda - r.log_Lambda, math.log(ACTIVATION_L_PHI["gelu"]), rtol=1e-12)
    assert r.log_B_edelman < g.log_B_edelman  # a smaller L_φ, smaller depth weights α
    assert score(relu, L_phi=ACTIVATION_L_PHI["gelu"]).log_B_edelman == g.log_B_edelman
    assert r.to_dict()["options"]["L_phi_value"] == 1.0
    weird = replace(relu, arch=replace(relu.arch, activation="no_such_activation"))
    with pytest.raises(ValueError, match="activation 'no_such_activation' has no Lipschitz constant"):
        score(weird)


def test_llama_reads_silu_and_gpt2_reads_gelu_new(tmp_path):
    """The other families' activation keys (``hidden_act``, ``activation_function``, ``activation``)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cases = {
        "llama": (transformers.LlamaConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=12, vocab_size=10), transformers.LlamaModel, "silu"),
        "gpt2": (transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10, n_positions=8,
                                         bos_token_id=0, eos_token_id=0), transformers.GPT2Model, "gelu_new"),
        "distilbert": (transformers.DistilBertConfig(dim=8, n_layers=1, n_heads=2, hidden_dim=12, vocab_size=10,
                                                     max_position_embeddings=8, activation="relu"),
                       transformers.DistilBertModel, "relu"),
    }
    for name, (cfg, cls, act) in cases.items():
        torch.manual_seed(0)
        cls(cfg).save_pretrained(tmp_path / name)
        rep = analyze(tmp_path / name)
        assert rep.arch.activation == act and rep.L_phi == ACTIVATION_L_PHI[act]


# ------------------------------------------------------------------ 4. falsy config values are not defaults


def test_gpt2_n_inner_zero_is_refused_as_transformers_does(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10, n_positions=8, bos_token_id=0,
                                  eos_token_id=0)
    torch.manual_seed(0)
    transformers.GPT2Model(cfg).save_pretrained(tmp_path / "m")
    f = tmp_path / "m" / "config.json"
    assert analyze(tmp_path / "m").arch.d_ff == 4 * 8            # n_inner: null means 4·n_embd
    f.write_text(json.dumps({**json.loads(f.read_text()), "n_inner": 0}))
    transformers.logging.set_verbosity_error()
    with pytest.raises(RuntimeError):                           # transformers: size mismatch, refused
        transformers.GPT2Model.from_pretrained(tmp_path / "m")
    rc, cap, out = run_cli(capsys, tmp_path, tmp_path / "m")
    assert_one_clear_line(rc, cap, out, "feed-forward width must be a positive integer, got 0")


def test_zero_key_value_heads_is_refused(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.LlamaConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, intermediate_size=12, vocab_size=10)
    torch.manual_seed(0)
    transformers.LlamaModel(cfg).save_pretrained(tmp_path / "m")
    f = tmp_path / "m" / "config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), "num_key_value_heads": 0}))
    rc, cap, out = run_cli(capsys, tmp_path, tmp_path / "m")
    assert_one_clear_line(rc, cap, out, "number of key/value heads must be a positive integer, got 0")
    with pytest.raises(ZeroDivisionError):  # transformers cannot build it either
        transformers.LlamaModel(transformers.LlamaConfig(**{**cfg.to_dict(), "num_key_value_heads": 0}))



# ------------------------------------------------------------------ 5. outputs that are not regular files


def test_an_output_fifo_is_written_through_not_replaced(tmp_path, capsys):
    """A FIFO named as ``--json`` stays a FIFO and its reader gets the report (as root, the old rename
    replaced it — and ``/dev/null`` — by a regular file)."""
    model = write_model(tmp_path / "m")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("text", fifo.read_text()), daemon=True)
    reader.start()
    rc = main(["analyze", str(model), "--json", str(fifo), "--quiet", "--no-progress"])
    reader.join(30)
    assert rc == 0 and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(got["text"])["summary"]["B_edelman"]["log10"] == pytest.approx(
        analyze(model, entrywise=False).log_B_edelman / math.log(10), rel=1e-15)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "m"]  # no temporary, no backup


def test_special_outputs_are_classified_without_writing():
    """``/dev/null`` (a character device) is written through, ``-`` is stdout; a socket is refused."""
    from bounds_lib.cli.errors import _UserError
    from bounds_lib.cli.outputs import stream_target

    assert stream_target("/dev/null") == "through" and stream_target("-") == "stdout"
    assert stream_target(__file__) is None
    with socket.socket(socket.AF_UNIX) as s, tempfile.TemporaryDirectory() as d:
        s.bind(os.path.join(d, "sock"))
        with pytest.raises(_UserError, match="is a socket, not a regular file; an output is a regular file"):
            stream_target(os.path.join(d, "sock"))


def test_an_output_socket_is_refused_before_work(tmp_path, capsys):
    model = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(out / "r.json"))
        rc = main(["analyze", str(model), "--json", str(out / "r.json"), "--no-progress"])
        cap = capsys.readouterr()
        assert rc == 1 and cap.err.count("\n") == 1 and "--json" in cap.err and "is a socket" in cap.err
        assert stat.S_ISSOCK(os.stat(out / "r.json").st_mode) and sorted(os.listdir(out)) == ["r.json"]


# ------------------------------------------------------------------ 6. inputs a report must not replace


def test_shards_in_a_subfolder_are_inputs(tmp_path, capsys):
    model = write_model(tmp_path / "m")
    sub = model / "weights"
    sub.mkdir()
    (model / "model.safetensors").rename(sub / "model-00001-of-00001.safetensors")
    names = json.loads(json.dumps({"weight_map": {k: "weights/model-00001-of-00001.safetensors"
                                                  for k in tensors()}}))
    (model / "model.safetensors.index.json").write_text(json.dumps(names))
    assert analyze(model).L == L  # the layout itself is valid
    shard = sub / "model-00001-of-00001.safetensors"
    before = shard.read_bytes()
    rc = main(["analyze", str(model), "--json", str(shard), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1 and "is a file of the model folder" in cap.err and cap.err.count("\n") == 1
    assert shard.read_bytes() == before


def test_a_hub_snapshots_config_is_an_input(tmp_path, capsys, monkeypatch):
    """A Hub id's cached ``config.json`` (a link into the cache's blobs) is not replaced by a report."""
    import huggingface_hub.constants

    rev = "0123456789abcdef0123456789abcdef01234567"
    base = tmp_path / "hub" / "models--org--tiny"
    snap = base / "snapshots" / rev
    write_model(base / "blobs")
    snap.mkdir(parents=True)
    for f in ("config.json", "model.safetensors"):
        (snap / f).symlink_to(base / "blobs" / f)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert analyze("org/tiny").L == L  # the id resolves through the cache
    before = (base / "blobs" / "config.json").read_bytes()
    rc = main(["analyze", "org/tiny", "--json", str(snap / "config.json"), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1 and "is a file of the model folder org/tiny" in cap.err and cap.err.count("\n") == 1
    assert (base / "blobs" / "config.json").read_bytes() == before and (snap / "config.json").is_symlink()


# ------------------------------------------------------------------ 7. two runs on the same outputs


def _hold_folder_lock(folder):
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_commit_waits_for_another_runs_commit_then_refuses(tmp_path, capsys, monkeypatch):
    """While another run commits into the folder (holds its lock), a run waits; past the wait it refuses
    with one line and leaves nothing; once the other run is done it commits normally."""
    import bounds_lib.cli.outputs as outputs

    model = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(outputs, "LOCK_WAIT_S", 0.3)
    fd = _hold_folder_lock(out)
    try:
        rc = main(["analyze", str(model), "--json", str(out / "r.json"), "--csv", str(out / "r.csv"),
                   "--no-progress"])
        assert_one_clear_line(rc, capsys.readouterr(), out, "another run has been writing its outputs into")
        monkeypatch.setattr(outputs, "LOCK_WAIT_S", 30.0)
        threading.Timer(0.3, os.close, (fd,)).start()  # the other run finishes in 0.3 s
        fd = None
        assert main(["analyze", str(model), "--json", str(out / "r.json"), "--csv", str(out / "r.csv"),
                     "--quiet", "--no-progress"]) == 0
        assert sorted(os.listdir(out)) == ["r.csv", "r.json"]
    finally:
        if fd is not None:
            os.close(fd)


def test_the_renames_happen_under_the_folder_lock(tmp_path, monkeypatch):
    """Every rename of a commit (and of its rollback) runs while the folder is locked against other runs."""
    import bounds_lib.cli.outputs as outputs

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.json").write_text("old")
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        probe = os.open(out, os.O_RDONLY)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append("unlocked")
        except BlockingIOError:
            seen.append("locked")
        finally:
            os.close(probe)
        real_replace(src, dst)
        if len(seen) == 3:
            raise KeyboardInterrupt  # interrupted after the first file: the rollback runs locked too

    monkeypatch.setattr(outputs.os, "replace", replace)
    s = outputs.OutputSet()
    s.add(out / "a.json", "new a")
    s.add(out / "b.json", "new b")
    with pytest.raises(KeyboardInterrupt):
        s.commit()
    assert seen and set(seen) == {"locked"}
    assert sorted(os.listdir(out)) == ["a.json"] and (out / "a.json").read_text() == "old"


# ------------------------------------------------------------------ 8. SIGTERM and SIGHUP

_STOPPED_RUN = r"""
import os, signal, sys, time
import bounds_lib.cli as cli, bounds_lib.cli.outputs as outputs, bounds_lib.analysis.plotting as P
model, out, when = sys.argv[1:4]
if when == "rendering":
    def slow(rep):
        open(os.path.join(out, "..", "staged"), "w").close()
        for _ in range(1200):  # Python code, as rendering is: a signal that came just before one
            time.sleep(0.05)   # long C sleep would wait for its end (no check in between)
    P.figure_T_ratio = slow
else:
    real = os.replace
    def replace(src, dst):
        real(src, dst)
        if str(src).endswith(".tmp"):  # the first final rename done: the signal comes between two
            os.kill(os.getpid(), getattr(signal, sys.argv[4]))
    outputs.os.replace = replace
sys.exit(cli.main(["analyze", model, "--json", os.path.join(out, "r.json"), "--csv", os.path.join(out, "r.csv"),
                   "--plots", os.path.join(out, "plots"), "--no-progress"]))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_stopping_signal_during_the_run_leaves_nothing(sig, tmp_path):
    model = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen([sys.executable, "-c", _STOPPED_RUN, str(model), str(out), "rendering"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not (tmp_path / "staged").exists() and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + getattr(signal, sig), err
    assert err.strip() == f"bounds-lib: stopped by {sig}; nothing was written"
    assert os.listdir(out) == []  # no .tmp, no plots folder, no report


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stopping_signal_between_the_final_renames_completes_the_set(sig, tmp_path):
    model = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_text("old json")
    (out / "r.csv").write_text("old csv")
    r = subprocess.run([sys.executable, "-c", _STOPPED_RUN, str(model), str(out), "renames", sig],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 128 + getattr(signal, sig), r.stderr
    assert "the reports were written completely before the interruption" in r.stderr
    assert sorted(os.listdir(out)) == ["plots", "r.csv", "r.json"]  # no .old backup left, no .tmp
    assert json.loads((out / "r.json").read_text())["summary"] and (out / "r.csv").read_text() != "old csv"
    assert len(os.listdir(out / "plots")) == 6  # every figure of --plots (esd.png included)


# ------------------------------------------------------------------ 10, 11. odd names, '-', stdout


def test_a_model_folder_with_a_non_utf8_name(tmp_path, capsys):
    name = os.fsdecode(b"m\xff")
    model = write_model(tmp_path / name)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["analyze", str(model), "--json", str(out / "r.json"), "--csv", str(out / "r.csv"), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads((out / "r.json").read_text(encoding="utf-8"))
    assert d["model"] == str(tmp_path) + "/m\\xff"  # the undecodable byte, spelled out
    assert "m\\xff" in cap.out


def test_dash_is_stdout_and_the_table_steps_aside(tmp_path, capsys):
    model = write_model(tmp_path / "m")
    capsys.readouterr()
    assert main(["analyze", str(model), "--csv", "-", "--no-progress"]) == 0
    cap = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(cap.out)))
    assert len(rows) == L * (2 * H + 2) and not (Path.cwd() / "-").exists()
    assert main(["analyze", str(model), "--json", "-", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"]["n_layers"] == L
    rc = main(["analyze", str(model), "--json", "-", "--csv", "-", "--no-progress"])
    assert rc == 1 and "the same file as --json" in capsys.readouterr().err


def test_dev_stdout_into_a_pipe(tmp_path):
    model = write_model(tmp_path / "m")
    r = subprocess.run([sys.executable, "-m", "bounds_lib", "analyze", str(model), "--json", "/dev/stdout",
                        "--no-progress"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["architecture"]["n_layers"] == L


def test_stdout_full_says_the_reports_were_written(tmp_path):
    model = write_model(tmp_path / "m")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "bounds_lib", "analyze", str(model), "--json",
                            str(tmp_path / "r.json"), "--no-progress"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == ("bounds-lib: error: cannot print the table on standard output (No space left on "
                                "device); the reports were written completely")
    assert json.loads((tmp_path / "r.json").read_text())["architecture"]["n_layers"] == L


# ------------------------------------------------------------------ 9. zero matrices (pruned heads, zero FFN)


@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_zero_matrices_plot_without_warnings(mode, tmp_path, capsys):
    """A zero head (its Q rows zero) and a zero feed-forward layer: ``--plots`` writes every figure, with
    no RuntimeWarning; the zero matrices are left out of the log axes and each panel says how many."""
    import warnings

    from bounds_lib.analysis import plotting

    t = tensors()
    t["encoder.layer.0.attention.self.query.weight"][: N // H] = 0.0
    t["encoder.layer.1.intermediate.dense.weight"][:] = 0.0
    t["encoder.layer.1.output.dense.weight"][:] = 0.0
    model = write_model(tmp_path / "m", t)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rc, cap, out = run_cli(capsys, tmp_path, model, "--mode", mode, "--entrywise")
        assert rc == 0, cap.err
        assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(
            f"{n}.png" for n in ("spectral_decay", "esd", "p_star_histogram", "T_ratio", "norms", "prefix_depth"))
        rep = analyze(model, mode=mode)
        zero = [m for m in rep.matrices if m.sigma1 == 0]
        assert {(m.layer, m.head, m.matrix_type) for m in zero} == {(0, 0, "QK"), (1, -1, "M_in"), (1, -1, "M_out")}
        fig = plotting.figure_T_ratio(rep)
        qk = fig.axes[0]
        assert len(qk.lines) == len(rep.select("QK")) - 1 + 1  # one zero head left out; the dashed ratio-1 line
        assert any(t.get_text() == "1 zero matrix not drawn" for t in qk.texts)
        assert all(np.all(np.isfinite(ln.get_ydata())) for ax in fig.axes for ln in ax.lines)
        norms = plotting.figure_norms(rep)
        assert any(t.get_text() == f"{len(zero)} zero matrices not drawn" for t in norms.axes[0].texts)


# ------------------------------------------------------------------ 12. deadlines


def test_download_timeout_beyond_a_week_is_refused_before_work(tmp_path, capsys):
    from bounds_lib.checkpoints import resolve_hub_id
    from bounds_lib.checkpoints.hub import MAX_DOWNLOAD_TIMEOUT_S

    model = write_model(tmp_path / "m")
    rc, cap, out = run_cli(capsys, tmp_path, model, "--download-timeout", "1e10")
    assert_one_clear_line(rc, cap, out, f"at most {MAX_DOWNLOAD_TIMEOUT_S:g} (one week), got 1e+10")
    with pytest.raises(ValueError, match="at most 604800"):
        resolve_hub_id("org/never-cached", download_timeout=1e10)
    assert main(["analyze", str(model), "--download-timeout", str(MAX_DOWNLOAD_TIMEOUT_S), "--quiet",
                 "--no-progress"]) == 0  # the limit itself is allowed


def test_every_request_has_a_deadline_not_only_the_download(tmp_path, monkeypatch):
    """A server that accepts and never answers: with a 1 s request deadline and a 60 s download deadline,
    the first request (``repo_info``, which huggingface_hub sends without a timeout) gives up after about
    1 s (plus huggingface_hub's retries) — not at the download deadline."""
    import huggingface_hub.constants
    from test_bad_inputs import SilentServer

    import bounds_lib.checkpoints.hub as ck  # resolve_hub_id reads REQUEST_TIMEOUT_S there

    monkeypatch.setattr(ck, "REQUEST_TIMEOUT_S", 1.0)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
              "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = SilentServer(lifetime=70)
    try:
        t0 = time.monotonic()
        with pytest.raises(CheckpointError) as err:
            ck.resolve_hub_id("bounds-lib-tests/silent", allow_download=True, download_timeout=60,
                              endpoint=f"http://127.0.0.1:{server.port}")
        wall = time.monotonic() - t0
    finally:
        server.stop()
    assert server.accepted >= 1
    assert "did not finish within 60 s" not in str(err.value) and wall < 30, (wall, str(err.value))
    from huggingface_hub.utils import _http
    assert _http._GLOBAL_CLIENT_FACTORY is _http.default_client_factory  # restored


# ------------------------------------------------------------------ 13. .bin files that are not weights-only


class _RunsCode:
    """Unpickling this object would run ``touch <marker>`` — what a weights-only load must refuse."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _bin_model(d: Path, save) -> Path:
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG))
    save(d / "pytorch_model.bin")
    return d


@pytest.mark.parametrize("kind", ["plain pickle", "code in the pickle"])
def test_a_pickle_bin_is_refused_with_the_weights_only_reason_on_one_line(kind, tmp_path):
    import pickle

    torch = pytest.importorskip("torch")
    marker = tmp_path / "code-ran"
    sd = {k: torch.from_numpy(v) for k, v in tensors().items()}
    if kind == "plain pickle":  # numpy arrays, pickle protocol 4: torch also warns about the protocol
        model = _bin_model(tmp_path / "m", lambda f: f.write_bytes(pickle.dumps(tensors(), protocol=4)))
        reason = "Unsupported operand"
    else:
        model = _bin_model(tmp_path / "m", lambda f: torch.save({**sd, "x": _RunsCode(marker)}, f))
        reason = "Trying to load unsupported GLOBAL posix.system whose module posix is blocked"
    r = subprocess.run([sys.executable, "-m", "bounds_lib", "analyze", str(model), "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr  # no torch UserWarning lines
    assert lines[0].startswith(f"bounds-lib: error: {model / 'pytorch_model.bin'}: refused: not a weights-only "
                               "PyTorch file (torch.load(weights_only=True): " + reason), lines[0]
    assert "mmap" not in lines[0] and "add_safe_globals" not in lines[0] and "\x1b" not in lines[0]
    assert not marker.exists()  # nothing of the file was executed


def test_a_legacy_torch_bin_is_read(tmp_path):
    """The old (non-zip) ``torch.save`` format cannot be memory-mapped but is weights-only: it is read,
    with the numbers of the same weights in safetensors."""
    torch = pytest.importorskip("torch")
    sd = {k: torch.from_numpy(v) for k, v in tensors().items()}
    model = _bin_model(tmp_path / "m", lambda f: torch.save(sd, f, _use_new_zipfile_serialization=False))
    got, want = analyze(model), analyze(write_model(tmp_path / "st"))
    assert got.meta["source_kind"] == "pytorch-bin"
    assert (got.log_B_ours_sum, got.log_B_edelman) == (want.log_B_ours_sum, want.log_B_edelman)


# ------------------------------------------------------------------ 14. the API at extreme magnitudes


def test_a_list_valued_weight_is_validated_not_an_attribute_error():
    """In a state dict, a nested list of numbers is read as the array it is; anything else is the
    validation's one-line error (a CheckpointError, a ValueError), not an AttributeError."""
    from bounds_lib.checkpoints import random_bert_state_dict

    sd, cfg = random_bert_state_dict(n_layers=1, hidden=4, n_heads=2, d_ff=8)
    k = "encoder.layer.0.attention.self.query.weight"
    want = analyze(dict(sd), config=cfg)
    got = analyze({**sd, k: sd[k].tolist()}, config=cfg)
    assert (got.log_B_ours_sum, got.log_B_edelman) == (want.log_B_ours_sum, want.log_B_edelman)
    for bad, msg in (("abc", "must be a numeric array"), ([[1.0, 2.0], [3.0]], "cannot be converted to an array"),
                     (None, "must be a numeric array")):
        with pytest.raises(CheckpointError, match=f"tensor '{k}' {msg}"):
            analyze({**sd, k: bad}, config=cfg)


def test_an_output_fifo_without_a_reader_fails_at_once_and_writes_nothing(tmp_path, capsys):
    """No process reads the FIFO: one line saying so (not a hang), and the run's other outputs are not
    written either (streams go first, before the renames)."""
    model = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "fifo")
    rc = main(["analyze", str(model), "--json", str(out / "fifo"), "--csv", str(out / "r.csv"), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1 and cap.err.strip() == (f"bounds-lib: error: cannot write {out / 'fifo'} (no process reads the "
                                           "FIFO); no file of this run was written")
    assert sorted(os.listdir(out)) == ["fifo"] and stat.S_ISFIFO(os.stat(out / "fifo").st_mode)
