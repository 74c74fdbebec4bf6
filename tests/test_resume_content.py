"""A resume store that can never return another model's numbers (issue 30): entries are keyed by the
content a unit reads, name their key and unit, and are checked on load.

Each case below returned another checkpoint's numbers with exit status 0 under the old key (the
checkpoint's name, size, modification time and first MiB); each test also shows that the old identity
cannot tell the two checkpoints apart (its power), so the test is about the key, not about luck."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import bounds_lib.parallel as PAR
from bounds_lib.checkpoints import open_checkpoint
from bounds_lib.spectra import compute_spectra
from test_parallel import _same_model, write_tiny


def _restore_times(f, st):
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(f)
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_weight_changed_past_the_first_mib_with_the_time_restored_is_recomputed(tmp_path):
    model = write_tiny(tmp_path / "big", "llama", L=1, N=256, H=4, Hkv=2, F=512)
    f = model / "model.safetensors"
    assert f.stat().st_size > 2 * 2**20
    folder = tmp_path / "res"
    before = compute_spectra(model, resume=folder)
    identity = PAR._checkpoint_identity(open_checkpoint(model))
    st = os.stat(f)
    raw = bytearray(f.read_bytes())
    raw[-4] ^= 1  # the lowest mantissa bit of the last float32 weight (the last M_out entry)
    f.write_bytes(bytes(raw))
    _restore_times(f, st)  # as rsync -t, cp -p or an archive restores them
    assert PAR._checkpoint_identity(open_checkpoint(model)) == identity  # power: the old key saw nothing
    fresh = compute_spectra(model)
    with pytest.raises(AssertionError):  # and the change is one the spectra see
        _same_model(before, fresh)
    again = compute_spectra(model, resume=folder)
    _same_model(fresh, again)
    p = again.meta["parallel"]
    assert p["units_computed"] == 1 and p["units_resumed"] == 2  # only the changed M_out


def _with_frozen_embeddings(folder):
    """Add a 2 MiB token embedding, the same in every fine-tune (stored first, as in real checkpoints)."""
    from safetensors.numpy import load_file, save_file

    t = load_file(str(folder / "model.safetensors"))
    t["model.embed_tokens.weight"] = np.random.default_rng(0).standard_normal((2048, 256)).astype(np.float32)
    save_file(t, str(folder / "model.safetensors"))
    with open(folder / "model.safetensors", "rb") as fh:  # the embedding is what the first MiB holds
        n = int.from_bytes(fh.read(8), "little")
        assert json.loads(fh.read(n))["model.embed_tokens.weight"]["data_offsets"][0] == 0
    return folder


def test_another_fine_tune_saved_at_the_same_path_with_the_same_time_is_recomputed(tmp_path):
    a = _with_frozen_embeddings(write_tiny(tmp_path / "a", "llama", seed=1, L=2, N=32, H=4, Hkv=2, F=48))
    b = _with_frozen_embeddings(write_tiny(tmp_path / "b", "llama", seed=2, L=2, N=32, H=4, Hkv=2, F=48))
    assert (a / "model.safetensors").stat().st_size == (b / "model.safetensors").stat().st_size
    model = tmp_path / "model"
    shutil.copytree(a, model)
    folder = tmp_path / "res"
    compute_spectra(model, resume=folder)
    identity = PAR._checkpoint_identity(open_checkpoint(model))
    st = os.stat(model / "model.safetensors")
    shutil.copyfile(b / "model.safetensors", model / "model.safetensors")
    _restore_times(model / "model.safetensors", st)
    old_identity_same = PAR._checkpoint_identity(open_checkpoint(model)) == identity
    got = compute_spectra(model, resume=folder)
    _same_model(compute_spectra(b), got)
    assert got.meta["parallel"]["units_computed"] == 6
    # power: the two fine-tunes have the same layout, tensor names, shapes, offsets and file size — their
    # headers are byte for byte the same, so the old identity (size, mtime, header) could not tell them apart
    assert old_identity_same


def test_an_entry_copied_over_another_is_recomputed_and_said_so(tmp_path):
    model = write_tiny(tmp_path / "m", "llama", L=2, N=32, H=4, Hkv=2, F=48)
    folder = tmp_path / "res"
    first = compute_spectra(model, resume=folder)
    entries = {}
    for line in (folder / "journal.jsonl").read_text().splitlines():
        e = json.loads(line)
        entries[(e["layer"], e["part"])] = folder / "units" / f"{e['key']}.npz"
    shutil.copyfile(entries[(1, "M_in")], entries[(0, "M_in")])  # layer 1's M_in over layer 0's
    with np.load(entries[(0, "M_in")]) as z:  # power: what the old loader would have served for layer 0
        served = z["sigma0"]
    m_in0 = next(m for m in first.matrices if m.layer == 0 and m.matrix_type == "M_in")
    assert not np.array_equal(served, m_in0.sigma)
    with pytest.warns(UserWarning, match=r"layer 0 M_in: the stored entry .* holds layer 1 M_in"):
        again = compute_spectra(model, resume=folder)
    _same_model(first, again)
    p = again.meta["parallel"]
    assert p["units_computed"] == 1 and p["units_resumed"] == 5
    assert len(p["resume_entries_mismatched"]) == 1
    # and the rewritten entry is layer 0's again
    assert compute_spectra(model, resume=folder).meta["parallel"]["units_computed"] == 0


def test_an_entry_of_the_old_format_is_recomputed(tmp_path):
    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    folder = tmp_path / "res"
    first = compute_spectra(model, resume=folder)
    for f in (folder / "units").glob("*.npz"):  # strip the entry record, as a format-1 file had none
        with np.load(f) as z:
            arrays = {k: z[k] for k in z.files if k != "entry"}
        np.savez(f, **arrays)
    again = compute_spectra(model, resume=folder)
    _same_model(first, again)
    assert again.meta["parallel"]["units_computed"] == 3


def test_changing_only_the_activation_reuses_the_spectra(tmp_path):
    from bounds_lib.scoring import score

    model = write_tiny(tmp_path / "m", "llama", L=2, N=32, H=4, Hkv=2, F=48)
    folder = tmp_path / "res"
    silu = compute_spectra(model, resume=folder)
    cfg = json.loads((model / "config.json").read_text())
    assert cfg["hidden_act"] == "silu"
    (model / "config.json").write_text(json.dumps({**cfg, "hidden_act": "relu"}))
    relu = compute_spectra(model, resume=folder)
    p = relu.meta["parallel"]
    assert p["units_computed"] == 0 and p["units_resumed"] == 6
    _same_model(compute_spectra(model), relu)
    assert relu.arch.activation != silu.arch.activation  # power: the layout (which the old key hashed) changed
    assert score(relu).L_phi != score(silu).L_phi  # and the scores do see the activation (through L_φ)


def test_the_key_depends_on_each_setting_and_each_byte(tmp_path):
    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    from bounds_lib.checkpoints import detect_architecture

    arch = detect_architecture(src)
    base = PAR.UnitTask(None, arch, 0, "M_in", "clean", "float64", False, None, 1, chunk_bytes=PAR._CHUNK_BYTES)
    k0 = PAR._unit_key(src, base)
    from dataclasses import replace

    variants = [replace(base, mode="paper"), replace(base, dtype="float32"), replace(base, entrywise=True),
                replace(base, device="torch-cpu"), replace(base, lean=True), replace(base, chunk_bytes=1024),
                replace(base, part="M_out"), replace(base, arch=replace(arch, n_kv_heads=4, n_heads=8, head_dim=4))]
    keys = [PAR._unit_key(src, v) for v in variants]
    assert len({k0, *keys}) == len(keys) + 1
    assert PAR._unit_key(src, replace(base, arch=replace(arch, activation="relu"))) == k0
    assert PAR._unit_key(src, replace(base, arch=replace(arch, n_layers=7))) == k0
    assert PAR._unit_key(src, replace(base, blas_threads=8)) == k0
