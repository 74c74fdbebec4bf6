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

import bounds_lib.analysis.kernel as KERNEL
import bounds_lib.analysis.units as UNITS
from bounds_lib.checkpoints import open_checkpoint
from bounds_lib.analysis.spectra import compute_spectra
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
    identity = UNITS._checkpoint_identity(open_checkpoint(model))
    st = os.stat(f)
    raw = bytearray(f.read_bytes())
    raw[-4] ^= 1  # the lowest mantissa bit of the last float32 weight of the file
    f.write_bytes(bytes(raw))
    _restore_times(f, st)  # as rsync -t, cp -p or an archive restores them
    assert UNITS._checkpoint_identity(open_checkpoint(model)) == identity  # power: the old key saw nothing
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
    identity = UNITS._checkpoint_identity(open_checkpoint(model))
    st = os.stat(model / "model.safetensors")
    shutil.copyfile(b / "model.safetensors", model / "model.safetensors")
    _restore_times(model / "model.safetensors", st)
    old_identity_same = UNITS._checkpoint_identity(open_checkpoint(model)) == identity
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
    from bounds_lib.analysis.scoring import score

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
    base = UNITS.UnitTask(None, arch, 0, "M_in", "clean", "float64", False, None, 1, chunk_bytes=KERNEL._CHUNK_BYTES)
    k0 = UNITS._unit_key(src, base)
    from dataclasses import replace

    variants = [replace(base, mode="paper"), replace(base, dtype="float32"), replace(base, entrywise=True),
                replace(base, device="torch-cpu"), replace(base, lean=True), replace(base, chunk_bytes=1024),
                replace(base, part="M_out"), replace(base, arch=replace(arch, n_kv_heads=4, n_heads=8, head_dim=4))]
    keys = [UNITS._unit_key(src, v) for v in variants]
    assert len({k0, *keys}) == len(keys) + 1
    assert UNITS._unit_key(src, replace(base, arch=replace(arch, activation="relu"))) == k0
    assert UNITS._unit_key(src, replace(base, arch=replace(arch, n_layers=7))) == k0
    assert UNITS._unit_key(src, replace(base, blas_threads=8)) == k0


# --- from the mutation run of the new functions (tests/MUTATION.md) --------------------------------


def test_a_safetensors_digest_is_the_sha256_of_exactly_the_stored_bytes(tmp_path):
    import hashlib

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    raw = (model / "model.safetensors").read_bytes()
    start = 8 + int.from_bytes(raw[:8], "little")
    for name in src.names():
        b, e = json.loads(raw[8:start])[name]["data_offsets"]
        assert UNITS._tensor_digest(src, name) == hashlib.sha256(raw[start + b:start + e]).digest(), name


def test_a_change_in_another_tensor_keeps_this_unit_key(tmp_path):
    """Only the bytes a unit reads enter its key: a changed M_out leaves the attention and M_in keys."""
    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)

    def keys():
        src = open_checkpoint(model)
        arch = detect_architecture(src)
        return {part: UNITS._unit_key(src, UNITS.UnitTask(None, arch, 0, part, "clean", "float64", False))
                for part in ("attention", "M_in", "M_out")}

    before = keys()
    f = model / "model.safetensors"
    raw = bytearray(f.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")
    b, e = json.loads(bytes(raw[8:start]))["model.layers.0.mlp.down_proj.weight"]["data_offsets"]
    raw[start + e - 4] ^= 1  # the last weight of layer 0's down_proj (M_out)
    f.write_bytes(bytes(raw))
    after = keys()
    assert after["M_out"] != before["M_out"]
    assert (after["attention"], after["M_in"]) == (before["attention"], before["M_in"])


def test_the_same_bytes_read_as_another_dtype_or_shape_key_differently(tmp_path):
    """F16 and BF16 tensors of the same bytes, or the same bytes in another shape, are other weights."""
    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    arch = detect_architecture(src)
    task = UNITS.UnitTask(None, arch, 0, "M_out", "clean", "float64", False)
    k0 = UNITS._unit_key(src, task)
    name = "model.layers.0.mlp.down_proj.weight"
    entry = src._where[name][2]
    for change in ({"dtype": "F16", "shape": [entry["shape"][0], 2 * entry["shape"][1]]},
                   {"shape": entry["shape"][::-1]}):
        src._where[name] = (src._where[name][0], src._where[name][1], {**entry, **change})
        assert UNITS._unit_key(src, task) != k0, change
    src._where[name] = (src._where[name][0], src._where[name][1], entry)
    assert UNITS._unit_key(src, task) == k0


@pytest.mark.parametrize("kind", ["state_dict", "pytorch-bin"])
def test_content_keys_for_weights_in_memory_and_torch_files(tmp_path, kind):
    """The read-as-array path: the same weights key alike, one changed entry keys differently."""
    from safetensors.numpy import load_file

    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    config = json.loads((model / "config.json").read_text())
    weights = load_file(str(model / "model.safetensors"))

    def source(w):
        if kind == "state_dict":
            return open_checkpoint(w, config=config)
        torch = pytest.importorskip("torch")
        d = tmp_path / f"bin{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        torch.save({k: torch.from_numpy(v.copy()) for k, v in w.items()}, d / "pytorch_model.bin")
        (d / "config.json").write_text(json.dumps(config))
        return open_checkpoint(d)

    def key(src):
        task = UNITS.UnitTask(None, detect_architecture(src), 0, "M_in", "clean", "float64", False)
        return UNITS._unit_key(src, task)

    a, b = key(source(weights)), key(source({k: v.copy() for k, v in weights.items()}))
    changed = {k: v.copy() for k, v in weights.items()}
    changed["model.layers.0.mlp.up_proj.weight"][2, 3] += 1.0
    assert a == b != key(source(changed))


def test_the_mismatch_warning_names_the_stored_unit_and_its_key(tmp_path):
    model = write_tiny(tmp_path / "m", "llama", L=2, N=32, H=4, Hkv=2, F=48)
    folder = tmp_path / "res"
    compute_spectra(model, resume=folder)
    entries = {}
    for line in (folder / "journal.jsonl").read_text().splitlines():
        e = json.loads(line)
        entries[(e["layer"], e["part"])] = (folder / "units" / f"{e['key']}.npz", e["key"])
    shutil.copyfile(entries[(1, "M_out")][0], entries[(0, "attention")][0])
    with pytest.warns(UserWarning) as seen:
        p = compute_spectra(model, resume=folder).meta["parallel"]
    line = (f"layer 0 attention: the stored entry {entries[(0, 'attention')][0].name} holds layer 1 M_out "
            f"(key {entries[(1, 'M_out')][1][:12]}…); recomputed")
    assert p["resume_entries_mismatched"] == [line]
    assert [str(w.message) for w in seen] == [f"--resume {folder}: {line}"]


def test_the_stored_dtype_alone_changes_the_key(tmp_path):
    """The same bytes and shape read as float16 or as bfloat16 are different weights (both 2 bytes)."""
    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    task = UNITS.UnitTask(None, detect_architecture(src), 0, "M_out", "clean", "float64", False)
    name = "model.layers.0.mlp.down_proj.weight"
    f, start, entry = src._where[name]
    halves = {**entry, "shape": [entry["shape"][0], 2 * entry["shape"][1]]}
    keys = []
    for dtype in ("F16", "BF16"):
        src._where[name] = (f, start, {**halves, "dtype": dtype})
        keys.append(UNITS._unit_key(src, task))
    assert keys[0] != keys[1]


def test_a_file_truncated_after_it_was_opened_is_a_clear_error_when_keyed(tmp_path):
    from bounds_lib.checkpoints import CheckpointError, detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    task = UNITS.UnitTask(None, detect_architecture(src), 0, "M_out", "clean", "float64", False)
    name = "model.layers.0.mlp.down_proj.weight"
    f = model / "model.safetensors"
    start, e = src._where[name][1], src._where[name][2]["offsets"][1]
    with open(f, "r+b") as fh:
        fh.truncate(start + e - 1)  # one byte of the tensor gone
    with pytest.raises(CheckpointError, match=r"could not read tensor 'model\.layers\.0\.mlp\.down_proj\.weight' "
                                               r"\(file truncated\)"):
        UNITS._unit_key(src, task)
