"""A resume store that checks what it serves, keyed by the bytes decomposed (issue 51, items 2-4).

Each edit below was served by the round-four store (the entry's ``entry`` field kept) and scored with exit
status 0 — a wrong number. Now an entry records a digest of its own arrays and its key, and on load the
digest, the key, the unit's matrices and shapes, and each σ's length, order, sign and finiteness are
checked (:func:`bounds_lib.analysis.units._entry_problem`); a unit computed from bytes that changed during
the run is an error and is not stored (:func:`bounds_lib.analysis.units._check_unchanged`).

Power: every edit is shown to change what the old loader would serve (the spectra differ from a fresh
computation); each structural check is also shown on an entry whose digest was forged to match its edited
arrays, so that the digest alone is not what catches it.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

import bounds_lib.analysis.units as UNITS
from bounds_lib.analysis.spectra import compute_spectra
from bounds_lib.checkpoints import CheckpointError, open_checkpoint
from test_parallel import _same_model, write_tiny


@pytest.fixture
def stored(tmp_path):
    """``(model, folder, first, entries)``: a tiny LLaMA analysed with ``resume=folder``; ``entries[(layer,
    part)]`` is the unit's stored file."""
    model = write_tiny(tmp_path / "m", "llama", L=2, N=32, H=4, Hkv=2, F=48)
    folder = tmp_path / "res"
    first = compute_spectra(model, resume=folder)
    return model, folder, first, _entries(folder)


def _entries(folder) -> dict:
    out = {}
    for line in (folder / "journal.jsonl").read_text().splitlines():
        e = json.loads(line)
        out[(e["layer"], e["part"])] = folder / "units" / f"{e['key']}.npz"
    return out


def _fields(path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _rewrite(path, edit, forge: bool = False):
    """Rewrite the entry at ``path`` with ``edit(fields)`` applied, its ``entry`` record kept as it was —
    or, with ``forge``, its digest recomputed for the edited arrays (a forger that knows the format)."""
    f = _fields(path)
    edit(f)
    entry = json.loads(str(f["entry"]))
    if forge:
        meta = json.loads(str(f["meta"]))
        sigmas = [np.asarray(f[f"sigma{i}"]) for i in range(len(meta))]
        entry["digest"] = UNITS._entry_digest(entry["key"], str(f["meta"]), f["norms"], sigmas)
    f["entry"] = np.array(json.dumps(entry))
    np.savez(path, **f)


def _set(name, fn):
    def edit(f):
        f[name] = fn(f)
    return edit


def _ascending(f):
    f["sigma0"] = np.sort(f["sigma0"])


def _twice(f):
    f["sigma0"] = np.sort(np.concatenate([f["sigma0"], f["sigma0"]]))[::-1].copy()


def _three_by_three(f):
    meta = json.loads(str(f["meta"]))
    meta[0]["shape"] = [3, 3]
    f["meta"] = np.array(json.dumps(meta))
    f["sigma0"] = f["sigma0"][:3].copy()


def _times_1_5(f):
    f["sigma0"] = f["sigma0"] * 1.5


def _heads_swapped(f):
    f["sigma0"], f["sigma1"] = f["sigma1"], f["sigma0"]


def _negative(f):
    f["sigma0"] = np.concatenate([f["sigma0"][:-1], [-1e-3]])


def _not_finite(f):
    f["sigma0"] = np.concatenate([[np.inf], f["sigma0"][1:]])


# edit -> (unit edited, the problem named when the digest is kept, when it is forged)
EDITS = {
    "σ ascending": ((0, "attention"), _ascending, "not finite, non-negative and non-increasing"),
    "twice min(m, n) values": ((0, "attention"), _twice, "holds (64,) float64 singular values of QK head 0"),
    "3×3 shape": ((0, "attention"), _three_by_three, "holds the matrices [('QK', 0, None, (3, 3))"),
    "σ × 1.5": ((0, "M_in"), _times_1_5, None),
    "two heads swapped": ((1, "attention"), _heads_swapped, None),
    "σ negative": ((0, "attention"), _negative, "not finite, non-negative and non-increasing"),
    "σ infinite": ((0, "M_out"), _not_finite, "not finite, non-negative and non-increasing"),
}


def _served_would_differ(first, entries, unit, edit):
    """Power: what the round-four loader would have served (the arrays as edited) differs from the truth."""
    f = _fields(entries[unit])
    before = {k: v.copy() for k, v in f.items()}
    edit(f)
    assert any(not np.array_equal(before[k], f[k]) for k in f if k.startswith("sigma")) or \
        str(before["meta"]) != str(f["meta"])
    assert first is not None


@pytest.mark.parametrize("forge", [False, True], ids=["entry kept", "digest forged"])
@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_entry_is_recomputed_and_listed(case, forge, stored):
    model, folder, first, entries = stored
    unit, edit, forged_problem = EDITS[case]
    if forge and forged_problem is None:
        pytest.skip("a forged digest over valid-looking arrays is caught by nothing the entry holds")
    _served_would_differ(first, entries, unit, edit)
    _rewrite(entries[unit], edit, forge)
    with pytest.warns(UserWarning, match="recomputed"):
        again = compute_spectra(model, resume=folder)
    _same_model(first, again)
    p = again.meta["parallel"]
    assert (p["units_computed"], p["units_resumed"]) == (1, 5)
    [line] = p["resume_entries_mismatched"]
    want = forged_problem if forge else "does not match its digest"
    assert line.startswith(f"layer {unit[0]} {unit[1]}: the stored entry {entries[unit].name} ") and want in line
    assert compute_spectra(model, resume=folder).meta["parallel"]["units_computed"] == 0  # rewritten whole


def test_another_units_arrays_under_this_units_entry_are_recomputed(stored):
    model, folder, first, entries = stored
    other = _fields(entries[(1, "M_in")])
    _rewrite(entries[(0, "M_in")], lambda f: f.update(sigma0=other["sigma0"], norms=other["norms"]))
    truth = next(m.sigma for m in first.matrices if m.layer == 0 and m.matrix_type == "M_in")
    assert not np.array_equal(other["sigma0"], truth)  # power: the old loader served layer 1's spectrum
    with pytest.warns(UserWarning, match="layer 0 M_in: .* does not match its digest"):
        again = compute_spectra(model, resume=folder)
    _same_model(first, again)


def test_an_entry_of_the_same_unit_under_another_key_is_recomputed(tmp_path):
    """Kills the mutant "the stored key is not compared on load": a float32 run's layer-0 ``M_in`` entry
    copied over the float64 run's — same layer, same part, a digest true to its own key and arrays, the same
    shapes — is the only check left that sees it."""
    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    f64, f32 = tmp_path / "r64", tmp_path / "r32"
    first = compute_spectra(model, resume=f64)
    compute_spectra(model, resume=f32, dtype="float32")
    e64, e32 = _entries(f64), _entries(f32)
    assert not np.array_equal(_fields(e64[(0, "M_in")])["sigma0"], _fields(e32[(0, "M_in")])["sigma0"])  # power
    e64[(0, "M_in")].write_bytes(e32[(0, "M_in")].read_bytes())
    with pytest.warns(UserWarning, match=r"layer 0 M_in: the stored entry .* holds layer 0 M_in \(key "):
        again = compute_spectra(model, resume=f64)
    _same_model(first, again)
    assert again.meta["parallel"]["units_computed"] == 1


def test_a_tensor_changed_past_its_first_mib_changes_its_digest(tmp_path):
    """Kills the mutant "a tensor's digest reads its first MiB only": the last byte of a 2 MiB tensor."""
    from safetensors.numpy import save_file

    w = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    save_file({"w": w}, str(tmp_path / "a.safetensors"))
    w[-1, -1] = np.nextafter(w[-1, -1], np.float32(np.inf))
    save_file({"w": w}, str(tmp_path / "b.safetensors"))
    from bounds_lib.checkpoints.formats import SafetensorsSource

    a, b = (SafetensorsSource([tmp_path / f"{x}.safetensors"], {}, x) for x in "ab")
    assert UNITS._tensor_digest(a, "w") != UNITS._tensor_digest(b, "w")


def _rewrite_in_place(f, name, raw_edit):
    """Rewrite the bytes of tensor ``name`` of file ``f`` in place — same size, same modification time."""
    st = os.stat(f)
    raw = bytearray(f.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")
    b, e = json.loads(bytes(raw[8:start]))[name]["data_offsets"]
    raw[start + b:start + e] = raw_edit(bytes(raw[start + b:start + e]))
    with open(f, "r+b") as fh:
        fh.write(raw)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_checkpoint_changed_during_the_run_is_an_error_and_nothing_of_it_is_stored(tmp_path):
    """After the first unit is stored, 4 KiB of layer 1's ``M_out`` are rewritten in place (same size, same
    time): the run stops with one clear error, stores nothing of layer 1's ``M_out``, and a run after the
    file is restored gives the numbers of the restored file."""
    model = write_tiny(tmp_path / "m", "llama", L=2, N=64, H=4, Hkv=2, F=96)
    f = model / "model.safetensors"
    name = "model.layers.1.mlp.down_proj.weight"
    original = f.read_bytes()
    truth = compute_spectra(model)
    folder = tmp_path / "res"
    calls = []

    def progress(done, total):  # called after each matrix group; the first unit is stored by then
        calls.append(done)
        if len(calls) == 2:
            _rewrite_in_place(f, name, lambda b: b[:8] + bytes(4096) + b[8 + 4096:])

    with pytest.raises(CheckpointError, match=r"^layer 1 M_out: the checkpoint changed while it was being analysed"):
        compute_spectra(model, resume=folder, jobs=1, progress=progress)
    assert (1, "M_out") not in _entries(folder)
    changed = compute_spectra(model)
    with pytest.raises(AssertionError):  # power: the numbers computed from the changed bytes are others
        _same_model(truth, changed)
    f.write_bytes(original)
    again = compute_spectra(model, resume=folder)
    _same_model(truth, again)


def test_the_check_after_computing_sees_a_change_the_key_missed(tmp_path):
    """The key computed when the run starts and the bytes decomposed later differ: ``run_unit`` refuses
    (and its result is not stored), a task whose key matches passes."""
    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    (tmp_path / "r" / "units").mkdir(parents=True)
    task = UNITS.UnitTask(None, detect_architecture(src), 0, "M_in", "clean", "float64", False,
                          resume=str(tmp_path / "r"))
    ok = replace(task, key=UNITS._unit_key(src, task))
    assert UNITS.run_unit(ok, src)["stored"]
    with pytest.raises(CheckpointError, match="changed while it was being analysed"):
        UNITS.run_unit(replace(task, key="0" * 40), src)
    assert [p.name for p in (tmp_path / "r" / "units").iterdir()] == [f"{ok.key}.npz"]


def test_a_unit_is_logged_before_it_is_stored(tmp_path, monkeypatch):
    """The cause of the flaky ``test_a_killed_worker_loses_no_finished_unit`` (17 of 18 units in the unit
    log): a worker killed after storing a unit and before logging it; Dask's rerun then loaded the unit
    (not lost) and logged nothing. The line is now written first: a process that dies while storing has
    logged what it computed."""
    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    log = tmp_path / "computed.jsonl"
    monkeypatch.setenv("BOUNDS_LIB_UNIT_LOG", str(log))
    (tmp_path / "r" / "units").mkdir(parents=True)
    task = UNITS.UnitTask(None, detect_architecture(src), 0, "M_in", "clean", "float64", False,
                          resume=str(tmp_path / "r"))
    task = replace(task, key=UNITS._unit_key(src, task))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies while it stores the unit

    monkeypatch.setattr(UNITS._ResumeFolder, "store", killed)
    with pytest.raises(KeyboardInterrupt):
        UNITS.run_unit(task, src)
    assert [(x["layer"], x["part"]) for x in map(json.loads, log.read_text().splitlines())] == [(0, "M_in")]


# --- from the mutation run of the new functions (tests/MUTATION.md) --------------------------------


def _entry_of(folder_path, key, mats, part="M_in", layer=0):
    folder = UNITS._ResumeFolder(folder_path)
    folder.store(key, UNITS.UnitTask(None, None, layer, part, "clean", "float64", False), {"matrices": mats})
    return folder


def _mat(sigma, n21=1.0, n11=1.0, shape=(2, 3), expert=None, kind="M_in"):
    from bounds_lib.analysis.kernel import MatrixSpectrum

    return MatrixSpectrum(0, -1, kind, shape, np.array(sigma, dtype=float), n21, n11,
                          **({} if expert is None else {"expert": expert}))


@pytest.mark.parametrize("sigma, n21, n11, served", [
    ([1.0, 0.0], 0.0, 0.0, True),            # zero norms and a zero singular value are values, not damage
    ([1.0, 1.0], 2.0, float("nan"), True),   # equal values are non-increasing; no (1,1) norm asked
    ([1.0, 1.5], 1.0, 1.0, False),           # an increase smaller than 1 is an increase
    ([1.0, 0.5], -1.0, 1.0, False),          # a negative (2,1) norm
    ([1.0, 0.5], float("inf"), 1.0, False),  # an infinite (2,1) norm
    ([1.0, 0.5], 1.0, -1.0, False),          # a negative (1,1) norm
    ([1.0, 0.5], 1.0, float("inf"), False),  # an infinite (1,1) norm
])
def test_each_value_check_at_its_boundary(sigma, n21, n11, served, tmp_path):
    folder = _entry_of(tmp_path / "r", "k", [_mat(sigma, n21, n11)])
    got = folder.load("k", 0, "M_in")
    assert (got is not None) is served
    what = ("singular values of M_in head -1 that are not finite, non-negative and non-increasing"
            if sigma[1] > sigma[0] else "norms of M_in head -1 that are not finite and non-negative")
    assert folder.mismatched == ([] if served else [f"layer 0 M_in: the stored entry k.npz holds {what}; recomputed"])


def test_the_problem_lines_name_the_count_and_the_shape(tmp_path):
    folder = _entry_of(tmp_path / "r", "k", [_mat([1.0, 0.5, 0.25], shape=(2, 5))])
    assert folder.load("k", 0, "M_in") is None
    assert folder.mismatched == ["layer 0 M_in: the stored entry k.npz holds (3,) float64 singular values of "
                                 "M_in head -1 (2×5); recomputed"]
    f = _fields(folder._path("k"))
    f["norms"] = np.ones((3, 2))
    entry = json.loads(str(f["entry"]))
    sig = [f["sigma0"]]
    entry["digest"] = UNITS._entry_digest("k", str(f["meta"]), f["norms"], sig)
    f["entry"] = np.array(json.dumps(entry))
    np.savez(folder._path("k"), **f)
    assert folder.load("k", 0, "M_in") is None
    assert folder.mismatched[-1] == "layer 0 M_in: the stored entry k.npz holds 3 norm pairs for 1 matrices; recomputed"


def test_an_experts_entry_is_served_with_its_expert_and_checked_against_it(tmp_path):
    """A mixture-of-experts unit ``("M_in", 3)``: the stored expert comes back, and the expected matrix is
    that expert's; an entry naming expert 2 under expert 3's key is recomputed."""
    from dataclasses import replace as dc_replace

    from bounds_lib.checkpoints import detect_architecture

    arch = dc_replace(detect_architecture(open_checkpoint(write_tiny(tmp_path / "m", "llama", L=1, N=4, H=2,
                                                                         Hkv=1, F=3))), n_experts=4)
    m, n, _ = UNITS._ffn_size(arch, ("M_in", 3), "float64")
    good = _entry_of(tmp_path / "r", "k", [_mat(np.linspace(1, 0.1, min(m, n)), shape=(m, n), expert=3)],
                     part=("M_in", 3))
    [back] = good.load("k", 0, ("M_in", 3), arch)
    assert back.expert == 3 and back.shape == (m, n)
    bad = _entry_of(tmp_path / "r2", "k", [_mat(np.linspace(1, 0.1, min(m, n)), shape=(m, n), expert=2)],
                    part=("M_in", 3))
    assert bad.load("k", 0, ("M_in", 3), arch) is None
    assert bad.mismatched == [f"layer 0 M_in.3: the stored entry k.npz holds the matrices "
                              f"[('M_in', -1, 2, ({m}, {n}))], not the part's; recomputed"]
    # without the layout, an entry is checked for what it holds itself, and served
    assert good.load("k", 0, ("M_in", 3)) is not None


def test_a_forged_key_field_over_another_keys_arrays_fails_the_digest(tmp_path):
    """The digest covers the entry's key: a float32 run's entry with its ``key`` field rewritten to the
    float64 key (its arrays and matrices unchanged, so nothing else sees it) is recomputed."""
    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    f64, f32 = tmp_path / "r64", tmp_path / "r32"
    first = compute_spectra(model, resume=f64)
    compute_spectra(model, resume=f32, dtype="float32")
    target, source = _entries(f64)[(0, "M_in")], _entries(f32)[(0, "M_in")]
    f = _fields(source)
    entry = json.loads(str(f["entry"]))
    entry["key"] = target.stem
    f["entry"] = np.array(json.dumps(entry))
    np.savez(target, **f)
    with pytest.warns(UserWarning, match="does not match its digest"):
        again = compute_spectra(model, resume=f64)
    _same_model(first, again)


def test_an_old_format_entry_is_recomputed_without_a_warning(tmp_path):
    folder = _entry_of(tmp_path / "r", "k", [_mat([1.0, 0.5])])
    f = _fields(folder._path("k"))
    del f["entry"]
    np.savez(folder._path("k"), **f)
    assert folder.load("k", 0, "M_in") is None and folder.mismatched == []
    (folder._path("k")).write_bytes(b"not an npz file")
    assert folder.load("k", 0, "M_in") is None
    assert folder.mismatched == ["layer 0 M_in: the stored entry k.npz is unreadable (ValueError); recomputed"]


def test_the_same_bytes_in_another_shape_digest_differently_in_memory(tmp_path):
    """The read-as-array path hashes the shape and dtype with the bytes."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = open_checkpoint({"w": w}, config={})
    b = open_checkpoint({"w": w.reshape(4, 3)}, config={})
    assert UNITS._tensor_digest(a, "w") != UNITS._tensor_digest(b, "w")


def test_the_change_error_is_one_whole_line(tmp_path):
    from bounds_lib.checkpoints import detect_architecture

    model = write_tiny(tmp_path / "m", "llama", L=1, N=32, H=4, Hkv=2, F=48)
    src = open_checkpoint(model)
    task = UNITS.UnitTask(None, detect_architecture(src), 0, "M_in", "clean", "float64", False, key="0" * 40)
    with pytest.raises(CheckpointError) as e:
        UNITS.run_unit(task, src)
    assert str(e.value) == ("layer 0 M_in: the checkpoint changed while it was being analysed (its tensors' bytes "
                            "differ from those at the start of the run); nothing of this part was stored — run "
                            "again once the checkpoint is no longer being written")
