"""Train grids of the paper's Transformers and measure every proxy against the real gap (Chapters 7–8).

The committed results files live in ``bounds_lib/data`` (package data; chapters read them with
:func:`load_results`). Each was produced by one documented command::

    python -m bounds_lib.experiments --out bounds_lib/data/trained_grid.json
    python -m bounds_lib.experiments --out bounds_lib/data/trained_common_loss.json --preset common-loss --jobs 2
    python -m bounds_lib.experiments --out bounds_lib/data/spectrum_study.json --preset study

(the exact command, library versions, measured cost and provenance notes are in each file's metadata).
``--small`` runs a tiny grid of the preset with the same format in seconds (the tests do that).
``--preset common-loss`` trains every model to a common training loss (Jiang et al. 2020's stopping
criterion; ``--stop-loss X`` and ``--max-steps K`` override its target and budget; such rows also hold
``steps_taken`` and ``reached_target``); ``--preset study`` is the spectrum-shaping study of Chapter 8
(weight decay, nuclear-norm penalty, rank-r factorisation, plain control; test inputs disjoint from the
training inputs, per-example test results and the spectra before and after training in every row).

Running a grid: ``--jobs J`` trains in J worker processes, ``--scheduler tcp://HOST:PORT`` dispatches the
configurations through a Dask distributed cluster (extra ``grid``); each task trains one config on one
torch thread, so the rows are the same whatever runs them (tested). Every finished row is appended to
``OUT.partial.jsonl``; rerunning the same command after an interruption resumes from it.
``--reuse FILE…`` copies rows whose configuration is already in earlier results files instead of
retraining them (training is deterministic, so this changes no number; a stop-loss run that reached
its target within a smaller budget is also reused under a larger one), ``--select KEY=V1,V2`` restricts
the grid, ``--weights-dir DIR`` also saves every model as a checkpoint (:func:`save_model`), ``--note
TEXT`` stores provenance. Every file carries ``metadata["schema"]`` (:data:`RESULTS_SCHEMA`) and
``n_rows``; :func:`read_results` refuses another version, a truncated, partial or corrupted file.

Each row holds the training configuration, the measured train/test loss and 0-1 error with the gap
``test − train``, and the proxies of :func:`single_head_proxies` computed on the trained weights.

The proxies are thin compositions of the library (single-head form of the released proxies, Chapters 3–6):

* ``B_ours``: per matrix ``T*(W) = min_{p∈𝒫_m} S_p(W)^{1/(p+2)} K^{p/(p+2)} N^{(p+1)/(p+2)}`` with
  ``K = γ α L`` (:mod:`bounds_lib.propagation`, :mod:`bounds_lib.peeling`), aggregated as
  ``Σ T* + √L`` (released) and ``√(Σ T*²) + √L``; the released constants (``L_φ = 1.13`` for GELU,
  softmax constant 2, γ without ``L_φ``) are used.
* ``B_Edelman`` in single-head form: ``ξ_ℓ = (C_M C_V ‖W_QK‖_{2,1})^{2/3} + (C_M ‖W_V‖_{2,1})^{2/3}
  + ‖W_M‖_{2,1}^{2/3}``, ``B = (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}``; the ``(1,1)`` analogue replaces
  every ``‖·‖_{2,1}`` by ``‖·‖_{1,1}`` (a labelled extension, no released formula).
* References: parameter count, ``Π‖W‖₂`` over all matrices, ``Σ‖W‖_F``.

Every proxy is stored as a ``log10`` value (products over layers can be huge).
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
import dataclasses
from dataclasses import asdict

import numpy as np

from . import __version__
from .model import Block, SingleHeadTransformer
from .norms import singular_values
from .scoring import PROXY_NAMES, single_head_proxies  # noqa: F401 (re-exported: moved to bounds_lib.scoring)
from .scoring import SINGLE_HEAD_MATRIX_TYPES as MATRIX_TYPES

__all__ = [
    "MATRIX_TYPES",
    "PROXY_NAMES",
    "single_head_proxies",
    "grid_configs",
    "run_config",
    "run_grid",
    "PRESETS",
    "RESULTS_SCHEMA",
    "ResultsError",
    "check_results",
    "read_results",
    "load_results",
    "merge_results",
    "RESULTS_FILES",
    "parse_select",
    "select_configs",
    "study_configs",
    "STUDY_GRID",
    "variant_name",
    "unpack_correct",
    "save_model",
    "load_model",
    "HYPERPARAMETERS",
    "proxy_value",
    "kendall_tau",
    "granulated_kendall",
    "scaling_slopes",
    "main",
]

#: The format tag every results file carries in ``metadata["schema"]``; :func:`check_results` refuses
#: a file without it or with another one.
RESULTS_SCHEMA = "bounds_lib.trained-results/1"


# ----------------------------------------------------------------------------- saving weights

def save_model(model: SingleHeadTransformer, directory, meta: dict | None = None) -> None:
    """Save a single-head model as a one-head BERT-layout checkpoint that ``bounds_lib.checkpoints`` reads.

    ``directory`` receives ``config.json`` (``model_type = "bert"``, one head of dimension ``N``,
    ``intermediate_size = N``) and ``model.safetensors`` (float64) with, in ``nn.Linear``'s
    ``(out, in)`` storage, ``query = W_QKᵀ``, ``key = I``, ``value = W_Vᵀ``, ``output = I``,
    ``intermediate = I`` and ``output.dense = W_Mᵀ``, so that the checkpoint reader's
    ``QK = W_Q W_Kᵀ = W_QK``, ``Ṽ = W_V W_O = W_V`` and ``M_in M_out = W_M`` exactly (products with the
    identity are exact in floating point). The readout ``w`` is ``classifier.weight`` (1×N); the
    activation, logit scale and ``meta`` go to ``config.json["bounds_lib"]``.
    """
    import pathlib

    from safetensors.numpy import save_file

    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    L, N = model.L, model.N
    eye = np.eye(N)
    tensors = {}
    for l, b in enumerate(model.blocks):
        pre = f"bert.encoder.layer.{l}."
        tensors[pre + "attention.self.query.weight"] = np.ascontiguousarray(b.W_QK.T)
        tensors[pre + "attention.self.key.weight"] = eye.copy()
        tensors[pre + "attention.self.value.weight"] = np.ascontiguousarray(b.W_V.T)
        tensors[pre + "attention.output.dense.weight"] = eye.copy()
        tensors[pre + "intermediate.dense.weight"] = eye.copy()
        tensors[pre + "output.dense.weight"] = np.ascontiguousarray(b.W_M.T)
    tensors["classifier.weight"] = np.ascontiguousarray(model.w[None, :])
    hidden_act = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "identity": "linear"}[model.act]
    config = {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": 1,
              "intermediate_size": N, "hidden_act": hidden_act,
              "bounds_lib": {"format": "single_head.v1", "act": model.act,
                             "logit_scale": model.logit_scale, **(meta or {})}}
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def load_model(directory) -> SingleHeadTransformer:
    """Read a single-head model through the library's checkpoint path (``bounds_lib.checkpoints``).

    Works for any one-head BERT-layout checkpoint: ``W_QK = QK_{ℓ,0}``, ``W_V = Ṽ_{ℓ,0}`` and
    ``W_M = M_in M_out`` (which needs ``intermediate_size = hidden_size``). Written by :func:`save_model`.
    """
    from .checkpoints import CheckpointError, detect_architecture, iter_layers, open_checkpoint

    src = open_checkpoint(directory)
    spec = detect_architecture(src)
    if spec.n_heads != 1 or spec.d_ff != spec.hidden:
        raise CheckpointError(f"{src.description}: a single-head model needs 1 head and intermediate_size = "
                              f"hidden_size, got {spec.n_heads} heads and d_ff = {spec.d_ff}")
    blocks = tuple(Block(lw.QK(0), lw.V_tilde(0), lw.M_in @ lw.M_out) for lw in iter_layers(src, spec))
    if "classifier.weight" not in src:
        raise CheckpointError(f"{src.description}: no 'classifier.weight' tensor (the [CLS] readout w)")
    w = src.read("classifier.weight").reshape(-1)
    info = src.config.get("bounds_lib", {})
    return SingleHeadTransformer(blocks, w, act=info.get("act", "gelu"),
                                 logit_scale=float(info.get("logit_scale", 1.0)), meta=info)


# ----------------------------------------------------------------------------- the grid

#: The full grid of the committed results: 80 models. Summed training time 46 min measured on a shared
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
PRESETS = {"full": FULL_GRID, "small": SMALL_GRID, "common-loss": COMMON_LOSS_GRID,
           "common-loss-small": SMALL_COMMON_LOSS_GRID}


def parse_select(items) -> dict:
    """``["random_labels=true", "L=2,4"]`` → ``{"random_labels": {True}, "L": {2, 4}}`` (for ``--select``)."""
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


def variant_name(config: dict) -> str:
    """``"plain"``, ``"weight_decay=1"``, ``"nuclear=0.001"`` or ``"rank=2"``: the training choice of a row."""
    for k in ("weight_decay", "nuclear", "rank"):
        if config.get(k):
            return f"{k}={config[k]:g}"
    return "plain"


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
    """All :class:`~bounds_lib.training.TrainConfig` of a grid spec (real labels, then random).

    A spec with ``stop_loss`` trains every model to that training loss, at most ``steps`` steps; one
    with ``seeds`` repeats the grid for each seed (in that order), otherwise its one ``seed`` is used.
    """
    from .training import TrainConfig

    if "variants" in spec:
        return study_configs(spec)
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
    """Train one config, compute its proxies, optionally save its weights; return a results row."""
    from .training import train

    res = train(config)
    model = res.model
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
    if weights_dir is not None:
        import pathlib

        d = pathlib.Path(weights_dir)
        d.mkdir(parents=True, exist_ok=True)
        c = config
        name = f"L{c.L}_N{c.N}_n{c.n_train}_{'rand' if c.random_labels else 'real'}_s{c.seed}"
        save_model(model, d / name, meta={"config": config.as_dict()})
        row["weights_file"] = name
    return row


def _spectra(model) -> dict:
    return {a: [[float(x) for x in singular_values(getattr(b, f"W_{a}"), f"W_{a}")] for b in model.blocks]
            for a in MATRIX_TYPES}


def _initial_model(config):
    """The model ``config`` starts training from (the trainer's seeded initialisation, float32)."""
    import torch

    from .torch_model import TorchTransformer, to_numpy

    gen = torch.Generator().manual_seed(int(config.seed))
    return to_numpy(TorchTransformer(config.L, config.N, act=config.act, logit_scale=config.logit_scale,
                                     init_scale=config.init_scale, generator=gen, rank=config.rank))


def unpack_correct(row: dict) -> np.ndarray:
    """Per test example of a Chapter 8 row: True if the model classified it correctly."""
    n = row["config"]["n_test"]
    return np.unpackbits(np.frombuffer(bytes.fromhex(row["test_correct_hex"]), dtype=np.uint8))[:n].astype(bool)


def _metadata(spec, argv, seconds):
    import torch

    return {"schema": RESULTS_SCHEMA, "command": "python -m bounds_lib.experiments " + " ".join(argv), "grid": spec,
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
    """
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

    def report(i):
        if log is not None:
            cfg, r = configs[i], rows[i]
            extra = ("" if cfg.stop_loss is None else
                     f" steps={r['steps_taken']} reached={r['reached_target']}")
            print(f"[{i + 1}] L={cfg.L} N={cfg.N} n={cfg.n_train} rand={cfg.random_labels} "
                  f"train_err={r['train_error']:.3f} test_err={r['test_error']:.3f}{extra} "
                  f"{r['seconds']:.1f}s", file=log, flush=True)

    def done(i, row):
        rows[i] = row
        report(i)
        if progress is not None:  # one JSON line per finished row: an interrupted grid resumes from it
            with open(progress, "a") as f:
                f.write(json.dumps(row) + "\n")

    if scheduler is not None and todo:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise RuntimeError("--scheduler needs Dask distributed: pip install 'bounds_lib[grid]'") from None
        if isinstance(scheduler, Client):
            client = scheduler
        else:
            try:
                client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError, ValueError) as e:
                raise RuntimeError(f"cannot reach a Dask scheduler at {scheduler!r} ({e}); start one with "
                                   f"'dask scheduler' and workers with 'dask worker ADDRESS --nthreads 1', "
                                   f"or leave out --scheduler to train locally") from None
        try:
            futures = {client.submit(_run_config_one_thread, (configs[i], weights_dir), pure=False): i
                       for i in todo}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
        finally:
            if client is not scheduler:
                client.close()
    elif jobs > 1 and len(todo) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_one_thread) as pool:
            futures = {pool.submit(_run_config_one_thread, (configs[i], weights_dir)): i for i in todo}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
    else:
        for i in todo:
            done(i, run_config(configs[i], weights_dir))
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


# ----------------------------------------------------------------------------- reading results

class ResultsError(ValueError):
    """A results file that is not a complete results file of this library's format."""


_ROW_KEYS = ("config", "train_error", "test_error", "gap_error", "gap_loss", "proxies", "seconds")


def check_results(data, source: str = "results") -> dict:
    """Check that ``data`` is a complete results file of format :data:`RESULTS_SCHEMA`; return it.

    Refused with :class:`ResultsError` (one line saying what is wrong and what is supported): a file
    without ``metadata["schema"]`` or with another one (another version of this library), a
    ``partial`` file, rows missing a measured quantity or a proxy, non-finite numbers, or fewer rows than
    ``metadata["n_rows"]`` says — a chapter never plots a truncated grid.
    """
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict) or not isinstance(
            data.get("rows"), list):
        raise ResultsError(f"{source}: not a results file (expected a JSON object with 'metadata' and 'rows')")
    schema = data["metadata"].get("schema")
    if schema != RESULTS_SCHEMA:
        raise ResultsError(f"{source}: results schema {schema!r} is not supported (this library reads "
                           f"{RESULTS_SCHEMA!r}); regenerate the file with the command in its metadata")
    if data["metadata"].get("partial"):
        raise ResultsError(f"{source}: a partial results file (an interrupted grid); finish it by rerunning "
                           f"its command, which resumes")
    rows = data["rows"]
    if not rows:
        raise ResultsError(f"{source}: the file holds no rows")
    expected = data["metadata"].get("n_rows")
    if expected != len(rows):
        raise ResultsError(f"{source}: metadata says n_rows = {expected!r} but the file holds {len(rows)} rows "
                           f"(truncated or edited)")
    for i, r in enumerate(rows):
        missing = [k for k in _ROW_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise ResultsError(f"{source}: row {i} lacks {', '.join(missing)}")
        missing = [k for k in PROXY_NAMES if k not in r["proxies"]]
        if missing:
            raise ResultsError(f"{source}: row {i} lacks the proxies {', '.join(missing)}")
        vals = [r[k] for k in _ROW_KEYS[1:4]] + [r["proxies"][k] for k in PROXY_NAMES]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
            raise ResultsError(f"{source}: row {i} holds a non-finite or non-numeric measurement")
    return data


def read_results(path, allow_partial: bool = False) -> dict:
    """Read and check a results file (``.json``; with ``allow_partial`` also ``.partial.jsonl`` progress).

    A progress file (one row per line, written while a grid runs) is accepted only for ``--reuse``.
    """
    import pathlib

    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ResultsError(f"{path}: cannot read the results file ({e.strerror})") from None
    if path.name.endswith(".jsonl"):
        if not allow_partial:
            raise ResultsError(f"{path}: a progress file of an unfinished grid, not a results file")
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}: corrupted progress file (line {e.lineno}: {e.msg})") from None
        return {"metadata": {"schema": RESULTS_SCHEMA, "partial": True}, "rows": rows}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: corrupted results file, not valid JSON (line {e.lineno}: {e.msg})") from None
    return check_results(data, str(path))


def merge_results(paths, argv=()) -> dict:
    """Concatenate the rows of several complete results files (e.g. parts of one grid run by separate
    ``--select`` commands); ``metadata["commands"]`` lists the parts' commands, costs are summed."""
    parts = [read_results(p) for p in paths]
    rows = [r for d in parts for r in d["rows"]]
    meta = dict(parts[0]["metadata"])
    meta.pop("select", None)
    meta.update(command="python -m bounds_lib.experiments " + " ".join(argv), n_rows=len(rows),
                commands=[d["metadata"]["command"] for d in parts],
                reused_rows=sum(d["metadata"].get("reused_rows", 0) for d in parts),
                total_seconds=sum(d["metadata"]["total_seconds"] for d in parts),
                training_seconds_sum=float(sum(r["seconds"] for r in rows)),
                notes=[d["metadata"].get("note") for d in parts])
    if all("stop_loss" in d["metadata"] for d in parts):
        meta.update(wall_seconds=sum(d["metadata"]["wall_seconds"] for d in parts),
                    n_reached=sum(bool(r["reached_target"]) for r in rows),
                    n_not_reached=sum(not r["reached_target"] for r in rows),
                    steps_taken=[r["steps_taken"] for r in rows])
    meta.pop("note", None)
    return check_results({"metadata": meta, "rows": rows}, "merged results")


#: The results files shipped with the library (package data in ``bounds_lib/data``).
RESULTS_FILES = {"trained_grid": "trained_grid.json", "common_loss": "trained_common_loss.json",
                 "common_loss_rand256": "trained_common_loss_rand256.json", "study": "spectrum_study.json"}


def load_results(name: str) -> dict:
    """A committed results file by name (:data:`RESULTS_FILES`), read from the installed package and checked.

    Chapters read their data only through this function, never through a path relative to the repository.
    """
    from importlib import resources

    if name not in RESULTS_FILES:
        raise ValueError(f"unknown results {name!r}; available: {', '.join(RESULTS_FILES)}")
    res = resources.files("bounds_lib") / "data" / RESULTS_FILES[name]
    with resources.as_file(res) as path:
        return read_results(path)


# ----------------------------------------------------------------------------- analysis

#: The hyperparameters varied by the grid (Jiang et al. 2020 call each one an "axis").
HYPERPARAMETERS = ("L", "N", "n_train")


def proxy_value(row: dict, name: str) -> float:
    """``log10`` of proxy ``name`` in a results row (``"mean_p_star"``, the mean ``p*``, is a plain value).

    Besides :data:`PROXY_NAMES`, ``"readout_norm"`` gives ``log10 ‖w‖₂`` of the [CLS] readout, and
    ``"train_error"`` / ``"steps_taken"`` the row's measures of fit (baselines, plain values).
    """
    if name == "mean_p_star":
        return float(np.mean([p for a in MATRIX_TYPES for p in row["proxies"]["p_star"][a]]))
    if name == "readout_norm":
        return math.log10(row["proxies"]["readout_norm"])
    if name in ("train_error", "steps_taken"):  # baseline measures of fit (Chapter 7), plain values
        return float(row[name])
    if name not in row["proxies"]:
        raise KeyError(f"row has no proxy {name!r}; available: {', '.join(PROXY_NAMES)}")
    return float(row["proxies"][name])


def kendall_tau(x, y) -> float:
    """Kendall's ``τ_b`` between two sequences (NaN when either is constant or fewer than 2 points)."""
    from scipy.stats import kendalltau

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(kendalltau(x, y).statistic)


def granulated_kendall(rows, measure, target: str = "gap_error", hypers=HYPERPARAMETERS, fixed=()) -> dict:
    """Kendall ``τ`` between a measure and the gap, overall and per hyperparameter (Jiang et al. 2020).

    ``measure(row) -> float``. ``overall`` is ``τ`` over all rows; for each hyperparameter ``h``,
    ``ψ_h`` (key ``h``) is the mean over groups of rows that agree on every *other* hyperparameter of
    ``τ`` within the group; ``Psi`` is the mean of the defined ``ψ_h``. A group whose gap is constant
    is skipped; a measure that is constant within a group while the gap varies ranks nothing and
    scores ``τ = 0`` there (as in Jiang et al.'s count of concordant minus discordant pairs).
    ``groups_h`` is the number of groups that entered ``ψ_h``. Config keys in ``fixed`` (e.g.
    ``("seed",)``) are held fixed in every group without being varied: with several seeds, each group
    compares models of one seed.
    """
    rows = list(rows)
    m = np.array([measure(r) for r in rows])
    g = np.array([r[target] for r in rows])
    out = {"overall": kendall_tau(m, g)}
    counts = {}
    for h in hypers:
        others = [k for k in hypers if k != h]
        groups = {}
        for i, r in enumerate(rows):
            groups.setdefault(tuple(r["config"][k] for k in (*others, *fixed)), []).append(i)
        taus = []
        for idx in groups.values():
            if len(idx) < 2 or np.ptp(g[idx]) == 0:
                continue
            taus.append(0.0 if np.ptp(m[idx]) == 0 else kendall_tau(m[idx], g[idx]))
        out[h] = float(np.mean(taus)) if taus else float("nan")
        counts[f"groups_{h}"] = len(taus)
    defined = [out[h] for h in hypers if np.isfinite(out[h])]
    out["Psi"] = float(np.mean(defined)) if defined else float("nan")
    out.update(counts)
    return out


def scaling_slopes(rows, name: str, along: str, hypers=HYPERPARAMETERS) -> float:
    """Mean least-squares slope of ``log10(proxy)`` against ``log10(along)`` over groups fixing the rest.

    A slope ``a`` means the proxy grows like ``along^a`` (width or depth exponent).
    """
    others = [k for k in hypers if k != along]
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r["config"][k] for k in others), []).append(r)
    slopes = []
    for grp in groups.values():
        if len({r["config"][along] for r in grp}) < 2:
            continue
        x = np.log10([r["config"][along] for r in grp])
        y = np.array([proxy_value(r, name) for r in grp])
        slopes.append(float(np.polyfit(x, y, 1)[0]))
    return float(np.mean(slopes)) if slopes else float("nan")


def main(argv=None) -> int:
    """Command line: ``python -m bounds_lib.experiments --out FILE [--preset NAME] [--small] [--stop-loss X]
    [--max-steps K] [--jobs J] [--weights-dir DIR] [--reuse FILE…] [--note TEXT]``."""
    ap = argparse.ArgumentParser(prog="python -m bounds_lib.experiments", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="results JSON file to write")
    ap.add_argument("--preset", choices=("full", "common-loss", "study"), default="full",
                    help="'full': the fixed-step grid of trained_grid.json; 'common-loss': every model trained "
                         "to a common training loss (trained_common_loss.json); 'study': the spectrum-shaping "
                         "study of Chapter 8 (spectrum_study.json)")
    ap.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="dispatch the configs through this Dask distributed scheduler (default: local)")
    ap.add_argument("--small", action="store_true", help="tiny grid of the preset with the same format (seconds)")
    ap.add_argument("--stop-loss", type=float, default=None,
                    help="train each model until its full-batch training loss is <= this (overrides the preset)")
    ap.add_argument("--max-steps", type=int, default=None,
                    help="the step budget: steps per model, or the most with a stop loss (overrides the preset)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (one torch thread each)")
    ap.add_argument("--weights-dir", default=None,
                    help="also save every trained model here (one checkpoint directory each, see save_model)")
    ap.add_argument("--reuse", default=None, nargs="+",
                    help="earlier results file(s): copy rows with identical configs instead of retraining")
    ap.add_argument("--select", default=None, nargs="+", metavar="KEY=V1,V2",
                    help="train only the configs whose field KEY takes one of the values (e.g. random_labels=true)")
    ap.add_argument("--merge", default=None, nargs="+", metavar="FILE",
                    help="write the rows of these complete results files, concatenated, to --out (no training)")
    ap.add_argument("--note", default=None, help="free text stored as metadata['note'] (provenance)")
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    spec = dict(PRESETS[args.preset + ("-small" if args.small else "") if args.preset != "full"
                        else ("small" if args.small else "full")])
    spec = json.loads(json.dumps(spec))  # tuples -> lists, as the file will hold them
    if args.stop_loss is not None:
        spec["stop_loss"] = args.stop_loss
    if args.max_steps is not None:
        spec["steps"] = args.max_steps
    import pathlib

    if args.merge:
        result = merge_results(args.merge, argv)
        if args.note:
            result["metadata"]["note"] = args.note
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        return 0
    progress = pathlib.Path(args.out + ".partial.jsonl")
    reuse = {"rows": []}
    for path in args.reuse or ():
        reuse["rows"] += read_results(path, allow_partial=True)["rows"]
    if progress.is_file():  # an interrupted run of this command: resume from its finished rows
        reuse["rows"] += read_results(progress, allow_partial=True)["rows"]
    try:
        select = parse_select(args.select)
    except ValueError as e:
        ap.error(str(e))
    try:
        result = run_grid(spec, args.weights_dir, argv, log=sys.stderr, reuse=reuse, jobs=args.jobs, select=select,
                          scheduler=args.scheduler, progress=progress)
    except RuntimeError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")
    if select:
        result["metadata"]["select"] = {k: sorted(v, key=str) for k, v in select.items()}
    if args.note:
        result["metadata"]["note"] = args.note
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    progress.unlink(missing_ok=True)
    print(f"wrote {len(result['rows'])} rows to {args.out} in {result['metadata']['total_seconds']:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
