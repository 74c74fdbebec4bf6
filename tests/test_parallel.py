"""Work units smaller than a layer (issue 23): a layer's parts are read and decomposed one at a time.

A part (``"attention"``, ``"M_in"``, ``"M_out"``; :func:`bounds_lib.checkpoints.layer_parts`) reads
only its own tensors, and its spectra are exactly (bitwise, in one process) those the whole-layer
path gives, in the order of the parts.
"""
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from bounds_lib.checkpoints import (
    LAYER_PARTS,
    TensorSource,
    detect_architecture,
    iter_layers,
    layer_parts,
    open_checkpoint,
    part_tensor_names,
)
from bounds_lib.analysis.kernel import layer_spectra


def _tiny_weights(family, rng, N=12, H=3, Hkv=1, F=20, L=2):
    """``(tensors, config)`` of a tiny checkpoint of ``family`` (stored layouts as transformers saves them)."""
    d = N // H
    t = {}
    for i in range(L):
        if family == "bert":
            p = f"encoder.layer.{i}."
            shapes = {"attention.self.query.weight": (N, N), "attention.self.key.weight": (N, N),
                      "attention.self.value.weight": (N, N), "attention.output.dense.weight": (N, N),
                      "intermediate.dense.weight": (F, N), "output.dense.weight": (N, F)}
        elif family == "gpt2":
            p = f"h.{i}."
            shapes = {"attn.c_attn.weight": (N, 3 * N), "attn.c_proj.weight": (N, N),
                      "mlp.c_fc.weight": (N, F), "mlp.c_proj.weight": (F, N)}
        else:
            p = f"model.layers.{i}."
            shapes = {"self_attn.q_proj.weight": (H * d, N), "self_attn.k_proj.weight": (Hkv * d, N),
                      "self_attn.v_proj.weight": (Hkv * d, N), "self_attn.o_proj.weight": (N, H * d),
                      "mlp.gate_proj.weight": (F, N), "mlp.up_proj.weight": (F, N),
                      "mlp.down_proj.weight": (N, F)}
        t.update({p + k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()})
    config = {"bert": {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
                       "intermediate_size": F, "hidden_act": "gelu"},
              "gpt2": {"model_type": "gpt2", "n_layer": L, "n_embd": N, "n_head": H, "n_inner": F},
              "llama": {"model_type": "llama", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
                        "num_key_value_heads": Hkv, "intermediate_size": F, "hidden_act": "silu"}}[family]
    return t, config


def write_tiny(folder, family, seed=0, **sizes):
    """A tiny safetensors checkpoint of ``family`` in ``folder``; returns ``folder``."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors, config = _tiny_weights(family, np.random.default_rng(seed), **sizes)
    save_file(tensors, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


FAMILIES = ("bert", "gpt2", "llama")


def _same(a, b):
    """Two lists of MatrixSpectrum equal bit for bit (fields, shapes, every singular value and norm)."""
    assert [m.label() for m in a] == [m.label() for m in b]
    for x, y in zip(a, b):
        assert (x.layer, x.head, x.matrix_type, x.shape) == (y.layer, y.head, y.matrix_type, y.shape)
        np.testing.assert_array_equal(x.sigma, y.sigma)
        assert x.norm_21 == y.norm_21
        assert x.norm_11 == y.norm_11 or (np.isnan(x.norm_11) and np.isnan(y.norm_11))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_parts_give_the_whole_layers_numbers_in_order(tmp_path, family, mode):
    src = open_checkpoint(write_tiny(tmp_path / family, family))
    spec = detect_architecture(src)
    for layer in range(spec.n_layers):
        assert layer_parts(spec, layer) == LAYER_PARTS
        whole = layer_spectra(next(iter_layers(src, spec, layers=[layer])), mode)
        by_part = []
        for part in layer_parts(spec, layer):
            lw = next(iter_layers(src, spec, layers=[layer], parts=(part,)))
            assert lw.parts == (part,)
            by_part += layer_spectra(lw, mode)
        _same(whole, by_part)
        assert [m.matrix_type for m in whole] == ["QK"] * spec.n_heads + ["V"] * spec.n_heads + ["M_in", "M_out"]


def test_the_identity_check_sees_a_changed_weight(tmp_path):
    """Power: one entry changed in one part's tensor makes the comparison above fail."""
    src = open_checkpoint(write_tiny(tmp_path / "a", "llama"))
    spec = detect_architecture(src)
    whole = layer_spectra(next(iter_layers(src, spec, layers=[0])))
    name = part_tensor_names(spec, 0, "M_out")["down"]
    raw = src.read(name, np.float32).copy()
    raw[0, 0] += 1e-3
    tensors, config = _tiny_weights("llama", np.random.default_rng(0))
    tensors[name] = raw
    other = open_checkpoint(tensors, config=config)
    parts = [m for p in LAYER_PARTS for m in layer_spectra(next(iter_layers(other, spec, layers=[0], parts=(p,))))]
    with pytest.raises(AssertionError):
        _same(whole, parts)


class _Spy:
    """Wraps a source's ``read``: records every tensor name read."""

    def __init__(self, src):
        self.names = []
        inner = src.read

        def read(name, dtype=np.float64):
            self.names.append(name)
            return inner(name, dtype)

        src.read = read


@pytest.mark.parametrize("family", FAMILIES)
def test_a_part_reads_only_its_tensors(tmp_path, family):
    src = open_checkpoint(write_tiny(tmp_path / family, family))
    spec = detect_architecture(src)
    spy = _Spy(src)
    everything = []
    for part in LAYER_PARTS:
        spy.names.clear()
        lw = next(iter_layers(src, spec, layers=[1], parts=(part,)))
        expected = list(part_tensor_names(spec, 1, part).values())
        assert spy.names == expected  # each once, nothing else
        assert lw.names == part_tensor_names(spec, 1, part)
        everything += expected
        for other in set(LAYER_PARTS) - {part}:
            with pytest.raises(ValueError, match="not"):
                lw.matrix(other) if other != "attention" else lw.QK(0)
    assert sorted(everything) == sorted(spec.tensor_names(1).values())  # the parts cover the layer
    spy.names.clear()
    next(iter_layers(src, spec, layers=[1]))  # power: the whole layer reads every tensor, once
    assert sorted(spy.names) == sorted(spec.tensor_names(1).values())


def test_bad_parts_are_refused(tmp_path):
    src = open_checkpoint(write_tiny(tmp_path / "b", "bert"))
    spec = detect_architecture(src)
    for bad in [(), ("mlp",), ("M_in", "ffn")]:
        with pytest.raises(ValueError, match="parts must be"):
            next(iter_layers(src, spec, parts=bad))
    with pytest.raises(ValueError, match="out of range"):
        layer_parts(spec, spec.n_layers)
    lw = next(iter_layers(src, spec, parts=("M_out", "attention")))  # any order: read in the layer's order
    assert lw.parts == ("attention", "M_out") and lw.M_in is None


# --------------------------------------------------------------------------------------------
# Worker processes, threads, Dask: the numbers of the in-process run, in its order
# --------------------------------------------------------------------------------------------

from threadpoolctl import threadpool_limits  # noqa: E402

from bounds_lib.analysis import cluster as CLUSTER, kernel as KERNEL, parallel as PAR  # noqa: E402
from bounds_lib.analysis import pool as POOL, units as UNITS  # noqa: E402
from bounds_lib.analysis.spectra import compute_spectra  # noqa: E402


def _same_model(a, b):
    assert a.arch == b.arch and a.mode == b.mode and a.dtype == b.dtype
    _same(list(a.matrices), list(b.matrices))


@pytest.fixture
def llama_dir(tmp_path):
    return write_tiny(tmp_path / "llama", "llama", L=3, N=32, H=4, Hkv=2, F=48)


def test_worker_processes_give_the_in_process_numbers(llama_dir):
    with threadpool_limits(1, user_api="blas"):
        here = compute_spectra(llama_dir)
        pool = compute_spectra(llama_dir, jobs=2)
    assert here.meta["parallel"]["backend"] == "in process"
    p = pool.meta["parallel"]
    assert p["backend"] == ("processes" if POOL._cores() > 1 else "in process")
    assert p["workers"] == min(2, POOL._cores())
    assert p["chosen"]["per_worker_estimate_MB"] > 0 and p["blas_threads_per_worker"] == 1
    assert p["units"] == 9 and p["units_computed"] == 9
    _same_model(here, pool)


def test_weights_in_memory_use_threads_with_the_same_numbers():
    tensors, config = _tiny_weights("gpt2", np.random.default_rng(3))
    here = compute_spectra(tensors, config=config)
    threads = compute_spectra(tensors, config=config, jobs=2)
    assert threads.meta["parallel"]["backend"] == ("threads" if POOL._cores() > 1 else "in process")
    _same_model(here, threads)


def test_progress_counts_every_matrix_group_once(llama_dir):
    seen = []
    compute_spectra(llama_dir, jobs=2, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 12) for i in range(1, 13)]


@pytest.mark.parametrize("jobs, units, per, avail, workers, limit", [
    (8, 100, 1000, 3500, 3, ["memory"]),        # memory allows three
    (2, 100, 1000, 10**9, 2, ["jobs asked"]),   # the jobs asked
    (8, 1, 1000, 10**9, 1, ["units"]),          # one unit
    (8, 100, 1000, 10, 1, ["memory"]),          # not even one fits: one anyway, and a note
])
def test_the_pool_size_is_the_smallest_limit(monkeypatch, jobs, units, per, avail, workers, limit):
    monkeypatch.setattr(POOL, "_cores", lambda: 4)
    k, why = POOL.choose_workers(jobs, units, per, available=avail)
    assert (k, why["workers"], why["limited_by"]) == (workers, workers, limit)
    assert ("note" in why) == (avail < per)
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    assert POOL.choose_workers(0, 100, 1, available=10**9)[0] == 2  # jobs=0: one per core


def test_the_pool_size_report_names_every_number_that_entered(monkeypatch):
    """``why`` of :func:`choose_workers`, key for key: the limit that chose (cores too), the numbers, the
    memory in MB and where it came from (given, or :func:`available_memory`'s source, or unknown: then memory
    does not limit); a per-worker estimate below one byte counts as one byte."""
    MB = KERNEL.MB
    monkeypatch.setattr(POOL, "_cores", lambda: 4)
    k, why = POOL.choose_workers(8, 100, int(300.26 * MB), available=int(1000.44 * MB))
    assert (k, why) == (3, {"workers": 3, "limited_by": ["memory"], "cores": 4, "jobs_asked": 8, "units": 100,
                            "per_worker_estimate_MB": 300.3, "available_memory_MB": 1000.4,
                            "available_memory_from": "given"})
    assert POOL.choose_workers(8, 100, 1000, available=10)[1]["note"] == \
        "less memory available than one worker's estimate: one worker anyway"
    assert "note" not in POOL.choose_workers(8, 100, 1000, available=1999)[1]  # exactly one fits
    assert POOL.choose_workers(8, 100, MB, available=10**12)[1]["limited_by"] == ["cores"]
    assert POOL.choose_workers(4, 4, MB, available=10**12)[1]["limited_by"] == ["cores", "jobs asked", "units"]
    monkeypatch.setattr(POOL, "_cores", lambda: 8)
    assert POOL.choose_workers(8, 100, 1, available=5)[0] == 5 == POOL.choose_workers(8, 100, 0, available=5)[0]
    monkeypatch.setattr(POOL, "available_memory", lambda: (None, "unknown (no /proc/meminfo)"))
    k, why = POOL.choose_workers(2, 100, 300 * MB)
    assert (k, why["limited_by"], why["available_memory_MB"], why["available_memory_from"]) == \
        (2, ["jobs asked"], None, "unknown (no /proc/meminfo)")
    monkeypatch.setattr(POOL, "available_memory", lambda: (700 * MB, "MemAvailable of /proc/meminfo"))
    k, why = POOL.choose_workers(8, 100, 300 * MB)
    assert (k, why["available_memory_MB"], why["available_memory_from"]) == (2, 700.0, "MemAvailable of /proc/meminfo")


def test_the_memory_estimate_of_a_dense_unit():
    tensors, config = _tiny_weights("llama", np.random.default_rng(0), N=16, H=4, Hkv=2, F=40)
    spec = detect_architecture(open_checkpoint(tensors, config=config))
    # M_in = [G|U] (16 x 80): the matrix, LAPACK's copy, a min(m,n)^2 workspace, in float64
    assert UNITS.unit_memory_estimate(spec, "M_in") == 8 * (2 * 16 * 80 + 16 ** 2)
    assert UNITS.unit_memory_estimate(spec, "M_out", "float32") == 4 * (2 * 16 * 40 + 16 ** 2)
    assert UNITS.unit_memory_estimate(spec, "attention", entrywise=True) > UNITS.unit_memory_estimate(spec, "attention")


def test_dask_local_cluster_gives_the_local_numbers(llama_dir):
    from distributed import Client, LocalCluster

    with threadpool_limits(1, user_api="blas"):
        here = compute_spectra(llama_dir, mode="paper")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            remote = compute_spectra(llama_dir, mode="paper", scheduler=client)
    assert remote.meta["parallel"]["backend"] == "dask" and remote.meta["parallel"]["workers"] == 2
    _same_model(here, remote)


def test_dask_worker_processes_give_the_local_numbers(llama_dir):
    from distributed import Client, LocalCluster

    with threadpool_limits(1, user_api="blas"):
        here = compute_spectra(llama_dir)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            pids = client.run(lambda: __import__("os").getpid())
            remote = compute_spectra(llama_dir, scheduler=client)
    assert len(set(pids.values()) - {__import__("os").getpid()}) == 2  # two other processes
    _same_model(here, remote)


def test_an_unreachable_scheduler_is_one_clear_error_within_its_deadline(llama_dir, capsys):
    import time

    from bounds_lib.cli import main

    t = time.perf_counter()
    with pytest.raises(CLUSTER.ClusterError, match=r"cannot reach a Dask scheduler at 'tcp://127.0.0.1:9' within 1 s"):
        compute_spectra(llama_dir, scheduler="tcp://127.0.0.1:9", scheduler_timeout=1)
    assert time.perf_counter() - t < 8
    assert main(["analyze", str(llama_dir), "--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "1",
                 "--quiet", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bounds-lib: error: cannot reach a Dask scheduler") and "\n" not in err


def test_dask_missing_names_the_extra(llama_dir, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(CLUSTER.ClusterError, match=r"pip install 'bounds_lib\[grid\]'"):
        compute_spectra(llama_dir, scheduler="tcp://127.0.0.1:9")


def test_a_cluster_needs_the_weights_on_disk():
    tensors, config = _tiny_weights("bert", np.random.default_rng(0))
    with pytest.raises(ValueError, match="checkpoint on disk"):
        compute_spectra(tensors, config=config, scheduler="tcp://127.0.0.1:9")


# --------------------------------------------------------------------------------------------
# Resuming
# --------------------------------------------------------------------------------------------


class _CountComputations:
    """Counts the units computed in this process (``bounds_lib.analysis.units._compute``)."""

    def __init__(self, monkeypatch):
        self.units = []
        inner = UNITS._compute

        def counted(source, task, cache=None):
            self.units.append((task.layer, task.part))
            return inner(source, task, cache)

        monkeypatch.setattr(UNITS, "_compute", counted)


def test_resume_loads_finished_units_and_computes_only_the_rest(llama_dir, tmp_path, monkeypatch):
    count = _CountComputations(monkeypatch)
    ref = compute_spectra(llama_dir)
    assert len(count.units) == 9
    folder = tmp_path / "resume"
    first = compute_spectra(llama_dir, resume=folder)
    assert len(count.units) == 18 and first.meta["parallel"]["units_computed"] == 9
    files = sorted((folder / "units").glob("*.npz"))
    assert len(files) == 9 and len((folder / "journal.jsonl").read_text().splitlines()) == 9
    files[0].unlink()                              # one unit lost
    files[1].write_bytes(b"not an npz file")       # one unit damaged: recomputed, never trusted
    again = compute_spectra(llama_dir, resume=folder)
    assert len(count.units) == 20
    assert (again.meta["parallel"]["units_computed"], again.meta["parallel"]["units_resumed"]) == (2, 7)
    _same_model(ref, again)
    _same_model(ref, first)
    # power: another mode, dtype or checkpoint is never served from the folder
    compute_spectra(llama_dir, resume=folder, mode="paper")
    assert len(count.units) == 29
    compute_spectra(llama_dir, resume=folder, dtype="float32")
    assert len(count.units) == 38
    other = write_tiny(tmp_path / "other", "llama", seed=1, L=3, N=32, H=4, Hkv=2, F=48)
    compute_spectra(other, resume=folder)
    assert len(count.units) == 47


def test_a_prefix_run_resumes_into_the_whole_model(llama_dir, tmp_path, monkeypatch):
    count = _CountComputations(monkeypatch)
    compute_spectra(llama_dir, n_layers=2, resume=tmp_path / "r")
    whole = compute_spectra(llama_dir, resume=tmp_path / "r")
    assert count.units[6:] == [(2, "attention"), (2, "M_in"), (2, "M_out")]
    _same_model(whole, compute_spectra(llama_dir))


def test_resume_of_weights_in_memory_is_keyed_by_their_bytes(tmp_path, monkeypatch):
    count = _CountComputations(monkeypatch)
    tensors, config = _tiny_weights("bert", np.random.default_rng(0))
    compute_spectra(tensors, config=config, resume=tmp_path / "r")
    compute_spectra(tensors, config=config, resume=tmp_path / "r")
    assert len(count.units) == 6
    name = next(iter(tensors))
    tensors[name] = tensors[name] * 2  # the attention of layer 0 changed
    compute_spectra(tensors, config=config, resume=tmp_path / "r")
    assert count.units[6:] == [(0, "attention")]


def test_a_killed_worker_loses_no_finished_unit(tmp_path, monkeypatch):
    """Two worker processes; one is killed mid-run. Dask reruns its tasks; a unit that was finished
    (fetched, or stored in the resume folder) is never computed again, and the numbers are the local ones."""
    import os
    import signal
    import threading
    import time

    from distributed import Client, LocalCluster

    model = write_tiny(tmp_path / "m", "llama", L=6, N=384, H=4, Hkv=2, F=1536)
    log = tmp_path / "computed.jsonl"
    monkeypatch.setenv("BOUNDS_LIB_UNIT_LOG", str(log))  # inherited by the worker processes
    folder = tmp_path / "resume"
    with threadpool_limits(1, user_api="blas"):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            box = {}
            run = threading.Thread(target=lambda: box.update(sp=compute_spectra(model, scheduler=client,
                                                                                resume=folder)))
            run.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 3):
                time.sleep(0.05)
            pids = set(client.run(os.getpid).values())
            # the victim is a worker that has computed units already (the first three may all be one
            # worker's, when the other started late)
            done_by = [json.loads(x)["pid"] for x in log.read_text().splitlines()]
            victim = next(pid for pid in done_by if pid in pids)
            os.kill(victim, signal.SIGKILL)
            n_at_kill = len(log.read_text().splitlines())
            run.join(120)
            assert not run.is_alive()
        lines = [json.loads(x) for x in log.read_text().splitlines()]
        monkeypatch.delenv("BOUNDS_LIB_UNIT_LOG")
        here = compute_spectra(model)
    assert n_at_kill < 18, "the run ended before the kill; make the units slower"
    assert any(x["pid"] == victim for x in lines)  # the victim had computed units before it died
    units = [(x["layer"], x["part"]) for x in lines]
    assert len(set(units)) == 18  # every unit computed
    # and once, but for the victim's last unit when it was killed after computing it (the log line is
    # written first) and before storing it: that unit was not finished, and is computed again
    last_of_victim = [u for u, x in zip(units, lines) if x["pid"] == victim][-1]
    assert [u for u in set(units) if units.count(u) > 1] in ([], [last_of_victim])
    assert all(units.count(u) <= 2 for u in units)
    _same_model(here, box["sp"])
    again = compute_spectra(model, resume=folder)  # and a rerun computes nothing
    assert again.meta["parallel"]["units_computed"] == 0
    _same_model(here, again)


@pytest.mark.slow  # about 20 s: torch imported here and in two spawned workers
def test_torch_cpu_gives_the_same_bits_in_process_and_in_worker_processes(tmp_path, capsys):
    """``--device torch-cpu`` with ``--jobs 1`` and ``--jobs 2``: the same report, bit for bit. MKL's SVD
    depends on its thread count in the last bits, and this process (under the CLI's ``threadpool_limits``)
    and a spawned worker had different ones: 12 matrices of this model differed by up to 5·10⁻¹⁶
    relative. The torch CPU SVDs now run on one thread wherever they run."""
    pytest.importorskip("torch")
    from bounds_lib.cli import main

    if POOL._cores() < 2:
        pytest.skip("worker processes need two cores")
    model = write_tiny(tmp_path / "m", "llama", L=2, N=128, H=4, Hkv=2, F=512)
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.json"
        assert main(["analyze", str(model), "--device", "torch-cpu", "--jobs", jobs, "--json", str(out), "--quiet",
                     "--no-progress"]) == 0
        reports.append(json.loads(out.read_text()))
    assert [r["meta"]["parallel"]["backend"] for r in reports] == ["in process", "processes"]
    assert reports[0]["matrices"] == reports[1]["matrices"] and reports[0]["summary"] == reports[1]["summary"]


def test_cli_jobs_and_resume(llama_dir, tmp_path, capsys):
    from bounds_lib.cli import main

    out = tmp_path / "r.json"
    assert main(["analyze", str(llama_dir), "--jobs", "2", "--resume", str(tmp_path / "res"), "--json", str(out),
                 "--quiet", "--no-progress"]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["parallel"]["units_computed"] == 9
    assert meta["parallel"]["backend"] == ("processes" if POOL._cores() > 1 else "in process")
    assert main(["analyze", str(llama_dir), "--resume", str(tmp_path / "res"), "--json", str(out),
                 "--quiet", "--no-progress"]) == 0
    assert json.loads(out.read_text())["meta"]["parallel"]["units_resumed"] == 9
    (tmp_path / "file").write_text("x")
    assert main(["analyze", str(llama_dir), "--resume", str(tmp_path / "file"), "--quiet"]) == 1
    assert "--resume" in capsys.readouterr().err
    assert main(["analyze", str(llama_dir), "--scheduler-timeout", "0", "--quiet"]) == 1


# --------------------------------------------------------------------------------------------
# The lean factorization of large feed-forward matrices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family, sizes", [
    ("llama", dict(N=32, H=4, Hkv=2, F=48)),    # M_in = [G|U] 32 x 96 (wide), M_out 48 x 32 (tall)
    ("gpt2", dict(N=24, H=3, F=16)),            # d_ff < N: M_in 24 x 16 tall, M_out 16 x 24 wide
    ("bert", dict(N=12, H=3, F=20)),
])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_lean_path_agrees_with_the_dense_svd(tmp_path, monkeypatch, family, sizes, dtype):
    from bounds_lib.analysis.devices import spectra_agree

    model = write_tiny(tmp_path / family, family, L=2, **sizes)
    dense = compute_spectra(model, dtype=dtype)
    assert dense.meta["parallel"]["units_factored_lean"] == 0
    monkeypatch.setattr(PAR, "memory_budget", lambda source: 1)  # nothing fits: every M_in, M_out lean
    monkeypatch.setattr(PAR, "_CHUNK_BYTES", 5 * 8 * sizes["N"])  # several blocks, a one-row last block too
    lean = compute_spectra(model, dtype=dtype)
    assert lean.meta["parallel"]["units_factored_lean"] == 6  # attention in halves, M_in and M_out by TSQR
    rtol = 1e-13 if dtype == "float64" else 1e-5
    worst = 0.0
    for a, b in zip(dense.matrices, lean.matrices):
        assert a.label() == b.label() and a.shape == b.shape
        if a.matrix_type in ("QK", "V"):
            np.testing.assert_array_equal(a.sigma, b.sigma)
            continue
        ok, w = spectra_agree(a.sigma, b.sigma, a.shape, np.dtype(dtype))
        worst = max(worst, w)
        assert ok, (a.label(), w)
        np.testing.assert_allclose([b.norm_21, b.norm_11], [a.norm_21, a.norm_11], rtol=rtol)
    assert worst < 0.5  # measured at most 0.05 of the tolerance
    with threadpool_limits(1, user_api="blas"):  # the pool gives the lean numbers of the in-process run
        _same_model(compute_spectra(model, dtype=dtype), compute_spectra(model, dtype=dtype, jobs=2))


def test_the_lean_agreement_check_sees_a_changed_entry():
    """Power: the tolerance of the test above rejects the spectrum of a matrix with one entry changed by 1e-6."""
    from bounds_lib.analysis.devices import spectra_agree
    from bounds_lib.analysis.kernel import _dense_spectrum

    W = np.random.default_rng(0).standard_normal((40, 100))
    s_lean = KERNEL._tsqr_spectrum(W, np.dtype("float64"))[0]
    V = W.copy()
    V[3, 7] += 1e-6
    assert spectra_agree(s_lean, _dense_spectrum(W)[0], W.shape)[0]
    assert not spectra_agree(s_lean, _dense_spectrum(V)[0], W.shape)[0]


def test_extreme_weights_are_scaled_in_the_lean_path_as_in_the_dense_one():
    from bounds_lib.analysis.devices import spectra_agree
    from bounds_lib.analysis.kernel import _dense_spectrum

    W = np.random.default_rng(1).standard_normal((30, 70))
    for scale in (2.0 ** 600, 2.0 ** -600):
        s, n21, n11 = KERNEL._tsqr_spectrum(W * scale, np.dtype("float64"))
        s0, a0, b0 = _dense_spectrum(W * scale)
        assert np.all(np.isfinite(s)) and s[0] > 0
        assert spectra_agree(s / scale, s0 / scale, W.shape)[0]
        np.testing.assert_allclose([n21, n11], [a0, b0], rtol=1e-13)


def test_extreme_weights_whose_largest_magnitude_is_negative_are_scaled_too():
    """The scale is set by the largest |entry|: weights of order −2⁶⁰⁰ with small positive entries are
    scaled like any others (their squares would overflow otherwise)."""
    from bounds_lib.analysis.devices import spectra_agree
    from bounds_lib.analysis.kernel import _dense_spectrum

    W = -np.abs(np.random.default_rng(2).standard_normal((30, 70))) * 2.0 ** 600
    W[0, 0] = 1.0
    s, n21, n11 = KERNEL._tsqr_spectrum(W, np.dtype("float64"))
    s0, a0, b0 = _dense_spectrum(W)
    assert np.all(np.isfinite(s)) and np.isfinite(n21) and np.isfinite(n11)
    assert spectra_agree(s / 2.0 ** 600, s0 / 2.0 ** 600, W.shape)[0]
    np.testing.assert_allclose([n21, n11], [a0, b0], rtol=1e-13)


def test_the_lean_path_factors_in_the_working_precision():
    """``--dtype float32`` factors in float32 (its rounding, ~1e-7 of σ₁, shows against float64), never
    silently in float64; both agree with the dense SVD within their own precision's bound."""
    from bounds_lib.analysis.devices import spectra_agree

    W = np.random.default_rng(3).standard_normal((300, 40)).astype(np.float32)
    s32 = KERNEL._tsqr_spectrum(W, np.dtype("float32"))[0]
    s64 = KERNEL._tsqr_spectrum(W, np.dtype("float64"))[0]
    dense = np.linalg.svd(W.astype(np.float64), compute_uv=False)
    assert spectra_agree(s64, dense, W.shape)[0] and spectra_agree(s32, dense, W.shape, np.float32)[0]
    assert np.max(np.abs(s32 - s64)) > 1e-10 * s64[0]


def test_a_dense_unit_goes_lean_only_when_it_would_not_fit_the_budget():
    tensors, config = _tiny_weights("llama", np.random.default_rng(0), N=16, H=4, Hkv=2, F=40)
    src = open_checkpoint(tensors, config=config)
    spec = detect_architecture(src)
    assert UNITS.unit_memory_estimate(spec, "attention", lean=True) < UNITS.unit_memory_estimate(spec, "attention")
    need = UNITS.WORKER_BASE_BYTES + UNITS.unit_memory_estimate(spec, "M_in", source=src)
    assert UNITS.lean_unit(spec, "M_in", "float64", source=src, budget=need - 1)
    assert not UNITS.lean_unit(spec, "M_in", "float64", source=src, budget=need)
    assert UNITS.lean_unit(spec, "attention", "float64", source=src, budget=1)  # in halves
    assert not UNITS.lean_unit(spec, "attention", "float64", source=src, budget=10**12)
    assert not UNITS.lean_unit(spec, "M_in", "float64", source=src, budget=1, device="cuda")
    # lean: [G|U] (16 x 80) held as stored (float32) and half of it again while filling, R, its SVD copy and
    # workspace in float64, one block
    assert UNITS.unit_memory_estimate(spec, "M_in", lean=True, source=src) == \
        int(1.5 * 4 * 16 * 80) + 3 * 8 * 16 ** 2 + KERNEL._CHUNK_BYTES


def test_device_reaches_every_unit(llama_dir, tmp_path, monkeypatch):
    from bounds_lib.cli import main

    seen = []
    inner = UNITS._compute

    def spy(source, task, cache=None):
        seen.append(task.device)
        return inner(source, task, cache)

    monkeypatch.setattr(UNITS, "_compute", spy)
    out = tmp_path / "r.json"
    assert main(["analyze", str(llama_dir), "--jobs", "1", "--device", "cpu", "--json", str(out), "--quiet",
                 "--no-progress"]) == 0
    assert seen == ["cpu"] * 9 and json.loads(out.read_text())["meta"]["device"] == "cpu"
    torch_cpu = compute_spectra(llama_dir, device="torch-cpu")
    here = compute_spectra(llama_dir)
    from bounds_lib.analysis.devices import spectra_agree

    for a, b in zip(here.matrices, torch_cpu.matrices):
        assert spectra_agree(a.sigma, b.sigma, a.shape)[0]
    assert seen[-18:-9] == ["torch-cpu"] * 9


def test_available_memory_without_proc_meminfo_uses_posix_or_says_unknown(monkeypatch):
    from pathlib import Path

    real_read = Path.read_text

    def no_meminfo(self, *a, **k):
        if str(self) == "/proc/meminfo":
            raise OSError("no such file")
        return real_read(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", no_meminfo)
    monkeypatch.setattr(POOL, "_cgroup_memory_left", lambda: None)
    avail, where = POOL.available_memory()
    assert (where, avail > 0) == ("sysconf(SC_AVPHYS_PAGES)", True)
    monkeypatch.setattr(POOL.os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert POOL.available_memory() == (None, "unknown (no /proc/meminfo)")


# --------------------------------------------------------------------------------------------
# Named mutants, round 2 (issue 33): the resume key, the checkpoint's identity, bfloat16 on the lean path
# --------------------------------------------------------------------------------------------


def test_an_entrywise_run_after_a_plain_run_in_the_same_resume_folder_computes_its_norms(llama_dir, tmp_path):
    """``--entrywise`` after a plain run, same ``--resume`` folder: B_11 is the fresh ``--entrywise`` run's,
    never the plain run's "not computed" (a unit without (1,1) norms must not serve it); and the other way
    round, a plain run is not served units with norms it did not ask for."""
    from bounds_lib.cli import main

    run = ["analyze", str(llama_dir), "--jobs", "1", "--quiet", "--no-progress"]
    resume = ["--resume", str(tmp_path / "res")]
    out = {k: tmp_path / f"{k}.json" for k in ("plain", "entrywise", "fresh")}
    assert main(run + resume + ["--json", str(out["plain"])]) == 0
    assert main(run + resume + ["--entrywise", "--json", str(out["entrywise"])]) == 0
    assert main(run + ["--entrywise", "--json", str(out["fresh"])]) == 0
    plain, ew, fresh = (json.loads(out[k].read_text()) for k in ("plain", "entrywise", "fresh"))
    assert plain["summary"]["B_edelman_11_extension"]["value"] is None  # the plain run has no (1,1) norms
    b11 = fresh["summary"]["B_edelman_11_extension"]["log10"]
    assert b11 is not None and math.isfinite(b11)
    assert ew["summary"]["B_edelman_11_extension"]["log10"] == b11
    assert [m["norm_11"] for m in ew["matrices"]] == [m["norm_11"] for m in fresh["matrices"]]
    assert all(m["norm_11"] is not None for m in ew["matrices"])
    # the reverse order, in the library: an entrywise folder does not answer a plain run either
    folder = tmp_path / "res2"
    compute_spectra(llama_dir, resume=folder, entrywise=True)
    _same_model(compute_spectra(llama_dir, entrywise=False), compute_spectra(llama_dir, resume=folder,
                                                                             entrywise=False))


def _swap_layer0_q_and_o_in_the_header(f):
    """Re-save safetensors file ``f`` with layer 0's ``q_proj`` and ``o_proj`` names swapped in its header:
    the same size, modification time and data bytes; only the header differs."""
    import os

    st = os.stat(f)
    raw = bytearray(f.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = bytes(raw[8:8 + n])
    q, o = b"layers.0.self_attn.q_proj.weight", b"layers.0.self_attn.o_proj.weight"
    assert header.count(q) == header.count(o) == 1
    swapped = header.replace(q, b"\0").replace(o, q).replace(b"\0", o)
    assert len(swapped) == n and swapped != header
    raw[8:8 + n] = swapped
    f.write_bytes(bytes(raw))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(f)
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_header_only_change_of_a_checkpoint_is_not_served_from_the_resume_folder(llama_dir, tmp_path):
    """A checkpoint re-saved with another header — same file name, same size, same modification time (a
    file system with coarse timestamps, or a copy that keeps them), the same data bytes — is recomputed.

    The change: layer 0's query and output projections swap names in the header (both 32×32, names of the
    same length), so the layer's attention changes while not one tensor byte moves."""
    folder = tmp_path / "res"
    before = compute_spectra(llama_dir, resume=folder)
    _swap_layer0_q_and_o_in_the_header(llama_dir / "model.safetensors")
    fresh = compute_spectra(llama_dir)
    with pytest.raises(AssertionError):  # power: the header change is one the spectra see
        _same_model(before, fresh)
    after = compute_spectra(llama_dir, resume=folder)
    _same_model(fresh, after)
    assert after.meta["parallel"]["units_computed"] >= 1


def _write_bf16(folder, scale, **sizes):
    """A tiny llama checkpoint stored in bfloat16 (``scale`` × the float32 weights, rounded by torch);
    returns ``(folder, {name: the stored values widened to float64 by torch})``."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors, config = _tiny_weights("llama", np.random.default_rng(7), **sizes)
    bf = {k: torch.from_numpy(v * np.float32(scale)).to(torch.bfloat16) for k, v in tensors.items()}
    save_file(bf, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder, {k: v.to(torch.float64).numpy() for k, v in bf.items()}


# LLM-like weights (std 0.02: some entries below float16's normal range), weights all below float16's normal
# range (2^-20), weights beyond float16's largest value (65504); bfloat16 holds all of them
@pytest.mark.parametrize("scale", [0.02 / 0.3, 2.0 ** -20, 2.0 ** 20])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_bfloat16_checkpoint_on_the_lean_path_agrees_with_the_dense_float64_svd(tmp_path, monkeypatch, scale,
                                                                                    dtype):
    """bfloat16 weights factored lean (TSQR from the stored precision) give the singular values of the dense
    float64 SVD of the same stored values (widened by torch, not by the library) within the agreement bound,
    and the dense path's norms: the stored precision is read exactly (bfloat16 is not float16)."""
    from bounds_lib.analysis.devices import spectra_agree

    model, w = _write_bf16(tmp_path / "bf16", scale, L=1, N=32, H=4, Hkv=2, F=48)
    assert open_checkpoint(model).dtype("model.layers.0.mlp.down_proj.weight") == "BF16"
    dense = compute_spectra(model, dtype=dtype)
    monkeypatch.setattr(PAR, "memory_budget", lambda source: 1)  # the checkpoint is too large for the budget
    monkeypatch.setattr(PAR, "_CHUNK_BYTES", 5 * 8 * 32)  # several blocks
    lean = compute_spectra(model, dtype=dtype)
    assert lean.meta["parallel"]["units_factored_lean"] == 3
    p = "model.layers.0.mlp."
    reference = {"M_in": np.vstack([w[p + "gate_proj.weight"], w[p + "up_proj.weight"]]),  # [G|U]ᵀ
                 "M_out": w[p + "down_proj.weight"]}
    rtol = 1e-13 if dtype == "float64" else 1e-5
    seen = set()
    for a, b in zip(dense.matrices, lean.matrices):
        if a.matrix_type not in reference:
            continue
        seen.add(a.matrix_type)
        s64 = np.linalg.svd(reference[a.matrix_type], compute_uv=False)
        ok, worst = spectra_agree(np.asarray(b.sigma, dtype=np.float64), s64, a.shape, np.dtype(dtype))
        assert ok, (a.label(), scale, worst)
        np.testing.assert_allclose([b.norm_21, b.norm_11], [a.norm_21, a.norm_11], rtol=rtol)
    assert seen == {"M_in", "M_out"}


def test_a_lean_unit_is_factored_by_tsqr_from_its_own_stored_tensors_under_its_own_cache_key(tmp_path, monkeypatch):
    """Which units take TSQR and what they are given: none while every unit fits the budget; with nothing
    fitting, each M_in / M_out, once, read in its stored precision (float16 stays float16) and factored in
    the working precision asked for, reading only its own tensors. Through a cache the lean numbers are the
    uncached ones (each matrix of each layer its own entry), a second run is served from the cache, and
    another working precision is not."""
    from safetensors.numpy import save_file

    from bounds_lib.checkpoints import SafetensorsSource
    from bounds_lib.analysis.cache import SpectraCache

    tensors, config = _tiny_weights("llama", np.random.default_rng(8), L=2, N=32, H=4, Hkv=2, F=48)
    model = tmp_path / "f16"
    model.mkdir()
    save_file({k: v.astype(np.float16) for k, v in tensors.items()}, str(model / "model.safetensors"))
    (model / "config.json").write_text(json.dumps(config))
    calls, reads = [], []
    tsqr, read_raw = KERNEL._tsqr_spectrum, SafetensorsSource.read_raw

    def spy(W, working, chunk_bytes=None):
        calls.append((W.dtype.name, W.shape, np.dtype(working).name))
        return tsqr(W, working, chunk_bytes)

    def spy_read(self, name):
        reads.append(name)
        return read_raw(self, name)

    monkeypatch.setattr(KERNEL, "_tsqr_spectrum", spy)
    monkeypatch.setattr(SafetensorsSource, "read_raw", spy_read)
    dense = compute_spectra(model)
    assert calls == []
    dense_reads = sorted(reads)
    assert dense_reads == sorted(tensors)  # each tensor once
    monkeypatch.setattr(PAR, "memory_budget", lambda source: 1)  # nothing fits
    reads.clear()
    lean = compute_spectra(model)
    ffn = [m for m in dense.matrices if m.matrix_type in ("M_in", "M_out")]
    assert calls == [("float16", m.shape, "float64") for m in ffn]
    attention = [n for n in tensors if "self_attn" in n]
    assert sorted(reads) == sorted([*tensors, *attention])  # the attention in two halves; M_in, M_out once each
    cache = SpectraCache()
    _same_model(lean, compute_spectra(model, cache=cache))
    calls.clear()
    _same_model(lean, compute_spectra(model, cache=cache))
    assert calls == []
    compute_spectra(model, dtype="float32", cache=cache)
    assert calls == [("float16", m.shape, "float32") for m in ffn]


def test_a_worker_reopens_a_checkpoint_re_saved_with_another_header(llama_dir):
    """A worker process keeps the checkpoints it opened (headers only) for the next task — a Dask worker
    lives across runs. A checkpoint re-saved at the same path with another header (same size and mtime)
    is opened again, not read through the old header's offsets."""
    q = "model.layers.0.self_attn.q_proj.weight"
    old = UNITS._opener(open_checkpoint(llama_dir)).open()  # what a long-lived worker holds from a first run
    before = old.read(q)
    _swap_layer0_q_and_o_in_the_header(llama_dir / "model.safetensors")
    now = open_checkpoint(llama_dir)
    assert not np.array_equal(now.read(q), before)  # the change is one a reader sees
    np.testing.assert_array_equal(UNITS._opener(now).open().read(q), now.read(q))


def test_the_resume_folder_stores_every_field_and_journals_each_unit(tmp_path):
    """A stored unit comes back field for field (an expert's number, a NaN (1,1) norm, the shapes), and each
    stored unit adds one journal line: layer, part, key, host, pid, seconds (0.1 ms), peak memory."""
    from bounds_lib.analysis.kernel import MatrixSpectrum

    folder = UNITS._ResumeFolder(tmp_path / "r")
    mats = [MatrixSpectrum(2, 0, "QK", (4, 4), np.array([3.0, 1.0, 0.0, 0.0]), 5.0, float("nan")),
            MatrixSpectrum(2, -1, "M_in", (4, 8), np.array([2.0, 0.5, 0.25, 0.0]), 4.0, 6.0, expert=3)]
    task = UNITS.UnitTask(None, None, 2, ("M_in", 3), "clean", "float64", False)
    folder.store("k1", task, {"matrices": mats, "host": "h", "pid": 7, "seconds": 1.234567, "maxrss": 2**30})
    folder.store("k2", replace(task, part="attention"), {"matrices": mats[:1]})  # sent back without its timings
    back = folder.load("k1", 2)
    assert [(m.layer, m.head, m.matrix_type, m.shape, m.norm_21, m.expert) for m in back] == \
        [(2, 0, "QK", (4, 4), 5.0, None), (2, -1, "M_in", (4, 8), 4.0, 3)]
    assert math.isnan(back[0].norm_11) and back[1].norm_11 == 6.0
    np.testing.assert_array_equal(back[1].sigma, [2.0, 0.5, 0.25, 0.0])
    assert folder.load("k3", 2) is None
    lines = [json.loads(x) for x in (tmp_path / "r" / "journal.jsonl").read_text().splitlines()]
    assert lines == [{"layer": 2, "part": "M_in.3", "key": "k1", "host": "h", "pid": 7, "seconds": 1.2346,
                      "maxrss": 2**30},
                     {"layer": 2, "part": "attention", "key": "k2", "host": None, "pid": None, "seconds": 0.0,
                      "maxrss": None}]


def test_the_unit_key_reads_no_device_as_the_cpu_and_keeps_devices_apart(llama_dir):
    """A run without ``device`` and one with ``device="cpu"`` compute alike, so their units share keys; units
    computed on another device (a GPU's, whose last bits differ) never serve a CPU run, nor one another."""
    src = open_checkpoint(llama_dir)
    task = UNITS.UnitTask(None, detect_architecture(src), 0, "attention", "clean", "float64", False)
    key = UNITS._unit_key(src, task)
    assert UNITS._unit_key(src, replace(task, device="cpu")) == key
    others = {UNITS._unit_key(src, replace(task, device=d)) for d in ("cuda:0", "cuda:1", "torch-cpu")}
    assert len(others) == 3 and key not in others


def test_a_unit_file_that_needs_pickle_is_recomputed_not_loaded(tmp_path):
    """The resume folder loads plain arrays only: a unit file whose fields are Python objects (unpickling
    runs code) is treated as damaged, so the unit is computed again."""
    from bounds_lib.analysis.kernel import MatrixSpectrum

    folder = UNITS._ResumeFolder(tmp_path / "r")
    task = UNITS.UnitTask(None, None, 0, "attention", "clean", "float64", False)
    folder.store("k", task, {"matrices": [MatrixSpectrum(0, 0, "QK", (2, 2), np.array([1.0, 0.5]), 1.5, 1.5)]})
    assert folder.load("k", 0) is not None
    with np.load(folder._path("k")) as z:
        fields = {name: z[name] for name in z.files}
    fields["meta"] = np.array(str(fields["meta"]), dtype=object)  # the same JSON text, as a pickled object
    np.savez(folder._path("k"), **fields)
    assert folder.load("k", 0) is None


def test_the_memory_budget_counts_each_stored_precision(tmp_path):
    """2 × the largest stored tensor in its stored bytes (8, 4, 2, 2 for f64, f32, f16, bf16, however the
    source spells the dtype; 4 for a dtype the analysis does not read) + 400 MB."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import save_file
    from safetensors.torch import save_file as save_torch

    base = 400 * 2**20

    def on_disk(name, save, tensors):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        save(tensors, str(tmp_path / name / "model.safetensors"))
        return open_checkpoint(tmp_path / name)

    for dt, size in (("float64", 8), ("float32", 4), ("float16", 2)):
        arrays = {"big": np.zeros((30, 10), dtype=dt), "small": np.zeros((2, 2), dtype=dt)}
        assert UNITS.memory_budget(open_checkpoint(arrays, config={})) == 2 * size * 300 + base, dt
        assert UNITS.memory_budget(on_disk(dt, save_file, arrays)) == 2 * size * 300 + base, dt
    bf = {"big": torch.zeros((30, 10), dtype=torch.bfloat16)}
    assert UNITS.memory_budget(open_checkpoint(bf, config={})) == 2 * 2 * 300 + base
    assert UNITS.memory_budget(on_disk("bf16", save_torch, bf)) == 2 * 2 * 300 + base
    assert UNITS.memory_budget(on_disk("i8", save_file, {"ids": np.zeros((30, 10), dtype=np.int8)})) == \
        2 * 4 * 300 + base

    class Odd(TensorSource):
        """One tensor whose shape cannot be read: left out of the budget."""

        def names(self):
            return ["odd", "w"]

        def dtype(self, name):
            return "F32"

        def shape(self, name):
            if name == "odd":
                raise ValueError("unreadable")
            return (5, 5)

    assert UNITS.memory_budget(Odd()) == 2 * 4 * 25 + base


def test_the_memory_estimate_of_every_unit_kind():
    """The attention part: its four projections (H query/output heads, Hk key/value heads of d rows of N)
    held twice over (three halves lean), plus 64 MB of (1,1)-norm chunks when asked, plus an N×N product and
    its copies in paper mode; feed-forward units from the layout (gated M_in is N × 2 d_ff) or from the
    stored tensors, dense or lean, in the stored precision given."""
    tensors, config = _tiny_weights("llama", np.random.default_rng(0), N=16, H=4, Hkv=2, F=40)
    src = open_checkpoint(tensors, config=config)
    spec = detect_architecture(src)
    N, H, Hk, d = 16, 4, 2, 4
    for s, dt in ((8, "float64"), (4, "float32")):
        proj = s * (2 * H * d * N + 2 * Hk * d * N)
        est = {(e, mode, lean): UNITS.unit_memory_estimate(spec, "attention", dt, entrywise=e, mode=mode, lean=lean)
               for e in (False, True) for mode in ("clean", "paper") for lean in (False, True)}
        for (e, mode, lean), v in est.items():
            assert v == (3 if lean else 4) * proj // 2 + (64 * 2**20 if e else 0) + \
                (3 * s * N * N if mode == "paper" else 0), (dt, e, mode, lean)
            assert type(v) is int  # whole bytes
    k = 16
    assert UNITS.unit_memory_estimate(spec, "M_in", "float32") == 4 * (2 * 16 * 80 + k * k)
    assert UNITS.unit_memory_estimate(spec, "M_out", source=src) == 8 * (2 * 16 * 40 + k * k)
    assert UNITS.unit_memory_estimate(spec, "M_in", lean=True, stored="float16") == \
        int(1.5 * 2 * 16 * 80) + 3 * 8 * k * k + KERNEL._CHUNK_BYTES
    assert UNITS.unit_memory_estimate(spec, "M_out", "float32", lean=True) == \
        int(1.5 * 4 * 16 * 40) + 3 * 4 * k * k + KERNEL._CHUNK_BYTES
    assert UNITS.unit_memory_estimate(spec, "M_out", lean=True, source=src, layer=1) == \
        int(1.5 * 4 * 16 * 40) + 3 * 8 * k * k + KERNEL._CHUNK_BYTES


def test_a_change_beyond_the_header_of_a_large_checkpoint_is_seen_by_its_modification_time(tmp_path):
    """The identity reads a file's first MiB (its header), its size and its modification time: a weight
    changed beyond the first MiB, in a file of the same size saved later, is recomputed, not resumed."""
    import os

    model = write_tiny(tmp_path / "big", "llama", L=1, N=256, H=4, Hkv=2, F=512)
    f = model / "model.safetensors"
    assert f.stat().st_size > 2 * 2**20
    folder = tmp_path / "res"
    before = compute_spectra(model, resume=folder)
    st = os.stat(f)
    raw = bytearray(f.read_bytes())
    raw[-4] ^= 1  # the lowest mantissa bit of the last float32 weight
    f.write_bytes(bytes(raw))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert os.stat(f).st_size == st.st_size
    fresh = compute_spectra(model)
    with pytest.raises(AssertionError):  # power: the one-bit change is one the spectra see
        _same_model(before, fresh)
    _same_model(fresh, compute_spectra(model, resume=folder))


def test_the_checkpoint_identity_reads_each_files_first_mib_and_eight_bytes_and_no_more(tmp_path):
    """The checkpoint identity — what a worker compares to be sure it reopened the file its parent opened
    (resuming keys each unit by the content of the tensors it reads, tests/test_resume_content.py) — reads
    a bounded prefix: the first 8 + 2²⁰ bytes of each file (the safetensors header) enter it, the rest is
    left to the file's size and modification time."""
    import os
    from types import SimpleNamespace

    f = tmp_path / "model.safetensors"
    f.write_bytes(np.random.default_rng(0).bytes(3 * 2**20))
    src = SimpleNamespace(files=[f])
    st = os.stat(f)

    def flipped(*offsets):
        raw = bytearray(f.read_bytes())
        for o in offsets:
            raw[o] ^= 1
        f.write_bytes(bytes(raw))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        return UNITS._checkpoint_identity(src)

    first = UNITS._checkpoint_identity(src)
    assert flipped(8 + 2**20 - 1) != first  # the last byte read
    assert flipped(8 + 2**20 - 1) == first  # flipped back
    assert flipped(8 + 2**20, 2**21 + 5, 3 * 2**20 - 1) == first  # beyond the bound: not read


def test_the_stored_precision_of_a_part_is_the_widest_of_its_tensors_capped_by_the_working_one():
    """A part whose tensors are stored in different precisions (a gate in float16, its up projection in
    float32) is read in the widest that holds them all exactly; bfloat16 needs float32; a precision the lean
    path does not narrow (float64) is read in the working precision; torch's spelling of a dtype is read too."""
    from types import SimpleNamespace

    src = SimpleNamespace(dtype={"g": "F16", "u": "F32", "b": "BF16", "d": "F64"}.get)
    f16, f32, f64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")
    assert KERNEL._stored_dtype(src, ["g", "g"], f64) == f16
    assert KERNEL._stored_dtype(src, ["g", "u"], f64) == KERNEL._stored_dtype(src, ["u", "g"], f64) == f32
    assert KERNEL._stored_dtype(src, ["g", "b"], f64) == f32
    assert KERNEL._stored_dtype(src, ["g", "d"], f64) == f64 and KERNEL._stored_dtype(src, ["d", "g"], f32) == f32
    torch_spelling = SimpleNamespace(dtype={"h": "torch.float16", "b": "torch.bfloat16"}.get)  # str(tensor.dtype)
    assert KERNEL._stored_dtype(torch_spelling, ["h"], f64) == f16
    assert KERNEL._stored_dtype(torch_spelling, ["b"], f64) == f32


def test_a_mixture_of_experts_on_the_lean_path_keeps_each_experts_number(tmp_path, monkeypatch):
    """Mixtral's expert feed-forwards factored lean come back as the dense run's: the same labels, shapes and
    expert numbers (each expert's M_in and M_out its own), and singular values within the agreement bound."""
    from tiny_checkpoints import write_tiny_model

    from bounds_lib.analysis.devices import spectra_agree

    model, _ = write_tiny_model(tmp_path / "mixtral", "mixtral")
    dense = compute_spectra(model)
    monkeypatch.setattr(PAR, "memory_budget", lambda source: 1)  # nothing fits: every expert's unit lean
    lean = compute_spectra(model)
    assert lean.meta["parallel"]["units_factored_lean"] == dense.meta["parallel"]["units"]
    assert [(m.label(), m.head, m.expert, m.shape) for m in lean.matrices] == \
        [(m.label(), m.head, m.expert, m.shape) for m in dense.matrices]
    assert {m.expert for m in lean.matrices if m.matrix_type == "M_in"} == {0, 1, 2}
    for a, b in zip(dense.matrices, lean.matrices):
        assert spectra_agree(a.sigma, b.sigma, a.shape)[0], a.label()
