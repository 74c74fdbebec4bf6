"""The pre-registered replication of Chapter 9: its grids, their configurations, cost and teacher clusters.

Amendment 1 to the pre-registration (``bounds_lib/data/study_amendment_1.md``, §6) plans, before any of
it is trained, a replication of the robust study that can carry an interval, and a real-data task:

* ``--preset robust-replication`` (:data:`REPLICATION_GRID`): the planted teacher (T = 16, n = 128), the
  factorial over ``L``, ``N``, ``η`` and ``r*`` at ``lr = 0.03`` without weight decay, **three teacher
  draws per rank** (``teacher_seed`` 0, 1, 2; draw 0 is the committed grid's teacher) and **five seeds**:
  240 models; and the sample-size family (n = 64…512, both ranks, the same draws and seeds): 90 more;
* ``--preset digits`` (:data:`DIGITS_GRID`): scikit-learn's ``load_digits`` as rows of tokens, digit
  ``≥ 5`` against ``< 5`` (:mod:`bounds_lib.studies.tasks`), n = 128 training images drawn by the seed
  and the test error on all 1669 others (an estimate of the population error, not exact), the factorial
  over ``L``, ``N``, ``η``, five seeds: 40 models;
* ``--preset robust-replication-large`` (:data:`REPLICATION_LARGE_GRID`): the six-axis factorial of the
  original pre-registration with the family, five teacher draws per rank and five seeds, for a Dask
  cluster (``--scheduler tcp://HOST:PORT``; 1750 models, not run for the book).

Every model is trained to the common loss 0.05 (at most 3000 steps) with the measures of
:mod:`bounds_lib.studies.study`, through the resumable runner of :mod:`bounds_lib.studies.grid` (``--jobs``
processes by default, ``--scheduler`` for Dask); ``--small`` gives each a tiny twin that runs in seconds::

    python -m bounds_lib.studies.grid --out study_replication.json --preset robust-replication --jobs 2
    python -m bounds_lib.studies.grid --out study_digits.json --preset digits --jobs 2

Configurations come seed-major (every configuration and teacher draw of seed 0, then seed 1, …), so an
interrupted run leaves a balanced design with fewer seeds. The noisy arm's sensitivity analysis (b)
reruns the same command with ``--max-steps 6000 --select label_noise=0.05 --reuse FIRST.json``: the rows
that reached the loss are copied (training is deterministic), only the excluded models are retrained.

:func:`estimated_seconds` prices a grid from per-model times measured on the book's 2-core machine
(:data:`SECONDS_PER_MODEL`; the command prints it before training): the teacher grid about 52 CPU-minutes
(38 for the factorial, 14 for the family), digits 2, and the sensitivity analysis (b) about 27 more at the
committed noisy arm's exclusion rate (:func:`retraining_seconds` prices it from the first run's rows):
about 81 of the 90 CPU-minutes the amendment allows; with ``--jobs 2`` about 40 minutes of wall time.
:func:`teacher_clusters` labels every row with its teacher draw, the top
cluster of the three-stage bootstrap (:func:`bounds_lib.studies.stats.bootstrap_weights` with ``top``).
"""
from __future__ import annotations

import itertools

from ..core.validation import check_scalar

__all__ = ["REPLICATION_GRID", "SMALL_REPLICATION_GRID", "DIGITS_GRID", "SMALL_DIGITS_GRID",
           "REPLICATION_LARGE_GRID", "REPLICATION_PRESETS", "SECONDS_PER_MODEL", "replication_configs",
           "estimated_seconds", "retraining_seconds", "cost_note", "teacher_clusters"]

_STOP = dict(steps=3000, stop_loss=0.05)
_SEEDS = (0, 1, 2, 3, 4)
_BASE = {"L": 1, "N": 16, "lr": 0.03, "weight_decay": 0.0, "label_noise": 0.0}

#: The teacher grid of the amendment (§6) — 16 configurations × 3 teacher draws × 5 seeds = 240 models, and
#: the sample-size family at the base architecture (n = 64, 256, 512 beyond the shared 128; both ranks) — 90.
REPLICATION_GRID = dict(task={"kind": "teacher", "T": 16, "s": 1}, n_train=128,
                        axes={"L": (1, 2), "N": (16, 32), "label_noise": (0.0, 0.05), "teacher_rank": (1, 0)},
                        fixed={"lr": 0.03, "weight_decay": 0.0}, base=_BASE, family_n=(64, 128, 256, 512),
                        teacher_seeds=(0, 1, 2), seeds=_SEEDS, **_STOP)
#: A tiny twin with the same format (seconds), used by the tests — 2 teacher draws, 2 seeds, 16 models.
SMALL_REPLICATION_GRID = dict(task={"kind": "teacher", "T": 8, "s": 1}, n_train=16,
                              axes={"L": (1,), "N": (4,), "label_noise": (0.0,), "teacher_rank": (1, 0)},
                              fixed={"lr": 0.03, "weight_decay": 0.0},
                              base={**_BASE, "N": 4}, family_n=(16, 32), teacher_seeds=(0, 1), seeds=(0, 1),
                              steps=300, stop_loss=0.1)
#: The digits task of the amendment (§6) — the factorial over L, N, η at n = 128, five seeds — 40 models.
DIGITS_GRID = dict(task={"kind": "digits", "T": 8, "s": 1}, n_train=128,
                   axes={"L": (1, 2), "N": (16, 32), "label_noise": (0.0, 0.05)},
                   fixed={"lr": 0.03, "weight_decay": 0.0}, base=_BASE, family_n=(), teacher_seeds=(0,),
                   seeds=_SEEDS, **_STOP)
#: A tiny digits grid with the same format (seconds), used by the tests — 4 models.
SMALL_DIGITS_GRID = dict(task={"kind": "digits", "T": 8, "s": 1}, n_train=32,
                         axes={"L": (1,), "N": (4,), "label_noise": (0.0, 0.05)},
                         fixed={"lr": 0.03, "weight_decay": 0.0}, base={**_BASE, "N": 4}, family_n=(),
                         teacher_seeds=(0,), seeds=(0, 1), steps=600, stop_loss=0.1)
#: The cluster replication (documented, not run here) — the original six-axis factorial and the family,
#: 5 teacher draws per rank, 5 seeds — 25 × (64 + 6) = 1750 models, through ``--scheduler``.
REPLICATION_LARGE_GRID = dict(task={"kind": "teacher", "T": 16, "s": 1}, n_train=128,
                              axes={"L": (1, 2), "N": (16, 32), "lr": (0.01, 0.03), "weight_decay": (0.0, 0.1),
                                    "label_noise": (0.0, 0.05), "teacher_rank": (1, 0)},
                              fixed={}, base=_BASE, family_n=(64, 128, 256, 512), teacher_seeds=(0, 1, 2, 3, 4),
                              seeds=_SEEDS, **_STOP)
#: The presets :mod:`bounds_lib.studies.grid` adds (``--preset NAME``; ``--small`` picks ``NAME-small``).
REPLICATION_PRESETS = {"robust-replication": REPLICATION_GRID, "robust-replication-small": SMALL_REPLICATION_GRID,
                       "digits": DIGITS_GRID, "digits-small": SMALL_DIGITS_GRID,
                       "robust-replication-large": REPLICATION_LARGE_GRID,
                       "robust-replication-large-small": SMALL_REPLICATION_GRID}

#: Seconds of one core per model at n = 128 on the shared 2-core machine (one torch thread, ``nice -n 10``,
#: the study's measures included), by ``(kind, label_noise)``: the committed robust grid's means (3.7 s
#: and 15.5 s over 64 models each) and models of the new teacher draws and of digits timed 2026-12-02
#: (teacher: 5.2, 5.0 s noiseless; 14.1, 14.4, 3.4 s noisy; digits: 4.2, 1.2 s noiseless, 0.6, 1.7 s noisy).
#: A model with ``n_train > 128`` is priced ``n_train/128`` times as much (a step costs in proportion to
#: n; a new full-rank teacher's n = 512 student missed the loss in 3000 steps and took 53 s).
SECONDS_PER_MODEL = {("teacher", 0.0): 4.0, ("teacher", 0.05): 15.0, ("digits", 0.0): 3.0, ("digits", 0.05): 2.0}


def _n_test(task: dict, n: int) -> int:
    from .tasks import DIGITS_SHAPE

    return DIGITS_SHAPE["images"] - n if task["kind"] == "digits" else 2 ** task["T"]


def replication_configs(spec: dict) -> list:
    """All configs of a replication spec (Chapter 9), seed-major: per seed and teacher draw, the factorial
    over ``axes`` at ``n_train`` (with ``fixed``), then the sample-size family (``base`` with every
    ``family_n`` and teacher rank; configurations already in the factorial are not repeated).

    Raises
    ------
    KeyError
        The spec lacks a field.
    TypeError, ValueError
        A configuration it describes is invalid (:class:`~bounds_lib.studies.training.TrainConfig`).

    Examples
    --------
    >>> configs = replication_configs(SMALL_REPLICATION_GRID)
    >>> len(configs), sorted({c.teacher_seed for c in configs}), configs[0].as_dict().get("teacher_seed", 0)
    (16, [0, 1], 0)
    >>> len(replication_configs(REPLICATION_GRID)), len(replication_configs(DIGITS_GRID))
    (330, 40)
    """
    from .training import TrainConfig

    keys, task = list(spec["axes"]), dict(spec["task"])
    common = dict(**task, steps=spec["steps"], stop_loss=spec["stop_loss"])
    out = []
    for seed, teacher in itertools.product(spec["seeds"], spec["teacher_seeds"]):
        draw = dict(seed=seed, teacher_seed=teacher, **common)
        seen = set()
        for values in itertools.product(*(spec["axes"][k] for k in keys)):
            c = TrainConfig(n_train=spec["n_train"], n_test=_n_test(task, spec["n_train"]),
                            **{**spec["fixed"], **dict(zip(keys, values))}, **draw)
            seen.add(c)
            out.append(c)
        for n, r in itertools.product(spec["family_n"], spec["axes"].get("teacher_rank", (0,))):
            c = TrainConfig(n_train=n, n_test=_n_test(task, n), teacher_rank=r, **spec["base"], **draw)
            if c not in seen:
                seen.add(c)
                out.append(c)
    return out


def estimated_seconds(configs, seconds_per_model=None) -> float:
    """CPU seconds (one core) that training ``configs`` is estimated to take (:data:`SECONDS_PER_MODEL`,
    scaled by ``max(1, n_train/128)``).

    Raises :class:`KeyError` for a configuration whose ``(kind, label_noise)`` has no measured time.

    >>> round(estimated_seconds(replication_configs(REPLICATION_GRID)) / 60)
    52
    >>> round(estimated_seconds(replication_configs(DIGITS_GRID)) / 60)
    2
    """
    table = SECONDS_PER_MODEL if seconds_per_model is None else seconds_per_model
    total = 0.0
    for c in configs:
        key = (c.kind, float(c.label_noise))
        if key not in table:
            raise KeyError(f"no measured time per model for kind {c.kind!r} with label_noise {c.label_noise}; "
                           f"measured: {', '.join(map(str, table))}")
        total += table[key] * max(1.0, c.n_train / 128)
    return total


def retraining_seconds(rows, steps: int = 6000) -> float:
    """CPU seconds to retrain, with a budget of ``steps``, the noisy arm's rows that missed the loss — the
    amendment's sensitivity analysis (b) (Chapter 9) — priced from their own measured time per step.

    >>> retraining_seconds([{"config": {"label_noise": 0.05}, "reached_target": False, "seconds": 15.0,
    ...                      "steps_taken": 3000}, {"config": {}, "reached_target": False, "seconds": 9.0,
    ...                      "steps_taken": 3000}])
    30.0
    """
    check_scalar(steps, "steps (the larger budget)", int, min_val=1)
    return float(sum(r["seconds"] * steps / max(r["steps_taken"], 1) for r in rows
                     if not r.get("reached_target") and r["config"].get("label_noise", 0.0) > 0))


def cost_note(spec: dict, select=None, jobs: int = 1) -> str:
    """One line: how many models ``spec`` trains (after ``select``) and their estimated CPU and wall time.

    >>> cost_note(DIGITS_GRID)
    'digits: 40 models, estimated 2 CPU-min (about 2 min wall with --jobs 1; measured per-model times, nice -n 10)'
    """
    jobs = check_scalar(jobs, "jobs (worker processes)", int, min_val=1)
    configs = [c for c in replication_configs(spec)  # the rule of grid.select_configs
               if all(getattr(c, k) in vs for k, vs in (select or {}).items())]
    s = estimated_seconds(configs)
    return (f"{spec['task']['kind']}: {len(configs)} models, estimated {s / 60:.0f} CPU-min (about "
            f"{s / 60 / jobs:.0f} min wall with --jobs {jobs}; measured per-model times, nice -n 10)")


def teacher_clusters(rows, by: str = "draw") -> list:
    """The top cluster of every row for the three-stage bootstrap of Chapter 9: its teacher draw.

    ``by="draw"``: the draw index ``teacher_seed`` (0 when the row's config leaves it out), so a resample
    drawing draw ``k`` keeps both ranks' teachers of that draw and the matched rank pairs stay together;
    ``by="teacher"``: ``(teacher_rank, teacher_seed)``, one cluster per planted teacher. Rows of a task
    without a teacher (digits) all fall in one cluster.

    >>> teacher_clusters([{"config": {"teacher_rank": 1}}, {"config": {"teacher_rank": 0, "teacher_seed": 2}}])
    [0, 2]
    """
    if by not in ("draw", "teacher"):
        raise ValueError(f"by must be 'draw' or 'teacher', got {by!r}")
    out = []
    for r in rows:
        c = r["config"]
        draw = c.get("teacher_seed", 0)
        out.append(draw if by == "draw" else (c.get("teacher_rank", 0), draw))
    return out
