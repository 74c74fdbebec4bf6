"""Bad input of every kind a careful user may hand ``bounds-lib`` (issue 12), and the outputs' contract.

Each bad-input case asserts: exit status ≠ 0 with exactly one line on stderr that starts with
``bounds-lib: error:`` and names the problem (CLI), or one ``ValueError``/``TypeError``/
:class:`~bounds_lib.checkpoints.CheckpointError` (API) — and that no output file of the run is left.
Categories: safetensors files, model configs, sharded checkpoints, the model argument, numerics,
output paths and the all-or-nothing contract, downloads (a local server that never answers), the
API's arrays, and process behaviour (closed pipe). Cases that behaved well before issue 12 are kept
as regression tests. Every checkpoint is a tiny one written here (BERT-shaped, N = 8, 2 layers), so
the whole file runs in seconds; subprocesses only where process behaviour is the point.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors import SafetensorError
from safetensors.numpy import save_file
from tiny_checkpoints import BERT_LAYER_ROLES, bert_encoder_weights, write_tiny_bert

from bounds_lib.checkpoints import CheckpointError, open_checkpoint, read_safetensors_header
from bounds_lib.cli import main
from bounds_lib.analysis.scoring import score
from bounds_lib.analysis.cache import SpectraCache
from bounds_lib.analysis.kernel import MatrixSpectrum
from bounds_lib.analysis.spectra import compute_spectra

N, H, F, L = 8, 2, 12, 2
SIZES = {"hidden": N, "heads": H, "intermediate": F, "layers": L}
CONFIG = {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
          "intermediate_size": F, "hidden_act": "gelu"}  # what write_tiny_bert writes for hand-made weights
Q0 = "encoder.layer.0.attention.self.query.weight"
K0 = "encoder.layer.0.attention.self.key.weight"


def tensors(seed=0):
    """The encoder weights of the tiny checkpoint (Gaussian, std 0.3, float32), to edit before writing."""
    return bert_encoder_weights(hidden=N, intermediate=F, layers=L, seed=seed)


def float64_tensors(scale=1.0):
    """:func:`tensors` widened to float64, then times ``scale`` (which may leave the float32 range)."""
    return {k: v.astype(np.float64) * scale for k, v in tensors().items()}


def write_model(d: Path, t=None, **config) -> Path:
    """The tiny checkpoint with weights ``t`` (default :func:`tensors`) in ``d``; ``config`` changes config.json."""
    return write_tiny_bert(d, weights=tensors() if t is None else t, **SIZES, **config)


def layout(t: dict):
    """(header entries in order, data bytes) of a contiguous safetensors layout of ``t``."""
    entries, chunks, pos = [], [], 0
    for name, a in t.items():
        b = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        entries.append([name, {"dtype": {"float32": "F32", "float64": "F64", "int32": "I32"}[a.dtype.name],
                               "shape": list(a.shape), "data_offsets": [pos, pos + len(b)]}])
        chunks.append(b)
        pos += len(b)
    return entries, b"".join(chunks)


def write_raw(path: Path, header_text: str | bytes, data: bytes):
    h = header_text.encode() if isinstance(header_text, str) else header_text
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def header_text(entries) -> str:
    """JSON object text from ``[name, value]`` pairs — keeps duplicate names, as a hand-made header may."""
    return "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in entries) + "}"


def crafted_model(d: Path, edit, t=None) -> Path:
    """A model folder whose safetensors header is ``edit(entries, data) -> (header text, data)``."""
    write_model(d, t)
    entries, data = layout(tensors() if t is None else t)
    text, data = edit(entries, data)
    write_raw(d / "model.safetensors", text, data)
    return d


def entry(entries, name):
    return next(v for k, v in entries if k == name)


def sharded_model(d: Path, weight_map=None, extra=None) -> Path:
    """Two shards (layer 0, layer 1) plus an index; ``weight_map``/``extra`` override the index."""
    write_tiny_bert(d, weights=tensors(), shard_by_layer=True, **SIZES)
    index = d / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    if weight_map is not None:
        doc["weight_map"] = weight_map(doc["weight_map"])
    if extra is not None:
        doc = extra(doc)
    index.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return d


def deep_json(depth=200_000) -> str:
    return "[" * depth + "]" * depth


# ------------------------------------------------------------------------------ CLI harness


def run_cli(capsys, tmp_path, model, *extra):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    capsys.readouterr()
    rc = main(["analyze", str(model), "--json", str(out / "r.json"), "--csv", str(out / "r.csv"),
               "--plots", str(out / "plots"), "--no-progress", *extra])
    return rc, capsys.readouterr(), out


def assert_one_clear_line(rc, cap, out, fragment):
    assert rc != 0
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1, cap.err
    assert lines[0].startswith("bounds-lib: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in cap.err and cap.out == ""
    assert list(out.iterdir()) == []  # no report, no plots folder, no temporary file


# case: (prepare(tmp folder) -> model argument, extra CLI arguments, fragment of the one error line)
def _overlap(e, data):
    entry(e, K0)["data_offsets"] = list(entry(e, Q0)["data_offsets"])  # key reads query's bytes
    return header_text(e), data


def _duplicate(e, data):
    e.append([Q0, dict(entry(e, K0))])  # same name again: the last one would silently win
    return header_text(e), data


def _gap(e, data):
    for _, v in e[1:]:
        v["data_offsets"] = [v["data_offsets"][0] + 4, v["data_offsets"][1] + 4]
    return header_text(e), data[:entry(e, Q0)["data_offsets"][1]] + b"\0" * 4 + data[entry(e, Q0)["data_offsets"][1]:]


def _trailing(e, data):
    return header_text(e), data + b"\0" * 16


def _bad_dtype(e, data):
    entry(e, Q0)["dtype"] = "F128"
    return header_text(e), data


def _bad_shape(e, data):
    entry(e, Q0)["shape"] = [N, -N]
    return header_text(e), data


def _float_shape(e, data):
    entry(e, Q0)["shape"] = [8.0, 8]
    return header_text(e), data


def _offsets_mismatch(e, data):
    entry(e, Q0)["shape"] = [N, N - 1]
    return header_text(e), data


def _bool_offsets(e, data):
    entry(e, Q0)["data_offsets"] = [False, 256]
    return header_text(e), data


def _missing_field(e, data):
    del entry(e, Q0)["dtype"]
    return header_text(e), data


def _header_list(e, data):
    return json.dumps([k for k, _ in e]), data


def _deep_header(e, data):
    return deep_json(), data


def _not_utf8(e, data):
    return b"\xff\xfe" + header_text(e).encode()[2:], data


def _int_weights(e, data):
    return header_text(e), data  # (prepared with int32 tensors below)


def _config(d, cfg_text):
    write_model(d)
    (d / "config.json").write_text(cfg_text if isinstance(cfg_text, str) else json.dumps(cfg_text))
    return d


def _truncated(d):
    write_model(d)
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    return d


def _nan(d):
    t = tensors()
    t[Q0][0, 0] = np.nan
    t[K0][1, 1] = np.inf
    return write_model(d, t)


def _file_arg(d):
    write_model(d)
    return d / "config.json"


def _too_short(d):
    write_model(d)
    (d / "model.safetensors").write_bytes(b"\x01\x02")
    return d


def _header_too_long(d):
    write_model(d)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    return d


def _two_unindexed_files(d):
    t = tensors()
    d.mkdir(parents=True)
    save_file(t, str(d / "a.safetensors"))
    save_file({Q0: t[Q0] * 2}, str(d / "b.safetensors"))
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


def _shard_dup(d):
    sharded_model(d)
    t = tensors()
    s1 = {k: v for k, v in t.items() if ".1." in k}
    s1[Q0] = t[Q0] * 3  # layer 0's query also in shard 2, with other values
    save_file(s1, str(d / "model-00002-of-00002.safetensors"))
    return d


def _shard_wrong_file(d):
    return sharded_model(d, weight_map=lambda wm: {**wm, Q0: "model-00002-of-00002.safetensors"})


def _shard_unknown_tensor(d):
    ghost = {"encoder.layer.9.ghost.weight": "model-00001-of-00002.safetensors"}
    return sharded_model(d, weight_map=lambda wm: {**wm, **ghost})


def _bin_shards_with_one_tensor_twice(d):
    """Legacy PyTorch shards with an index; layer 0's query stored in both."""
    torch = pytest.importorskip("torch")
    t = {k: torch.from_numpy(v) for k, v in tensors().items()}
    d.mkdir(parents=True)
    s0 = {k: v for k, v in t.items() if ".0." in k}
    s1 = {k: v for k, v in t.items() if ".1." in k} | {Q0: t[Q0] * 3}
    torch.save(s0, d / "pytorch_model-00001-of-00002.bin")
    torch.save(s1, d / "pytorch_model-00002-of-00002.bin")
    wm = {k: "pytorch_model-00001-of-00002.bin" for k in s0} | {k: "pytorch_model-00002-of-00002.bin" for k in s1
                                                                if k != Q0}
    (d / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wm}))
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


def _outside(d, target):
    d = sharded_model(d, weight_map=lambda wm: {**wm, Q0: target})
    return d


# safetensors headers edited by hand: case -> (edit(entries, data) -> (header text, data), error fragment)
CRAFTED = {
    "overlapping data_offsets": (_overlap, "overlap"),
    "duplicate tensor name": (_duplicate, "twice (duplicate key)"),
    "gap in the data section": (_gap, "belong to no tensor"),
    "trailing bytes": (_trailing, "belong to no tensor"),
    "unknown dtype": (_bad_dtype, "unknown dtype 'F128'"),
    "negative shape": (_bad_shape, "invalid shape"),
    "float shape": (_float_shape, "invalid shape"),
    "offsets vs shape": (_offsets_mismatch, "inconsistent data offsets"),
    "boolean offsets": (_bool_offsets, "invalid data_offsets"),
    "entry without dtype": (_missing_field, "lacks dtype/shape/data_offsets"),
    "header is a list": (_header_list, "not a JSON object"),
    "200k-deep header": (_deep_header, "nested too deeply"),
    "header not UTF-8": (_not_utf8, "not UTF-8"),
}
# config.json entries changed from a valid checkpoint's: case -> (entries, error fragment)
CONFIG_EDITS = {
    "unsupported model_type (regression)": ({"model_type": "t5"}, "unsupported architecture 't5'"),
    "heads not dividing (regression)": ({"num_attention_heads": 3}, "3 attention heads do not divide"),
    "zero layers": ({"num_hidden_layers": 0}, "must be a positive integer"),
    "layers as a string": ({"num_hidden_layers": "2"}, "must be a positive integer"),
    "fewer layers in config than weights": ({"num_hidden_layers": 1},
                                            "config.json says 1 layers but the weights hold at least 2"),
    "more layers in config than weights (regression)": ({"num_hidden_layers": 3}, "layer 2 has no"),
    "hidden size vs tensor shapes": ({"hidden_size": 4, "num_attention_heads": 2}, "expected"),
}

CASES = {
    # ---- safetensors files
    **{case: (functools.partial(crafted_model, edit=edit), (), fragment) for case, (edit, fragment) in CRAFTED.items()},
    "integer weights": (lambda d: write_model(d, {k: (v * 10).astype(np.int32) for k, v in tensors().items()}),
                        (), "non-float dtype I32"),
    "truncated file (regression)": (_truncated, (), "truncated"),
    "file shorter than 8 bytes (regression)": (_too_short, (), "too short"),
    "header length beyond the file (regression)": (_header_too_long, (), "does not fit"),
    "NaN and inf weights (regression)": (_nan, (), "NaN or infinite"),
    # ---- configs
    **{case: (functools.partial(write_model, **edits), (), fragment)
       for case, (edits, fragment) in CONFIG_EDITS.items()},
    "config not JSON (regression)": (lambda d: _config(d, "{not json"), (), "config.json is not valid JSON"),
    "200k-deep config": (lambda d: _config(d, deep_json()), (), "nested too deeply"),
    "config duplicate key": (lambda d: _config(d, '{"model_type": "bert", "hidden_size": 8, "hidden_size": 16}'),
                             (), "names 'hidden_size' twice"),
    "config is a list": (lambda d: _config(d, "[1, 2]"), (), "must hold a JSON object"),
    "config without model_type": (lambda d: _config(d, {k: v for k, v in CONFIG.items() if k != "model_type"}),
                                  (), "no 'model_type'"),
    # ---- sharded checkpoints
    "tensor in two shards": (_shard_dup, (), "is stored in two files"),
    "two unindexed files with one tensor": (_two_unindexed_files, (), "is stored in two files"),
    "PyTorch .bin shards with one tensor twice": (_bin_shards_with_one_tensor_twice, (), "is stored in two files"),
    "weight_map is a list": (lambda d: sharded_model(d, weight_map=lambda wm: list(wm)), (),
                             "'weight_map' must be an object"),
    "weight_map int values": (lambda d: sharded_model(d, weight_map=lambda wm: {k: 1 for k in wm}), (),
                              "weight_map values must be shard file names"),
    "index without weight_map": (lambda d: sharded_model(d, extra=lambda doc: {"metadata": {}}), (),
                                 "needs a 'weight_map'"),
    "index not JSON": (lambda d: sharded_model(d, extra=lambda doc: "{oops"), (), "shard index is not valid JSON"),
    "empty weight_map": (lambda d: sharded_model(d, weight_map=lambda wm: {}), (), "'weight_map' is empty"),
    "shard path with ..": (lambda d: _outside(d, "../elsewhere.safetensors"), (), "leaves the model folder"),
    "absolute shard path": (lambda d: _outside(d, "/etc/passwd"), (), "leaves the model folder"),
    "shard file missing (regression)": (lambda d: _outside(d, "model-00003-of-00003.safetensors"), (),
                                        "listed in the index is missing"),
    "index names the wrong shard": (_shard_wrong_file, (), "but it is stored in model-00001"),
    "index names a tensor no shard has": (_shard_unknown_tensor, (), "no shard holds it"),
    # ---- the model argument
    "empty model argument": (lambda d: "", (), "the model argument is empty"),
    "blank model argument": (lambda d: "   ", (), "the model argument is empty"),
    "~nouser path": (lambda d: "~bounds-lib-no-such-user/x", (), "no such user"),
    "missing directory (regression)": (lambda d: d / "nope", (), "no such model directory"),
    "a file, not a folder (regression)": (_file_arg, (), "is a file"),
    "empty directory (regression)": (lambda d: (d.mkdir(), d)[1], (), "is empty"),
    "Hub id offline, not cached (regression)": (lambda d: "bounds-lib-tests/never-cached", (),
                                                "nor a Hub model in the local cache"),
    # ---- numerics
    "float64 weights beyond float32 with --dtype float32": (
        lambda d: write_model(d, float64_tensors(1e39)),
        ("--dtype", "float32"), "beyond the float32 range"),
    "products beyond float64": (lambda d: write_model(d, float64_tensors(1e300)), (), "exceed the float64 range"),
    # ---- options checked before any work
    "--layers 0 (regression)": (write_model, ("--layers", "0"), "--layers must be >= 1"),
    "--layers beyond the model": (write_model, ("--layers", "5"), "the model has 2 layers) == 5, must be <= 2"),
    "--jobs -1 (regression)": (write_model, ("--jobs", "-1"), "--jobs must be >= 0"),
    "--download-timeout 0": (write_model, ("--download-timeout", "0"), "--download-timeout must be a positive"),
    "--download-timeout nan": (write_model, ("--download-timeout", "nan"), "--download-timeout must be a positive"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cli_bad_input(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("BOUNDS_LIB_ALLOW_DOWNLOAD", raising=False)
    prepare, extra, fragment = CASES[case]
    model = prepare(tmp_path / "model")
    rc, cap, out = run_cli(capsys, tmp_path, model, *extra)
    assert rc == 1
    assert_one_clear_line(rc, cap, out, fragment)


def test_library_rejects_the_crafted_headers_too(tmp_path):
    """The hand-written checks agree with the safetensors library on the crafted files."""
    from safetensors import safe_open

    for i, edit in enumerate((_overlap, _duplicate, _gap, _trailing)):
        d = crafted_model(tmp_path / f"m{i}", edit)
        with pytest.raises(SafetensorError):
            with safe_open(str(d / "model.safetensors"), framework="numpy"):
                pass
        with pytest.raises(CheckpointError):
            read_safetensors_header(d / "model.safetensors")


def test_more_layers_on_purpose_with_layers(tmp_path, capsys):
    """The extra-layer check lets a deliberate prefix through (``--layers``)."""
    d = write_model(tmp_path / "m", num_hidden_layers=1)
    rc = main(["analyze", str(d), "--layers", "1", "--no-progress", "--quiet"])
    assert rc == 0


def test_sharded_model_follows_the_index(tmp_path):
    """A correct sharded checkpoint gives exactly the spectra of the same weights in one file."""
    a = compute_spectra(sharded_model(tmp_path / "sharded"))
    b = compute_spectra(write_model(tmp_path / "single"))
    for x, y in zip(a.matrices, b.matrices):
        np.testing.assert_array_equal(x.sigma, y.sigma)


def test_cached_hub_snapshot_with_symlinked_shards_is_accepted(tmp_path):
    """Shard paths are checked by name, not by resolving links: a Hub cache's links to ../../blobs are fine."""
    snap = sharded_model(tmp_path / "snap")
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for f in snap.glob("*.safetensors"):
        f.rename(blobs / f.name)
        f.symlink_to(Path("..") / "blobs" / f.name)
    assert len(open_checkpoint(snap).names()) == 2 * len(BERT_LAYER_ROLES)


# ------------------------------------------------------------------------------ numerics


@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_float32_overflow_gives_the_float64_result_and_no_lapack_noise(mode, tmp_path, capfd):
    """Weights of 1e18 in a float32 file: products overflow float32 unless scaled. The result must equal
    the float64 one (scaled by powers of two), and nothing from LAPACK may reach the terminal."""
    d = write_model(tmp_path / "m", {k: v * np.float32(1e18) for k, v in tensors().items()})
    capfd.readouterr()
    r32 = score(compute_spectra(d, dtype="float32", mode=mode))
    r64 = score(compute_spectra(d, dtype="float64", mode=mode))
    pairs = [(r32.log_B_edelman, r64.log_B_edelman)]
    if mode == "clean":  # in paper mode B_ours counts the dtype's numerical zeros (1e-7 vs 1e-16): not comparable
        pairs.append((r32.log_B_ours_sum, r64.log_B_ours_sum))
    for a, b in pairs:
        assert np.isfinite(a) and a == pytest.approx(b, rel=1e-5)
    for m, m64 in zip(r32.matrices, r64.matrices):
        assert np.isfinite([m.sigma1, m.frobenius, m.norm_21, m.log_T_star]).all()
        assert m.sigma1 == pytest.approx(m64.sigma1, rel=1e-5) and m.norm_21 == pytest.approx(m64.norm_21, rel=1e-5)
    cap = capfd.readouterr()  # file-descriptor level: catches Fortran's own writes
    assert "DLASCL" not in cap.out + cap.err and "illegal value" not in cap.out + cap.err


def test_float32_overflow_cli_exit_0_with_finite_bounds(tmp_path, capsys):
    d = write_model(tmp_path / "m", {k: v * np.float32(1e18) for k, v in tensors().items()})
    rc = main(["analyze", str(d), "--dtype", "float32", "--json", str(tmp_path / "r.json"), "--no-progress",
               "--quiet"])
    assert rc == 0
    s = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert all(s[k]["log10"] is not None and np.isfinite(s[k]["log10"]) for k in ("B_ours_sum", "B_edelman"))


def test_tiny_weights_are_scaled_too(tmp_path):
    """Entries near 1e-25 in float32: head products (1e-50) would underflow float32 to zero without
    scaling. (The rank itself follows the released tolerance 1e-10·n·max(σ₁, 1), which counts such
    tiny singular values as zero by design; the norms and the dense spectra must be exact.)"""
    c = 1e-25
    d = write_model(tmp_path / "m", {k: v * np.float32(c) for k, v in tensors().items()})
    ref = compute_spectra(write_model(tmp_path / "ref"), dtype="float64")
    got = compute_spectra(d, dtype="float32")
    for a, b in zip(got.matrices, ref.matrices):
        k = c * c if a.head >= 0 else c
        assert a.norm_21 / k == pytest.approx(b.norm_21, rel=1e-4)
        if a.head < 0:
            np.testing.assert_allclose(a.sigma / k, b.sigma, rtol=1e-4, atol=1e-5 * b.sigma1)


def test_frobenius_and_stable_rank_near_1e200():
    m = MatrixSpectrum(0, -1, "M_in", (2, 2), np.array([4e200, 3e200]), 1.0, 1.0)
    assert m.frobenius == pytest.approx(5e200) and m.stable_rank == pytest.approx(25 / 16)
    tiny = MatrixSpectrum(0, -1, "M_in", (2, 2), np.array([4e-200, 3e-200]), 1.0, 1.0)
    assert tiny.frobenius == pytest.approx(5e-200) and tiny.stable_rank == pytest.approx(25 / 16)


def test_spectra_near_1e200_are_finite_and_scale_exactly(tmp_path):
    """Weights near 1e100 (head products near 1e200, S_2 near 1e400): every number finite, and each
    proxy moves exactly as the homogeneity of its formula says (σ, norms × c or c²; log T* by p*)."""
    c = 2.0 ** 330  # ≈ 1e99, a power of two: the scaled weights are exact
    base = write_model(tmp_path / "ref", float64_tensors())
    d = write_model(tmp_path / "m", float64_tensors(c))
    r, r0 = score(compute_spectra(d)), score(compute_spectra(base))
    for m, m0 in zip(r.matrices, r0.matrices):
        k = c * c if m.head >= 0 else c
        assert np.isfinite([m.sigma1, m.frobenius, m.stable_rank, m.norm_21, m.log_T_star]).all()
        assert m.sigma1 == pytest.approx(k * m0.sigma1, rel=1e-12)
        assert m.frobenius == pytest.approx(k * m0.frobenius, rel=1e-12)
        assert m.stable_rank == pytest.approx(m0.stable_rank, rel=1e-12)
    assert np.isfinite(r.log_B_edelman) and np.isfinite(r.log_B_ours_sum)


def test_cached_spectra_are_read_only(tmp_path):
    cache = SpectraCache()
    d = write_model(tmp_path / "m")
    a = compute_spectra(d, cache=cache)
    b = compute_spectra(d, cache=cache)
    assert cache.hits > 0
    for m in a.matrices + b.matrices:
        assert not m.sigma.flags.writeable
        with pytest.raises(ValueError):
            m.sigma[0] = 0.0
        with pytest.raises(ValueError):  # the cached array itself is frozen, not only a view of it
            m.sigma.flags.writeable = True


# ------------------------------------------------------------------------------ API arrays


def _api_error(sd, fragment, exc=(ValueError, TypeError)):
    with pytest.raises(exc, match=fragment):
        compute_spectra(sd, config=CONFIG)


@pytest.mark.parametrize("kind, make, fragment", [
    ("complex", lambda a: a.astype(np.complex128) + 1j, "must be real"),
    ("int64", lambda a: (a * 10).astype(np.int64), "weights must be floating point"),
    ("bool", lambda a: a > 0, "weights must be floating point"),
    ("object", lambda a: a.astype(object), "numeric array"),
    ("strings", lambda a: a.astype(str), "numeric array"),
])
def test_api_rejects_non_real_float_arrays(kind, make, fragment):
    sd = tensors()
    sd[Q0] = make(sd[Q0])
    _api_error(sd, fragment)


def test_api_rejects_a_complex_torch_tensor():
    torch = pytest.importorskip("torch")
    sd = {k: torch.from_numpy(v) for k, v in tensors().items()}
    sd[Q0] = sd[Q0].to(torch.complex64)
    _api_error(sd, "must be real")


@pytest.mark.parametrize("make, fragment", [
    (lambda torch, v: torch.empty(v.shape, device="meta"), "cannot be copied to the CPU"),
    (lambda torch, v: torch.from_numpy(v).to(torch.float8_e4m3fn), "has no NumPy equivalent|weights must be"),
])
def test_api_rejects_torch_tensors_without_values(make, fragment):
    torch = pytest.importorskip("torch")
    sd = {k: torch.from_numpy(v) for k, v in tensors().items()}
    sd[Q0] = make(torch, tensors()[Q0])
    _api_error(sd, fragment)


def test_api_accepts_bf16_and_requires_grad_torch_tensors():
    torch = pytest.importorskip("torch")
    base = {k: torch.from_numpy(v) for k, v in tensors().items()}
    bf16 = {k: v.to(torch.bfloat16) for k, v in base.items()}
    grad = {k: v.clone().requires_grad_(True) for k, v in base.items()}
    widened = {k: v.to(torch.float32).numpy() for k, v in bf16.items()}
    a = compute_spectra(bf16, config=CONFIG)
    b = compute_spectra(widened, config=CONFIG)
    for x, y in zip(a.matrices, b.matrices):
        np.testing.assert_array_equal(x.sigma, y.sigma)  # bf16 widened exactly
    c = compute_spectra(grad, config=CONFIG)
    d = compute_spectra(tensors(), config=CONFIG)
    for x, y in zip(c.matrices, d.matrices):
        np.testing.assert_array_equal(x.sigma, y.sigma)


def test_shared_validator_is_the_one_norms_can_use():
    from bounds_lib.core.validation import as_real_array

    torch = pytest.importorskip("torch")
    t = torch.ones(3, 3, dtype=torch.bfloat16, requires_grad=True)
    A = as_real_array(t, "W")
    assert A.dtype == np.float32 and A.shape == (3, 3)
    assert as_real_array(np.eye(2, dtype=int), "W").dtype.kind == "i"  # integers allowed unless refused
    with pytest.raises(ValueError, match="must be real"):
        as_real_array(np.eye(2) * 1j, "W")


@pytest.mark.parametrize("bad, fragment", [
    (None, "cannot read a model from a NoneType"),
    (3.5, "cannot read a model from a float"),
    ("", "the model argument is empty"),
])
def test_api_bad_model_objects(bad, fragment):
    with pytest.raises(CheckpointError, match=fragment):
        compute_spectra(bad)


def test_api_state_dict_needs_config_regression():
    with pytest.raises(CheckpointError, match="needs its model config"):
        compute_spectra(tensors())


@pytest.mark.parametrize("kw, fragment", [
    ({"mode": "bogus"}, "mode must be one of"),
    ({"dtype": "float16"}, "dtype must be float64 or float32"),
    ({"n_layers": 0}, r"^n_layers \(a prefix length; the model has 2 layers\) == 0, must be >= 1$"),
    ({"layers": 0}, r"layers \(a prefix length; the model has 2 layers\) == 0, must be >= 1"),  # the old name
    ({"jobs": -1}, r"jobs \(workers; 0: one per CPU core\) == -1, must be >= 0"),
    ({"download_timeout": -1, "model": "org/never-cached"}, "download_timeout must be a positive"),
])
def test_api_bad_options(kw, fragment, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("BOUNDS_LIB_ALLOW_DOWNLOAD", "1")
    model = kw.pop("model", None) or write_model(tmp_path / "m")
    with pytest.raises(ValueError, match=fragment):
        compute_spectra(model, **kw)


@pytest.mark.parametrize("kw, fragment", [
    ({"jobs": True}, r"^jobs .* must be an integer, got bool True$"),
    ({"n_layers": 2.0}, r"^n_layers .* must be an integer, got float 2\.0$"),
])
def test_api_wrong_option_types_are_type_errors(kw, fragment, tmp_path):
    """The one validation rule: a wrong type is a TypeError (a bool is no integer, nor is 2.0)."""
    with pytest.raises(TypeError, match=fragment):
        compute_spectra(write_model(tmp_path / "m"), **kw)


# ------------------------------------------------------------------------------ outputs


def test_output_equal_to_another_output(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["analyze", str(d), "--json", str(out / "r"), "--csv", str(out / "r"), "--no-progress"])
    assert_one_clear_line(rc, capsys.readouterr(), out, "the same file as --json")


def test_output_equal_to_a_plot_file(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["analyze", str(d), "--json", str(out / "p" / "norms.png"), "--plots", str(out / "p"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "folder" in err and err.count("\n") == 1
    (out / "p").mkdir()
    rc = main(["analyze", str(d), "--json", str(out / "p" / "norms.png"), "--plots", str(out / "p"),
               "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1 and "the same file as --json" in cap.err and list((out / "p").iterdir()) == []


def test_output_equal_to_the_plots_folder(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["analyze", str(d), "--csv", str(out / "p"), "--plots", str(out / "p"), "--no-progress"])
    assert_one_clear_line(rc, capsys.readouterr(), out, "the same file as --plots")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_output_on_an_input_file_is_refused(name, tmp_path, capsys):
    d = write_model(tmp_path / "m")
    before = (d / name).read_bytes()
    rc = main(["analyze", str(d), "--json", str(d / name), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "is a file of the model folder" in err and err.count("\n") == 1
    assert (d / name).read_bytes() == before


def test_output_through_a_symlink_to_an_input_is_refused(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    (tmp_path / "link.json").symlink_to(d / "config.json")
    rc = main(["analyze", str(d), "--json", str(tmp_path / "link.json"), "--no-progress"])
    assert rc == 1 and "is a file of the model folder" in capsys.readouterr().err


def test_json_in_a_missing_folder_regression(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["analyze", str(d), "--json", str(out / "no" / "r.json"), "--no-progress"])
    assert_one_clear_line(rc, capsys.readouterr(), out, "does not exist")


def test_json_is_a_directory_regression(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    (out / "r.json").mkdir(parents=True)
    rc = main(["analyze", str(d), "--json", str(out / "r.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "is a directory" in err and list((out / "r.json").iterdir()) == []


def test_plots_path_is_a_file_regression(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    (tmp_path / "p").write_text("x")
    rc = main(["analyze", str(d), "--plots", str(tmp_path / "p"), "--no-progress"])
    assert rc == 1 and "exists and is not a folder" in capsys.readouterr().err
    assert (tmp_path / "p").read_text() == "x"


def test_plots_below_a_file(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    (tmp_path / "f").write_text("x")
    rc = main(["analyze", str(d), "--plots", str(tmp_path / "f" / "plots"), "--no-progress"])
    assert rc == 1 and "is not a folder" in capsys.readouterr().err


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_folder_is_checked_before_work(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        t0 = time.perf_counter()
        rc = main(["analyze", str(d), "--json", str(ro / "r.json"), "--no-progress"])
        assert rc == 1 and "is not writable" in capsys.readouterr().err
        assert time.perf_counter() - t0 < 5
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("opt", ["--json", "--csv", "--plots"])
def test_unwritable_folder_is_refused_before_any_computation(opt, tmp_path, capsys, monkeypatch):
    """The same check as above, runnable as root: the folder reports itself unwritable (os.access), and the
    analysis must not even start."""
    import bounds_lib.analysis.spectra as P  # where the CLI takes compute_spectra from

    d = write_model(tmp_path / "m")
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == ro else real_access(p, mode, **kw))
    monkeypatch.setattr(P, "compute_spectra", lambda *a, **k: pytest.fail("computed before checking the outputs"))
    target = ro / ("plots" if opt == "--plots" else "r.out")
    rc = main(["analyze", str(d), opt, str(target), "--no-progress"])
    assert_one_clear_line(rc, capsys.readouterr(), ro, "is not writable")


def test_failure_after_the_json_is_staged_leaves_nothing(tmp_path, capsys, monkeypatch):
    """--json and --plots: a figure that fails after the JSON is rendered leaves no JSON, no folder, and an
    existing report untouched."""
    import bounds_lib.analysis.plotting as P  # where the CLI takes the figures from

    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.json").write_text("previous report")
    monkeypatch.setattr(P, "figure_p_star_histogram", lambda rep: (_ for _ in ()).throw(RuntimeError("cannot draw")))
    rc = main(["analyze", str(d), "--json", str(out / "old.json"), "--csv", str(out / "new.csv"),
               "--plots", str(out / "plots"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "cannot draw" in err and err.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == ["old.json"]
    assert (out / "old.json").read_text() == "previous report"


def test_interrupt_during_rendering_says_nothing_was_written_truly(tmp_path, capsys, monkeypatch):
    import bounds_lib.analysis.plotting as P  # where the CLI takes the figures from

    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(P, "figure_p_star_histogram", lambda rep: (_ for _ in ()).throw(KeyboardInterrupt()))
    rc = main(["analyze", str(d), "--json", str(out / "r.json"), "--plots", str(out / "plots"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 130 and "interrupted; nothing was written" in err
    assert list(out.iterdir()) == []


def test_interrupt_while_renaming_restores_the_old_files(tmp_path, capsys, monkeypatch):
    """An interrupt between two renames: the first output is rolled back, the old one restored."""
    d = write_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_text("old json")
    (out / "r.csv").write_text("old csv")
    real_replace = os.replace
    calls = []

    def flaky_replace(src, dst):
        calls.append((src, dst))
        if len(calls) == 3:  # json: old aside, new in; csv: old aside → interrupt here
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    rc = main(["analyze", str(d), "--json", str(out / "r.json"), "--csv", str(out / "r.csv"), "--no-progress"])
    monkeypatch.setattr(os, "replace", real_replace)
    err = capsys.readouterr().err
    assert rc == 130 and "nothing was written" in err
    assert (out / "r.json").read_text() == "old json" and (out / "r.csv").read_text() == "old csv"
    assert sorted(p.name for p in out.iterdir()) == ["r.csv", "r.json"]


def test_interrupt_after_the_outputs_were_written_says_so(tmp_path, capsys, monkeypatch):
    import bounds_lib.cli.analyze as cli_analyze

    d = write_model(tmp_path / "m")
    monkeypatch.setattr(cli_analyze, "format_table", lambda rep, *spectra: (_ for _ in ()).throw(KeyboardInterrupt()))
    rc = main(["analyze", str(d), "--json", str(tmp_path / "r.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 130 and "were written completely" in err and "nothing was written" not in err
    assert (tmp_path / "r.json").is_file()


def test_existing_report_keeps_its_mode_and_new_files_follow_the_umask(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    (tmp_path / "r.json").write_text("{}")
    (tmp_path / "r.json").chmod(0o640)
    assert main(["analyze", str(d), "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "new.csv"),
                 "--no-progress", "--quiet"]) == 0
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o640
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.csv").stat().st_mode) == 0o666 & ~umask


def test_symlinked_report_is_written_through(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    target = tmp_path / "reports" / "real.json"
    target.parent.mkdir()
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    assert main(["analyze", str(d), "--json", str(tmp_path / "link.json"), "--no-progress", "--quiet"]) == 0
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads(target.read_text())["summary"]["n_matrices"] == L * (2 * H + 2)
    assert [p.name for p in target.parent.iterdir()] == ["real.json"]  # no temporary or backup left


def test_reproducible_json_is_byte_identical(tmp_path, capsys):
    d = write_model(tmp_path / "m")
    for name in ("a.json", "b.json"):
        assert main(["analyze", str(d), "--json", str(tmp_path / name), "--reproducible", "--no-progress",
                     "--quiet", "--jobs", "1"]) == 0
    a, b = (tmp_path / "a.json").read_text(), (tmp_path / "b.json").read_text()
    a = a.replace("a.json", "X.json")
    b = b.replace("b.json", "X.json")  # the command line names its own output
    assert a == b and "time_utc" not in a and "seconds" not in a
    assert main(["analyze", str(d), "--json", str(tmp_path / "c.json"), "--no-progress", "--quiet"]) == 0
    assert "time_utc" in (tmp_path / "c.json").read_text()


# ------------------------------------------------------------------------------ downloads


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers; stops itself after ``lifetime`` s."""

    def __init__(self, lifetime=60.0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._deadline = time.monotonic() + lifetime
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        conns = []
        try:
            while not self._stop.is_set() and time.monotonic() < self._deadline:
                try:
                    c, _ = self.sock.accept()
                    conns.append(c)
                    self.accepted += 1
                except socket.timeout:
                    pass
        finally:
            for c in conns:
                c.close()
            self.sock.close()

    def stop(self):
        self._stop.set()
        self._thread.join(5)


def test_download_from_a_server_that_never_answers_ends_with_one_line(tmp_path):
    server = SilentServer(lifetime=90)
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        env.update({"HF_ENDPOINT": f"http://127.0.0.1:{server.port}", "HF_HOME": str(tmp_path / "hf"),
                    "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "HF_HUB_DISABLE_TELEMETRY": "1"})
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(k, None)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "bounds_lib", "analyze", "bounds-lib-tests/silent-model",
                            "--allow-download", "--download-timeout", "3", "--json", str(tmp_path / "r.json")],
                           capture_output=True, text=True, env=env, timeout=120)
        wall = time.perf_counter() - t0
    finally:
        server.stop()
    assert server.accepted >= 1  # the request really went to the silent server
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("bounds-lib: error: ") and "bounds-lib-tests/silent-model" in lines[0]
    assert "did not finish within 3 s" in lines[0] or "timed out" in lines[0].lower()
    assert wall < 60 and not (tmp_path / "r.json").exists()


# ------------------------------------------------------------------------------ process behaviour


def test_closed_pipe_exits_quietly(tmp_path):
    """``bounds-lib analyze … | head -0``: no 'Broken pipe' message, status 141 as for SIGPIPE."""
    d = write_model(tmp_path / "m")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.Popen([sys.executable, "-m", "bounds_lib", "analyze", str(d), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.close()  # the reader goes away before the table is printed
    err = p.stderr.read().decode()
    rc = p.wait(timeout=120)
    assert rc == 141 and err == "", err
