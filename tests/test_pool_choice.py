"""The default chooses a process pool only where it pays (issue 34): the cost model of
:func:`bounds_lib.analysis.pool.plan_pool`, the flop counts it rests on, the machine record it learns from,
and what ``run_units`` does with them (``jobs=0`` decides; ``jobs`` > 1 forces).

The speed itself is measured by ``benchmarks/bench_pool.py`` (no timed asserts here)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bounds_lib.analysis.pool as POOL
import bounds_lib.analysis.units as UNITS
from bounds_lib.checkpoints import detect_architecture, open_checkpoint
from bounds_lib.analysis.spectra import compute_spectra
from tiny_checkpoints import bert_encoder_weights, write_tiny_bert


#: meta.parallel reports the rate in GFLOP/s to two decimals: half a step, in flop/s
ROUNDING = 0.005e9 * 1.001


@pytest.fixture
def record(tmp_path, monkeypatch):
    f = tmp_path / "machine.json"
    monkeypatch.setenv("BOUNDS_LIB_MACHINE_RECORD", str(f))
    return f


@pytest.fixture
def bert_dir(tmp_path):
    return write_tiny_bert(tmp_path / "m", hidden=32, layers=2, heads=4, intermediate=64,
                           weights=bert_encoder_weights(hidden=32, intermediate=64, layers=2))


# --- the cost model -----------------------------------------------------------------------------


@pytest.mark.parametrize("flops, workers, busy, use", [
    (1e9, 2, 0.0, False),    # T1 = 1 s; pool 0.5 + 0.5 = 1.0 s: not sooner
    (1.02e9, 2, 0.0, False),  # T1 = 1.02 s; pool 1.01 s: sooner, but not by the margin (≤ 0.8·T1)
    (1.66e9, 2, 0.0, False),  # T1 = 1.66 s; pool 1.33 s > 0.8·1.66 = 1.328: just outside the margin
    (1.67e9, 2, 0.0, True),   # T1 = 1.67 s; pool 1.335 s ≤ 1.336: just inside
    (1e9, 2, 1.6, False),    # 1.6 busy on 2 cores: alone 2/2.6 of a core (1.3 s), a pool 4/3.6 (0.5 + 0.9 s)
    (4e9, 2, 1.6, True),     # the same machine, four times the work: 5.2 s alone, 0.5 + 3.6 = 4.1 ≤ 4.16 pooled
    (4e9, 2, 1.0, False),    # one busy core: the pool gets 4/3 of a core (0.5 + 3 = 3.5 s against 4 s): not clearly
    (40e9, 2, 1.0, True),    # ten times the work on that machine: 0.5 + 30 ≤ 0.8·40
    (4e9, 4, 2.0, True),     # 4 cores (patched), 2 busy → 4·4/6 cores' worth: 0.5 + 1.5 ≤ 0.8·4
    (1e12, 1, 0.0, False),   # one worker is never a pool
])
def test_plan_pool_is_the_stated_rule(monkeypatch, flops, workers, busy, use):
    cores = max(workers, 2)
    monkeypatch.setattr(POOL, "_cores", lambda: cores)
    got, cost = POOL.plan_pool(flops, workers, rate=(1e9, "given"), start=(0.5, "given"), busy=busy)
    worth = workers * min(1.0, cores / (workers + busy))  # fair shares of the cores
    serial = flops / 1e9 / min(1.0, cores / (1 + busy))
    assert got is use is (workers > 1 and 0.5 + flops / 1e9 / worth <= 0.8 * serial)
    assert cost["serial_estimate_s"] == pytest.approx(serial, abs=1e-3)
    assert cost["pool_estimate_s"] == pytest.approx(0.5 + flops / 1e9 / worth, abs=1e-3)
    assert cost["effective_workers"] == pytest.approx(worth, abs=0.005) and cost["worker_start_from"] == "given"
    assert cost["decision"].startswith(f"a pool of {workers}" if use else "in process")
    assert cost["margin"] == POOL.POOL_MARGIN == 0.8 and "≤ 0.8×" in cost["decision"]
    assert cost["busy_from"] == "given"


def test_plan_pool_reads_the_busy_cores_when_not_given(monkeypatch):
    asked = []
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    monkeypatch.setattr(POOL, "_busy_cores", lambda settled: asked.append(settled) or (1.25, 5))
    _, cost = POOL.plan_pool(1e9, 2, rate=(1e9, "r"), start=(0.5, "s"))
    assert cost["busy_cores"] == 1.25 and cost["busy_from"].startswith("processes runnable now")
    assert cost["busy_from"].endswith(" (_busy_cores): 5 read(s)")
    # the first read settles it where no pool is chosen up to 2 more busy: T1 = 1 s, s = 0.5 s, 2 workers
    (settled,) = asked
    assert settled(1.0) and not settled(2.0)  # a pool of 2 beside 4 busy: 0.5 + 1.5 ≤ 0.8·2.5, beside 3 not


# --- how many cores other processes keep busy now --------------------------------------------------


def _loadavg(tmp_path, monkeypatch, *lines):
    """Successive reads of a stand-in /proc/loadavg give ``lines`` in turn (the last one repeated)."""
    f = tmp_path / "loadavg"
    monkeypatch.setattr(POOL, "_LOADAVG", str(f))
    reads = iter(lines)
    real_open = open

    def fake_open(path, *a, **kw):
        if path == str(f):
            f.write_text(next(reads, lines[-1]))
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(POOL.time, "sleep", lambda s: None)
    monkeypatch.setattr(POOL.os, "getloadavg", lambda: (9.0, 4.0, 2.0))  # a lagging average, never read here


def test_busy_cores_are_the_processes_runnable_now_less_this_one(tmp_path, monkeypatch):
    # a one-minute average of 7.5 after a burst, but 1 other process running now (2 runnable, this one among them)
    _loadavg(tmp_path, monkeypatch, "7.50 3.00 1.00 2/412 31337\n")
    assert POOL._busy_cores() == (1.0, 5)


def test_busy_cores_take_the_median_of_five_reads(tmp_path, monkeypatch):
    _loadavg(tmp_path, monkeypatch, *(f"0.1 0.1 0.1 {r}/400 1\n" for r in (9, 1, 3, 1, 2)))
    assert POOL._busy_cores() == (1.0, 5)  # median 2, less this process (9 in one read is a spike, not a load)


def test_busy_cores_are_0_when_only_this_process_runs(tmp_path, monkeypatch):
    _loadavg(tmp_path, monkeypatch, "3.9 0.1 0.1 1/400 1\n")
    assert POOL._busy_cores() == (0.0, 5)


@pytest.mark.parametrize("text", ["", "0.1 0.1 0.1\n", "0.1 0.1 0.1 x/4 1\n"])
def test_busy_cores_fall_back_to_the_load_average_without_a_count(tmp_path, monkeypatch, text):
    _loadavg(tmp_path, monkeypatch, text)
    assert POOL._busy_cores() == (9.0, 0)


def test_busy_cores_without_proc_nor_load_average_are_0(tmp_path, monkeypatch):
    monkeypatch.setattr(POOL, "_LOADAVG", str(tmp_path / "missing"))

    def no_loadavg():
        raise OSError("no load average")

    monkeypatch.setattr(POOL.os, "getloadavg", no_loadavg)
    assert POOL._busy_cores() == (0.0, 0)


def test_one_read_is_the_answer_where_it_settles_the_decision(tmp_path, monkeypatch):
    slept, asked = [], []
    _loadavg(tmp_path, monkeypatch, *(f"0.1 0.1 0.1 {r}/400 1\n" for r in (2, 9, 9, 9, 9)))
    monkeypatch.setattr(POOL.time, "sleep", slept.append)
    assert POOL._busy_cores(lambda b: asked.append(b) or True) == (1.0, 1) and slept == [] and asked == [1.0]
    assert POOL._busy_cores(lambda b: False) == (8.0, 5)  # not settled: every read (median of 2, 9, 9, 9, 9)
    assert slept == [POOL._RUNNABLE_GAP_S] * 4
    assert POOL._busy_cores(None) == (8.0, 5)


def _no_pool_anywhere(work, start, workers, cores, upto, points=4001):
    return not any(POOL._rule(work, start, workers, float(b), cores)[0] for b in np.linspace(0.0, upto, points))


def test_out_of_reach_is_the_rule_on_every_busy_count_up_to_the_bound():
    """Randomized: the two ends decide as a dense grid of counts does (the pool's lead is largest at an end)."""
    rng = np.random.default_rng(52)
    agree = reached = 0
    for _ in range(400):
        work, start = float(rng.uniform(0.05, 5)), float(rng.uniform(0.05, 3))
        workers, cores = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        upto = float(rng.uniform(0, 12))
        got = POOL._out_of_reach(work, start, workers, cores, upto)
        assert got == _no_pool_anywhere(work, start, workers, cores, upto), (work, start, workers, cores, upto)
        agree += 1
        reached += not got
    assert agree == 400 and 40 < reached < 360  # both answers are drawn often


def test_out_of_reach_on_the_reference_machines_minilm_numbers(tmp_path, monkeypatch):
    """all-MiniLM-L6-v2 on 2 cores: 0.73 s of SVDs. With a worker's start-up of 0.25 s a pool of 2 is never
    chosen beside up to 2 busy but is beside 3 (0.25 + 0.73·5/4 ≤ 0.8·0.73·2); with 1.5 s, not before 15."""
    assert POOL._out_of_reach(0.73, 0.25, 2, 2, 2.0) and not POOL._out_of_reach(0.73, 0.25, 2, 2, 3.0)
    assert POOL._out_of_reach(0.73, 1.5, 2, 2, 14.0) and not POOL._out_of_reach(0.73, 1.5, 2, 2, 15.0)
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    _loadavg(tmp_path, monkeypatch, "0.5 0.5 0.5 1/400 1\n")  # idle: one read
    use, cost = POOL.plan_pool(0.73e9, 2, rate=(1e9, "r"), start=(0.25, "s"))
    assert not use and cost["busy_cores"] == 0.0 and cost["busy_from"].endswith("1 read(s); no pool up to 2 more busy")
    (tmp_path / "b").mkdir()
    _loadavg(tmp_path / "b", monkeypatch, "0.5 0.5 0.5 2/400 1\n")  # one busy: 3 is within reach, every read
    assert "5 read(s)" in POOL.plan_pool(0.73e9, 2, rate=(1e9, "r"), start=(0.25, "s"))[1]["busy_from"]


def test_busy_cores_read_this_machine():
    busy, reads = POOL._busy_cores()
    assert 0.0 <= busy < 10_000 and reads == 5


def test_plan_pool_states_every_number_it_used():
    _, cost = POOL.plan_pool(2e9, 2, rate=(4e9, "r"), start=(0.25, "s"), busy=0.0)
    assert {"svd_flops", "svd_rate_GFLOPs", "svd_rate_from", "serial_estimate_s", "busy_cores", "effective_workers",
            "worker_start_s", "worker_start_from", "workers", "pool_estimate_s", "decision"} <= set(cost)
    assert (cost["svd_rate_GFLOPs"], cost["worker_start_s"], cost["svd_flops"]) == (4.0, 0.25, 2e9)


def test_dense_unit_flops_are_golub_kahan(tmp_path):
    folder = write_tiny_bert(tmp_path / "b", hidden=32, layers=1, heads=4, intermediate=96,
                             weights=bert_encoder_weights(hidden=32, intermediate=96, layers=1))
    src = open_checkpoint(folder)
    spec = detect_architecture(src)
    for part in ("M_in", "M_out"):  # 32 × 96 either way round
        assert UNITS.unit_flops(spec, part, source=src) == 4 * 96 * 32**2 - 4 * 32**3 / 3
    N, H, d = 32, 4, 8
    assert UNITS.unit_flops(spec, "attention") == 2 * H * (4 * N * d * d + 3 * d**3)
    assert UNITS.unit_flops(spec, "attention", entrywise=True) == 2 * H * (4 * N * d * d + 3 * d**3 + 2 * N * N * d)
    assert UNITS.unit_flops(spec, "attention", mode="paper") == 2 * H * (2 * N * N * d + 8 * N**3 / 3)


def test_gated_ffn_flops_count_both_halves(tmp_path):
    spec = detect_architecture(open_checkpoint(_llama(tmp_path)))
    N, F = spec.hidden, spec.d_ff
    assert UNITS.unit_flops(spec, "M_in") == 4 * (2 * F) * N**2 - 4 * N**3 / 3  # [G | U] is N × 2F


def _llama(tmp_path):
    from safetensors.numpy import save_file

    N, H, Hk, F = 16, 4, 2, 24
    d = N // H
    rng = np.random.default_rng(0)
    t = {}
    for name, shape in (("self_attn.q_proj", (H * d, N)), ("self_attn.k_proj", (Hk * d, N)),
                        ("self_attn.v_proj", (Hk * d, N)), ("self_attn.o_proj", (N, H * d)),
                        ("mlp.gate_proj", (F, N)), ("mlp.up_proj", (F, N)), ("mlp.down_proj", (N, F))):
        t[f"model.layers.0.{name}.weight"] = rng.standard_normal(shape).astype(np.float32)
    folder = tmp_path / "llama"
    folder.mkdir()
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": N, "num_hidden_layers": 1, "num_attention_heads": H,
        "num_key_value_heads": Hk, "intermediate_size": F, "hidden_act": "silu"}))
    return folder


# --- the machine record -------------------------------------------------------------------------


def test_the_machine_record_keeps_the_last_ten_and_its_medians_are_used(record):
    assert POOL.machine_record() == {}
    assert POOL.worker_start_seconds() == (POOL.WORKER_START_S, POOL.worker_start_seconds()[1])
    for x in range(1, 13):
        POOL._record(worker_start_s=x / 10, svd_rate=x * 1e9)
    r = POOL.machine_record()
    assert r["worker_start_s"] == [x / 10 for x in range(3, 13)]
    assert r["svd_rate"] == [x * 1e9 for x in range(3, 13)]
    s, where = POOL.worker_start_seconds()
    assert s == pytest.approx(np.median([x / 10 for x in range(3, 13)])) and "median of the last 10" in where
    rate, where = POOL.svd_rate()
    assert rate == pytest.approx(7.5e9) and "measured on this machine" in where


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"other/1 cores": {}}', '{"%s": {"svd_rate": "x"}}'])
def test_a_broken_record_is_an_empty_one(record, text):
    record.write_text(text.replace("%s", POOL._machine_key()))
    assert POOL.machine_record() == {}
    assert POOL.worker_start_seconds()[0] == POOL.WORKER_START_S
    POOL._record(worker_start_s=0.7)  # and a write replaces it with a good one
    assert POOL.machine_record()["worker_start_s"] == [0.7]


def test_an_unwritable_record_is_not_an_error(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("BOUNDS_LIB_MACHINE_RECORD", str(tmp_path / "a-file" / "machine.json"))  # under a file
    POOL._record(svd_rate=1e9)  # best effort: nothing raised
    assert POOL.machine_record() == {}


def test_without_a_record_the_rate_is_measured_now(record, monkeypatch):
    monkeypatch.setattr(POOL, "_RATE", [])
    rate, where = POOL.svd_rate()
    assert 1e7 < rate < 1e13 and "timed now" in where
    assert POOL.svd_rate()[0] == rate  # once per process


# --- what run_units does with it ------------------------------------------------------------------


def test_jobs_0_stays_in_process_when_the_pool_would_not_pay(bert_dir, record, monkeypatch):
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    monkeypatch.setattr(POOL, "_busy_cores", lambda needs: (0.0, 5))
    POOL._record(svd_rate=1e10, worker_start_s=0.5)  # a tiny model: microseconds of work against 0.5 s
    sp = compute_spectra(bert_dir, jobs=0)
    p = sp.meta["parallel"]
    assert p["backend"] == "in process" and p["workers"] == 1 and p["chosen"]["limited_by"] == ["cost"]
    assert p["chosen"]["cost"]["decision"].startswith("in process")
    assert "svd_rate_measured_GFLOPs" not in p or p["svd_rate_measured_GFLOPs"] > 0


@pytest.mark.skipif(POOL._cores() < 2, reason="a pool needs two cores")
def test_jobs_0_takes_the_pool_when_it_pays_and_measures_the_start_up(bert_dir, record, monkeypatch):
    monkeypatch.setattr(POOL, "_busy_cores", lambda needs: (0.0, 5))
    monkeypatch.setattr(POOL, "svd_rate", lambda: (1.0, "a machine that needs a second per flop"))
    here = compute_spectra(bert_dir, jobs=1)
    sp = compute_spectra(bert_dir, jobs=0)
    p = sp.meta["parallel"]
    assert p["backend"] == "processes" and p["workers"] == 2
    assert p["chosen"]["cost"]["decision"].startswith("a pool of 2")
    assert 0 < p["worker_start_measured_s"] < 120
    # meta.parallel reports the start-up to three decimals (half a step off at most), the record to four digits
    assert POOL.machine_record()["worker_start_s"][-1] == pytest.approx(p["worker_start_measured_s"], rel=1e-3,
                                                                        abs=0.0005 * 1.001)
    for a, b in zip(here.matrices, sp.matrices):
        np.testing.assert_array_equal(a.sigma, b.sigma)


@pytest.mark.skipif(POOL._cores() < 2, reason="a pool needs two cores")
def test_jobs_2_forces_the_pool_whatever_the_cost(bert_dir, record, monkeypatch):
    POOL._record(svd_rate=1e15, worker_start_s=100.0)  # the cost model would never choose a pool
    p = compute_spectra(bert_dir, jobs=2).meta["parallel"]
    assert p["backend"] == "processes" and "cost" not in p["chosen"]


def test_an_in_process_run_records_the_rate_its_units_ran_at(bert_dir, record):
    p = compute_spectra(bert_dir, jobs=1).meta["parallel"]
    if "svd_rate_measured_GFLOPs" in p:  # only when the units took measurable time (> 0.05 s)
        assert POOL.machine_record()["svd_rate"][-1] == pytest.approx(p["svd_rate_measured_GFLOPs"] * 1e9, rel=0.01,
                                                                     abs=ROUNDING)
    else:
        assert POOL.machine_record().get("svd_rate", []) == []


def test_the_rate_is_recorded_from_units_that_took_time(tmp_path, record):
    folder = write_tiny_bert(tmp_path / "big", hidden=256, layers=2, heads=4, intermediate=2048,
                             weights=bert_encoder_weights(hidden=256, intermediate=2048, layers=2))
    p = compute_spectra(folder, jobs=1, entrywise=False).meta["parallel"]
    assert p["svd_rate_measured_GFLOPs"] > 0
    assert POOL.machine_record()["svd_rate"] == [pytest.approx(p["svd_rate_measured_GFLOPs"] * 1e9, rel=0.01,
                                                              abs=ROUNDING)]


def test_the_cli_records_the_asked_jobs_and_the_choice(bert_dir, tmp_path, record):
    from bounds_lib.cli import main

    out = tmp_path / "r.json"
    assert main(["analyze", str(bert_dir), "--json", str(out), "--quiet", "--no-progress"]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["jobs"] == 0
    chosen = meta["parallel"]["chosen"]
    assert chosen["workers"] == meta["parallel"]["workers"]
    if POOL._cores() > 1:
        assert "cost" in chosen


# --- from the mutation run of the new functions (tests/MUTATION.md) --------------------------------


def test_the_report_rounds_as_stated(monkeypatch):
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    _, cost = POOL.plan_pool(1234567890.0, 2, rate=(4.123456e9, "r"), start=(0.123456, "s"), busy=0.98765)
    assert (cost["svd_rate_GFLOPs"], cost["busy_cores"], cost["worker_start_s"]) == (4.12, 0.99, 0.123)
    assert cost["serial_estimate_s"] == round(1234567890.0 / 4.123456e9, 3)  # alone: a whole core (2 / 1.99 > 1)
    worth = 2 * 2 / 2.98765  # two workers beside 0.99 busy on 2 cores
    assert cost["pool_estimate_s"] == round(0.123456 + 1234567890.0 / 4.123456e9 / worth, 3)
    assert cost["effective_workers"] == round(worth, 2) == 1.34


def test_the_calibration_times_three_values_only_svds_of_a_512_by_256_matrix(record, monkeypatch):
    calls = []
    real_svd = np.linalg.svd

    def svd(A, compute_uv=True, **k):
        calls.append((A.shape, compute_uv))
        return real_svd(A, compute_uv=compute_uv, **k)

    clock = iter(np.arange(0.0, 100.0, 0.01))
    monkeypatch.setattr(POOL, "_RATE", [])
    monkeypatch.setattr(POOL.np.linalg, "svd", svd)
    monkeypatch.setattr(POOL.time, "thread_time", lambda: float(next(clock)))  # CPU seconds, not wall
    monkeypatch.setattr(POOL.time, "perf_counter", lambda: 1 / 0)
    rate, where = POOL.svd_rate()
    assert calls == [((512, 256), False)] * 3
    assert rate == pytest.approx((4 * 512 * 256**2 - 4 * 256**3 / 3) / 0.01, rel=1e-9)
    assert where == "a 512×256 SVD timed now (no run measured on this machine yet)"


def test_the_record_keeps_only_plausible_values_and_makes_its_folder(tmp_path, monkeypatch):
    f = tmp_path / "new" / "nested" / "machine.json"
    monkeypatch.setenv("BOUNDS_LIB_MACHINE_RECORD", str(f))
    POOL._record(svd_rate=2e9)
    assert f.is_file()
    data = json.loads(f.read_text())
    data[POOL._machine_key()]["svd_rate"] += [0.0, -1.0, 1e15, 9.9e14]
    f.write_text(json.dumps(data))
    assert POOL.machine_record()["svd_rate"] == [2e9, 9.9e14]
    assert POOL.worker_start_seconds()[1] == ("bounds_lib.analysis.pool.WORKER_START_S "
                                            "(not yet measured on this machine)")




@pytest.mark.parametrize("threads, from_cpu", [(1, True), (2, False)])
def test_the_rate_is_flops_per_cpu_second_of_the_thread_that_ran_the_units(tmp_path, record, monkeypatch, threads,
                                                                          from_cpu):
    """A run beside a busy process takes about twice the wall time at the same CPU time: the rate recorded is
    the core's, from CPU seconds (issue 52), where BLAS ran on the unit's one thread; wall seconds otherwise
    (BLAS helper threads' CPU time is not the unit thread's)."""
    import bounds_lib.analysis.parallel as PAR

    if threads > POOL._cores():
        pytest.skip("two BLAS threads need two cores")
    real, seen = PAR.run_unit, []

    def loaded(task, *a, **kw):  # the same unit on a machine where another process takes half of the core
        res = real(task, *a, **kw)
        res["seconds"] = 2 * res["cpu_seconds"] + 0.5
        seen.append((task, res["seconds"], res["cpu_seconds"]))
        return res

    monkeypatch.setattr(PAR, "run_unit", loaded)
    folder = write_tiny_bert(tmp_path / "big", hidden=256, layers=2, heads=4, intermediate=2048,
                             weights=bert_encoder_weights(hidden=256, intermediate=2048, layers=2))
    sp = compute_spectra(folder, jobs=1, entrywise=False, threads=threads)
    src = open_checkpoint(folder)
    arch = detect_architecture(src)
    flops = sum(UNITS.unit_flops(arch, t.part, "clean", source=src, layer=t.layer) for t, *_ in seen if not t.lean)
    secs = sum((c if from_cpu else w) for t, w, c in seen if not t.lean)
    assert sp.meta["parallel"]["blas_threads_per_worker"] == threads
    assert POOL.machine_record()["svd_rate"] == [pytest.approx(flops / secs, rel=1e-3)]
