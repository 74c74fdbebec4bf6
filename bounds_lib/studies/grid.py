"""Training grids of Chapters 7–8: presets, configurations, and the runner that trains them.

The committed results files (:mod:`bounds_lib.studies.results`) were each produced by one documented command::

    python -m bounds_lib.studies.grid --out bounds_lib/data/trained_grid.json
    python -m bounds_lib.studies.grid --out bounds_lib/data/trained_common_loss.json --preset common-loss --jobs 2
    python -m bounds_lib.studies.grid --out bounds_lib/data/spectrum_study.json --preset study

(the exact command, library versions, measured cost and provenance notes are in each file's metadata,
which spell the command ``python -m bounds_lib.experiments``: the old name of this command line;
:func:`bounds_lib.studies.results.rerun_command` writes it as it is typed today; the command line is :func:`main`).
``--small`` runs a tiny grid of the preset with the same format in seconds (the tests do that).
``--preset common-loss`` trains every model to a common training loss (Jiang et al. 2020's stopping
criterion; ``--stop-loss X`` and ``--max-steps K`` override its target and budget; such rows also hold
``steps_taken`` and ``reached_target``); ``--preset study`` is the spectrum-shaping study of Chapter 8
(weight decay, nuclear-norm penalty, rank-r factorisation, plain control; test inputs disjoint from the
training inputs, per-example test results and the spectra before and after training in every row).

Running a grid: ``--jobs J`` trains in J worker processes, ``--scheduler tcp://HOST:PORT`` dispatches the
configurations through a Dask distributed cluster (extra ``grid``); each task trains one config on one
torch thread, so the rows are the same whatever runs them (tested). A progress bar (tqdm, on stderr;
``TQDM_DISABLE=1`` turns it off) counts the trained configurations, and every finished row is appended
to ``OUT.partial.jsonl``; rerunning the same command after an interruption resumes from it (a last
line half written when the process was killed is dropped: :func:`~bounds_lib.studies.results.reused_rows`).
``--reuse FILE…`` copies rows whose configuration is already in earlier results files instead of
retraining them (training is deterministic, so this changes no number; a stop-loss run that reached
its target within a smaller budget is also reused under a larger one), ``--select KEY=V1,V2`` restricts
the grid, ``--weights-dir DIR`` also saves every model as a checkpoint
(:func:`bounds_lib.studies.results.save_model`), ``--merge FILE…`` concatenates complete results files, ``--note
TEXT`` stores provenance.

Each row holds the proxies of :func:`bounds_lib.analysis.single_head.single_head_proxies` on the trained weights.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .. import __version__
from ..theory.norms import singular_values
from .grid_cli import build_parser, preset_key, write_results
from .replication import REPLICATION_PRESETS, cost_note, replication_configs
from .results import GRID_COMMAND, RESULTS_SCHEMA, ResultsError, merge_results, reused_rows, save_model
from ..theory.model import SINGLE_HEAD_MATRIX_TYPES
from ..analysis.single_head import PROXY_NAMES, single_head_proxies
from ..core.validation import check_scalar

__all__ = [
    "result_row",
    "FULL_GRID",
    "SMALL_GRID",
    "COMMON_LOSS_GRID",
    "SMALL_COMMON_LOSS_GRID",
    "STUDY_GRID",
    "SMALL_STUDY_GRID",
    "ROBUST_GRID",
    "SMALL_ROBUST_GRID",
    "ROBUST_LARGE_GRID",
    "PRESETS",
    "parse_select",
    "select_configs",
    "study_configs",
    "robust_configs",
    "grid_configs",
    "run_config",
    "run_grid",
    "main",
]

#: The full grid of the committed results, 80 models. Summed training time 46 min measured on a shared
#: 2-core machine (one torch thread per process, other jobs running); the larger models dominate.
FULL_GRID = dict(depths=(1, 2, 4, 8), widths=(16, 32, 64, 128), n_trains=(64, 256, 1024),
                 random_label_n=(256, 1024), kind="parity", T=16, s=3, steps=200, lr=3e-3, n_test=4096,
                 seed=0)
#: A tiny grid with the same format (seconds), used by the tests.
SMALL_GRID = dict(depths=(1, 2), widths=(8, 16), n_trains=(32,), random_label_n=(32,), kind="parity",
                  T=16, s=3, steps=15, lr=3e-3, n_test=256, seed=0)
#: The common-loss control (``--preset common-loss``): every model is trained until its full-batch
#: training loss first reaches ``stop_loss`` (Jiang et al. 2020's stopping criterion), at most ``steps``
#: Adam steps; models that do not get there are kept in the file with ``reached_target = False``.
#: ``seeds`` repeats the grid once per seed (the seed also draws the task's support and embedding).
COMMON_LOSS_GRID = dict(depths=(1, 2, 4), widths=(16, 32, 64), n_trains=(64, 256, 1024),
                        random_label_n=(64, 256), kind="parity", T=16, s=2, steps=3000, lr=3e-3,
                        n_test=4096, seeds=(0, 1, 2), stop_loss=0.05)
#: A tiny common-loss grid with the same format (seconds), used by the tests.
SMALL_COMMON_LOSS_GRID = dict(depths=(1, 2), widths=(8,), n_trains=(32,), random_label_n=(32,), kind="parity",
                              T=8, s=2, steps=200, lr=1e-2, n_test=256, seeds=(0, 1), stop_loss=0.2)
#: The grids ``--preset`` names (``--small`` picks the ``-small`` twin); the study presets are added below.
PRESETS = {"full": FULL_GRID, "small": SMALL_GRID, "common-loss": COMMON_LOSS_GRID,
           "common-loss-small": SMALL_COMMON_LOSS_GRID}


def parse_select(items) -> dict:
    """``["random_labels=true", "L=2,4"]`` → ``{"random_labels": {True}, "L": {2, 4}}`` (for ``--select``).

    Raises :class:`ValueError` for an item that is not ``KEY=V1,V2`` with ``KEY`` a field of
    :class:`~bounds_lib.studies.training.TrainConfig`.

    >>> parse_select(["random_labels=true", "L=2,4"]) == {"random_labels": {True}, "L": {2, 4}}
    True
    """
    from .training import TrainConfig

    fields = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out = {}
    for item in items or ():
        key, sep, vals = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--select takes KEY=V1,V2 with KEY a TrainConfig field ({', '.join(fields)}), "
                             f"got {item!r}")
        conv = []
        for v in vals.split(","):
            if v.lower() in ("true", "false"):
                conv.append(v.lower() == "true")
            else:
                try:
                    conv.append(int(v))
                except ValueError:
                    try:
                        conv.append(float(v))
                    except ValueError:
                        conv.append(v)
        out[key] = set(conv)
    return out


def select_configs(configs, select: dict) -> list:
    """The configs whose every field named in ``select`` takes one of the listed values."""
    return [c for c in configs if all(getattr(c, k) in vs for k, vs in select.items())]


#: The spectrum-shaping study of Chapter 8 (``--preset study``): the paper's single-head architecture
#: trained for a fixed number of full-batch Adam steps with one spectrum-shaping choice at a time —
#: decoupled weight decay, a nuclear-norm penalty, a rank-r factorisation — or plainly (the control),
#: on two task families (parity of 2 of 16 bits; a dense halfspace on all 16 bits), two sample sizes
#: and three seeds, test inputs disjoint from the training inputs. Sized from probe runs of 4–35 s each
#: on the shared 2-core machine (the nuclear-norm penalty costs an SVD per matrix and step).
STUDY_GRID = dict(tasks=({"kind": "parity", "T": 16, "s": 2}, {"kind": "halfspace", "T": 16, "s": 16}),
                  depths=(2,), widths=(16,), n_trains=(64, 256), seeds=(0, 1, 2), steps=600, lr=3e-3,
                  n_test=2048, disjoint_test=True,
                  variants=({}, {"weight_decay": 1.0}, {"weight_decay": 3.0}, {"nuclear": 3e-4},
                            {"nuclear": 1e-3}, {"nuclear": 3e-3}, {"rank": 1}, {"rank": 4}))
#: A tiny study grid with the same format (seconds), used by the tests.
SMALL_STUDY_GRID = dict(tasks=({"kind": "parity", "T": 8, "s": 2}, {"kind": "halfspace", "T": 8, "s": 8}),
                        depths=(1,), widths=(4,), n_trains=(16,), seeds=(0, 1), steps=8, lr=1e-2, n_test=32,
                        disjoint_test=True, variants=({}, {"weight_decay": 1.0}, {"nuclear": 1e-3}, {"rank": 1}))
PRESETS.update({"study": STUDY_GRID, "study-small": SMALL_STUDY_GRID})

#: The robust study of Chapter 9 (``--preset robust``; pre-registered in
#: ``bounds_lib/data/study_preregistration.md``): the planted-spectrum teacher task on T = 16 bits (exact
#: population error over all 2^16 inputs), a full factorial over six axes at two levels each (``axes``,
#: at ``n_train``) plus a sample-size family at the ``base`` configuration (``family_n``, both teacher
#: ranks), every model trained to the common loss ``stop_loss`` (at most ``steps`` Adam steps).
ROBUST_GRID = dict(task={"kind": "teacher", "T": 16, "s": 1}, n_train=128,
                   axes={"L": (1, 2), "N": (16, 32), "lr": (0.01, 0.03), "weight_decay": (0.0, 0.1),
                         "label_noise": (0.0, 0.05), "teacher_rank": (1, 0)},
                   base={"L": 1, "N": 16, "lr": 0.03, "weight_decay": 0.0, "label_noise": 0.0},
                   family_n=(64, 128, 256, 512), seeds=(0, 1), steps=3000, stop_loss=0.05)
#: A tiny robust grid with the same format (seconds), used by the tests.
SMALL_ROBUST_GRID = dict(task={"kind": "teacher", "T": 8, "s": 1}, n_train=16,
                         axes={"L": (1,), "N": (4,), "lr": (0.03,), "weight_decay": (0.0, 0.1),
                               "label_noise": (0.0,), "teacher_rank": (1, 0)},
                         base={"L": 1, "N": 4, "lr": 0.03, "weight_decay": 0.0, "label_noise": 0.0},
                         family_n=(16, 32), seeds=(0, 1), steps=60, stop_loss=0.3)
#: The larger replication of the robust study, configured for a cluster (``--preset robust-large
#: --scheduler tcp://HOST:PORT``; not run for the book): wider models, four times the samples, a longer
#: sample-size family and five seeds — 5 × (64 + 10) = 370 models, days of one core, hours on a cluster.
ROBUST_LARGE_GRID = dict(task={"kind": "teacher", "T": 16, "s": 1}, n_train=512,
                         axes={"L": (1, 2), "N": (32, 64), "lr": (0.01, 0.03), "weight_decay": (0.0, 0.1),
                               "label_noise": (0.0, 0.05), "teacher_rank": (1, 0)},
                         base={"L": 1, "N": 32, "lr": 0.03, "weight_decay": 0.0, "label_noise": 0.0},
                         family_n=(128, 256, 512, 1024, 2048, 4096), seeds=(0, 1, 2, 3, 4), steps=6000,
                         stop_loss=0.05)
PRESETS.update({"robust": ROBUST_GRID, "robust-small": SMALL_ROBUST_GRID, "robust-large": ROBUST_LARGE_GRID,
                "robust-large-small": SMALL_ROBUST_GRID})
#: The pre-registered replication of Chapter 9 and its digits task (:mod:`bounds_lib.studies.replication`).
PRESETS.update(REPLICATION_PRESETS)


def robust_configs(spec: dict) -> list:
    """All configs of a robust-study spec: per seed, the factorial over ``axes`` at ``n_train``, then the
    sample-size family (``base`` with every ``family_n`` and teacher rank; configs already in the
    factorial are not repeated). The test set of the teacher task is all ``2^T`` inputs.

    >>> configs = robust_configs(SMALL_ROBUST_GRID)
    >>> len(configs), sorted({c.n_train for c in configs})
    (12, [16, 32])
    """
    import itertools

    from .training import TrainConfig

    keys = list(spec["axes"])
    task = dict(spec["task"])
    common = dict(**task, n_test=2 ** task["T"], steps=spec["steps"], stop_loss=spec["stop_loss"])
    out = []
    for seed in spec["seeds"]:
        seen = set()
        for values in itertools.product(*(spec["axes"][k] for k in keys)):
            c = TrainConfig(n_train=spec["n_train"], seed=seed, **dict(zip(keys, values)), **common)
            seen.add(c)
            out.append(c)
        for n in spec["family_n"]:
            for r in spec["axes"]["teacher_rank"]:
                c = TrainConfig(n_train=n, seed=seed, teacher_rank=r, **spec["base"], **common)
                if c not in seen:
                    seen.add(c)
                    out.append(c)
    return out


def study_configs(spec: dict) -> list:
    """All configs of a study spec (``tasks`` × ``variants`` × ``n_trains`` × depths × widths × ``seeds``)."""
    from .training import TrainConfig

    out = []
    for seed in spec["seeds"]:
        for task in spec["tasks"]:
            for var in spec["variants"]:
                for n in spec["n_trains"]:
                    for L in spec["depths"]:
                        for N in spec["widths"]:
                            out.append(TrainConfig(L=L, N=N, n_train=n, seed=seed, steps=spec["steps"],
                                                   lr=spec["lr"], n_test=spec["n_test"],
                                                   disjoint_test=spec.get("disjoint_test", False),
                                                   **task, **var))
    return out


def grid_configs(spec: dict) -> list:
    """All :class:`~bounds_lib.studies.training.TrainConfig` of a grid spec (real labels, then random).

    A spec with ``stop_loss`` trains every model to that training loss, at most ``steps`` steps; one
    with ``seeds`` repeats the grid for each seed (in that order), otherwise its one ``seed`` is used.
    A study spec (with ``variants``) is expanded by :func:`study_configs`, a replication spec of Chapter 9
    (with ``teacher_seeds``) by :func:`bounds_lib.studies.replication.replication_configs`.

    Parameters
    ----------
    spec : dict
        A preset of :data:`PRESETS` (or a results file's ``metadata["grid"]``).

    Returns
    -------
    list of TrainConfig
        In the order the rows of the results file have.

    Raises
    ------
    KeyError
        The spec lacks a field of its kind of grid.
    TypeError, ValueError
        A configuration the spec describes is invalid (:class:`~bounds_lib.studies.training.TrainConfig`).

    Examples
    --------
    >>> configs = grid_configs(SMALL_GRID)
    >>> len(configs), configs[0].L, configs[-1].random_labels
    (8, 1, True)
    """
    from .training import TrainConfig

    if "variants" in spec:
        return study_configs(spec)
    if "teacher_seeds" in spec:
        return replication_configs(spec)
    if "axes" in spec:
        return robust_configs(spec)
    common = dict(kind=spec["kind"], T=spec["T"], s=spec["s"], steps=spec["steps"], lr=spec["lr"],
                  n_test=spec["n_test"], stop_loss=spec.get("stop_loss"))
    out = []
    for seed in spec.get("seeds", (spec.get("seed", 0),)):
        for rl, ns in ((False, spec["n_trains"]), (True, spec["random_label_n"])):
            for n in ns:
                for L in spec["depths"]:
                    for N in spec["widths"]:
                        out.append(TrainConfig(L=L, N=N, n_train=n, random_labels=rl, seed=seed, **common))
    return out


def run_config(config, weights_dir=None) -> dict:
    """Train one config, compute its proxies, optionally save its weights; return a results row.

    Parameters
    ----------
    config : TrainConfig
        The model to train (:func:`bounds_lib.studies.training.train`).
    weights_dir : path, optional
        Also save the trained model there (:func:`bounds_lib.studies.results.save_model`), in a folder named
        after the configuration (``row["weights_file"]``).

    Returns
    -------
    dict
        A row of a results file: ``config``, the train/test loss and 0-1 error with the gaps, the
        training time, the loss curve (every 10th value and the last), the proxies of
        :func:`bounds_lib.analysis.single_head.single_head_proxies`; with ``stop_loss`` also ``steps_taken`` and
        ``reached_target``; with ``disjoint_test`` (Chapter 8) the per-example test results and the
        singular values after and before training.

    Examples
    --------
    >>> from bounds_lib.studies.training import TrainConfig
    >>> row = run_config(TrainConfig(L=1, N=4, n_train=16, T=4, s=1, steps=3, n_test=16))
    >>> sorted(row)[:4], "B_ours_sum" in row["proxies"]
    (['config', 'gap_error', 'gap_loss', 'loss_curve_every_10'], True)
    """
    from .training import train

    res = train(config)
    row = result_row(res)
    if weights_dir is not None:
        import pathlib

        d = pathlib.Path(weights_dir)
        d.mkdir(parents=True, exist_ok=True)
        c = config
        name = f"L{c.L}_N{c.N}_n{c.n_train}_{'rand' if c.random_labels else 'real'}_s{c.seed}"
        save_model(res.model, d / name, meta={"config": config.as_dict()})
        row["weights_file"] = name
    return row


def result_row(res) -> dict:
    """The results row of a finished :func:`bounds_lib.studies.training.train` run (what :func:`run_config` stores).

    Examples
    --------
    >>> from bounds_lib.studies.training import TrainConfig, train
    >>> res = train(TrainConfig(L=1, N=4, n_train=16, T=4, s=1, steps=3, n_test=16))
    >>> result_row(res)["train_error"] == res.train_error
    True
    """
    config, model = res.config, res.model
    row = {"config": config.as_dict(), **res.metrics(), "seconds": res.seconds,
           "loss_curve_every_10": res.loss_curve[::10] + [res.loss_curve[-1]]}
    if config.stop_loss is not None:  # only then: rows of fixed-step grids keep their format
        row["steps_taken"] = res.steps_taken
        row["reached_target"] = res.reached_target
    row["proxies"] = single_head_proxies(model)
    if config.disjoint_test:  # rows of Chapter 8: per-example test results and the spectra
        row["n_test_dropped"] = res.n_test_overlap
        row["test_correct_hex"] = np.packbits(res.test_correct).tobytes().hex()
        row["singular_values"] = _spectra(model)
        row["init_singular_values"] = _spectra(_initial_model(config))
    if config.kind in ("teacher", "digits"):  # rows of Chapter 9: the clean error, spectra and the study's measures
        from .study import study_measures
        from .trained_report import corrected_report

        row["population_error_clean"] = res.clean_test_error
        row["singular_values"] = _spectra(model)
        row["study"] = study_measures(res)
        rep = corrected_report(row)
        row["study"]["log10_theta"] = rep.log_Theta / np.log(10.0)
        row["study"]["theta_gap_bound"] = rep.gap_bound
    return row


def _spectra(model) -> dict:
    return {a: [[float(x) for x in singular_values(getattr(b, f"W_{a}"), f"W_{a}")] for b in model.blocks]
            for a in SINGLE_HEAD_MATRIX_TYPES}


def _initial_model(config):
    """The model ``config`` starts training from (the trainer's seeded initialisation, float32), in NumPy."""
    from .torch_model import to_numpy
    from .training import initial_model

    return to_numpy(initial_model(config))


def _metadata(spec, argv, seconds):
    import torch

    return {"schema": RESULTS_SCHEMA, "command": f"{GRID_COMMAND} " + " ".join(argv), "grid": spec,
            "bounds_lib": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "machine": platform.machine(),
            "total_seconds": seconds, "dtype": "float32 training, float64 proxies",
            "proxies": list(PROXY_NAMES), "proxy_units": "log10"}


def _config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _one_thread():
    import torch

    torch.set_num_threads(1)


def _run_config_one_thread(args):
    _one_thread()
    return run_config(*args)


def _dispatch(configs, todo, weights_dir, jobs, scheduler, done) -> None:
    """Train ``configs[i]`` for every ``i`` in ``todo`` (in process, in ``jobs`` processes or through Dask);
    ``done(i, row)`` receives every finished row (in the order they finish)."""
    if scheduler is not None and todo:
        from ..analysis.cluster import SCHEDULER_TIMEOUT_S, dask_results, dask_session

        # on an error the caller's client cancels the pending configs; a client made here is closed
        with dask_session(scheduler, SCHEDULER_TIMEOUT_S, what="--scheduler",
                          hint="leave out --scheduler to train locally") as (client, futures):
            futures.update({client.submit(_run_config_one_thread, (configs[i], weights_dir), pure=False): i
                            for i in todo})
            for fut, row in dask_results(client, list(futures), timeout=SCHEDULER_TIMEOUT_S):
                done(futures[fut], row)
    elif jobs > 1 and len(todo) > 1:
        from concurrent.futures import as_completed

        from ..analysis.pool import process_pool

        # stops at once on an error or a signal; a worker that died is a ClusterError
        with process_pool(jobs, initializer=_one_thread,
                          died="a training worker process died (ended by a signal — most often the kernel's "
                               "out-of-memory killer); run with fewer --jobs") as pool:
            futures = {pool.submit(_run_config_one_thread, (configs[i], weights_dir)): i for i in todo}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
    else:
        for i in todo:
            done(i, run_config(configs[i], weights_dir))


def run_grid(spec: dict, weights_dir=None, argv=(), log=None, reuse=None, jobs: int = 1,
             select: dict | None = None, scheduler=None, progress=None) -> dict:
    """Run every config of ``spec`` (one torch thread each) and return ``{"metadata", "rows"}``.

    ``reuse``: an earlier results dict; rows whose config matches exactly are copied instead of
    retrained (training is deterministic, so a retrained row would be identical — a test checks
    this on a committed row). Their training time still counts in ``total_seconds``.
    ``jobs > 1`` trains in that many worker processes (one torch thread each, so every row is the
    one a single process would produce); rows keep the order of :func:`grid_configs`.
    ``scheduler`` (a ``tcp://host:port`` address or a ``distributed.Client``) dispatches the configs
    through Dask distributed instead (each task trains one config on one torch thread, so the rows are
    the same whatever runs them — a test compares a two-worker ``LocalCluster`` with the local path).
    ``progress``: a file to which every finished row is appended as one JSON line (``main`` passes
    ``OUT.partial.jsonl`` and reuses it on the next start, so an interrupted grid resumes).
    ``select`` (see :func:`parse_select`) restricts the grid to some configs.
    ``log``: a stream for a progress bar (tqdm; ``None``: no bar); ``main`` passes ``sys.stderr``.

    Returns
    -------
    dict
        ``{"metadata": {...}, "rows": [...]}`` in the format of :mod:`bounds_lib.studies.results` (the caller
        writes it; ``main`` adds ``select`` and ``note``).

    Raises
    ------
    TypeError, ValueError
        ``jobs`` is not an integer ``>= 1``, or a configuration of ``spec`` is invalid.
    RuntimeError
        ``scheduler`` is given but Dask distributed is not installed or the scheduler cannot be reached.

    Examples
    --------
    >>> spec = {**SMALL_STUDY_GRID, "variants": ({},), "seeds": (0,), "tasks": SMALL_STUDY_GRID["tasks"][:1]}
    >>> res = run_grid(spec)
    >>> res["metadata"]["n_rows"], res["metadata"]["backend"], res["metadata"]["schema"] == RESULTS_SCHEMA
    (1, 'in process', True)
    """
    jobs = check_scalar(jobs, "jobs (worker processes)", int, min_val=1)
    _one_thread()
    t0 = time.perf_counter()
    old = {}
    for r in (reuse or {}).get("rows", []):
        old[_config_key(r["config"])] = {k: v for k, v in r.items() if k != "weights_file"}
    reached = {}  # stop-loss rows that reached their target, keyed without the step budget
    for r in (reuse or {}).get("rows", []):
        if r.get("reached_target") and r["config"].get("stop_loss") is not None:
            reached[_config_key({k: v for k, v in r["config"].items() if k != "steps"})] = r
    configs = grid_configs(spec)
    if select:
        configs = select_configs(configs, select)
    rows, reused, reused_seconds = [None] * len(configs), 0, 0.0
    todo = []
    for i, cfg in enumerate(configs):
        d = cfg.as_dict()
        key = _config_key(d)
        short = _config_key({k: v for k, v in d.items() if k != "steps"})
        if key in old and weights_dir is None:
            rows[i] = old[key]
        elif (short in reached and weights_dir is None and d.get("stop_loss") is not None
              and reached[short]["steps_taken"] < d["steps"]):
            # training is deterministic and stops at the first step that reaches the target: a run that
            # reached it after k < budget steps is the same run under any budget > k
            rows[i] = {**reached[short], "config": d}
        else:
            todo.append(i)
            continue
        reused += 1
        reused_seconds += rows[i]["seconds"]

    # progress on ``log`` (stderr from the command line): a tqdm bar over the configs still to train, the
    # last finished row in its postfix; TQDM_DISABLE=1 turns it off (tqdm reads its defaults from TQDM_*)
    bar = tqdm(total=len(todo), file=log, desc="training", unit="model", **({} if log is not None else
                                                                             {"disable": True}))

    def done(i, row):
        rows[i] = row
        cfg = configs[i]
        extra = "" if cfg.stop_loss is None else f" steps={row['steps_taken']} reached={row['reached_target']}"
        bar.set_postfix_str(f"[{i + 1}] L={cfg.L} N={cfg.N} n={cfg.n_train} rand={cfg.random_labels} "
                            f"train_err={row['train_error']:.3f} test_err={row['test_error']:.3f}{extra}",
                            refresh=False)
        bar.update()
        if progress is not None:  # one JSON line per finished row: an interrupted grid resumes from it
            with open(progress, "a") as f:
                f.write(json.dumps(row) + "\n")

    try:
        _dispatch(configs, todo, weights_dir, jobs, scheduler, done)
    finally:
        bar.close()
    meta = _metadata(spec, list(argv), time.perf_counter() - t0 + reused_seconds)
    meta["reused_rows"] = reused
    meta["n_rows"] = len(rows)
    meta["backend"] = ("dask" if scheduler is not None else f"process pool ({jobs})" if jobs > 1 else "in process")
    meta["training_seconds_sum"] = float(sum(r["seconds"] for r in rows))
    if spec.get("stop_loss") is not None:
        meta["wall_seconds"] = time.perf_counter() - t0
        meta["jobs"] = jobs
        meta["stop_loss"] = spec["stop_loss"]
        meta["max_steps"] = spec["steps"]
        meta["n_reached"] = sum(bool(r["reached_target"]) for r in rows)
        meta["n_not_reached"] = len(rows) - meta["n_reached"]
        meta["steps_taken"] = [r["steps_taken"] for r in rows]
    return {"metadata": meta, "rows": rows}


def main(argv=None) -> int:
    """Command line: ``python -m bounds_lib.studies.grid --out FILE [--preset NAME] [--small] [--stop-loss X]
    [--max-steps K] [--jobs J] [--weights-dir DIR] [--reuse FILE…] [--note TEXT]``
    (the options: :func:`bounds_lib.studies.grid_cli.build_parser`)."""
    ap = build_parser(__doc__.splitlines()[0])
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    spec = json.loads(json.dumps(PRESETS[preset_key(args)]))  # tuples -> lists, as the file will hold them
    if args.stop_loss is not None:
        spec["stop_loss"] = args.stop_loss
    if args.max_steps is not None:
        spec["steps"] = args.max_steps
    if args.merge:
        result = merge_results(args.merge, argv)
        if args.note:
            result["metadata"]["note"] = args.note
        write_results(args.out, result)
        return 0
    progress = Path(args.out + ".partial.jsonl")
    try:
        reuse = reused_rows(args.reuse or (), progress)
    except ResultsError as e:
        ap.exit(1, f"{ap.prog}: error: {e}\n")
    try:
        select = parse_select(args.select)
    except ValueError as e:
        ap.error(str(e))
    if "teacher_seeds" in spec:  # the replication's presets: the estimated cost before any training
        print(cost_note(spec, select, args.jobs), file=sys.stderr)
    try:
        result = run_grid(spec, args.weights_dir, argv, log=sys.stderr, reuse=reuse, jobs=args.jobs, select=select,
                          scheduler=args.scheduler, progress=progress)
    except (RuntimeError, TypeError, ValueError) as e:  # an unreachable scheduler, a bad --jobs or grid
        ap.exit(2, f"{ap.prog}: error: {e}\n")
    if select:
        result["metadata"]["select"] = {k: sorted(v, key=str) for k, v in select.items()}
    if args.note:
        result["metadata"]["note"] = args.note
    write_results(args.out, result)
    progress.unlink(missing_ok=True)
    print(f"wrote {len(result['rows'])} rows to {args.out} in {result['metadata']['total_seconds']:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
