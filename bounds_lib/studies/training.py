"""A deterministic, seeded CPU trainer for the paper's Transformer (Chapter 7).

Loss: the logistic loss ``ℓ(f, y) = log(1 + e^{−y f})`` on the scalar [CLS] readout ``f`` (as in
the paper's binary-classification setting, a Lipschitz loss). Optimiser: full-batch Adam for a fixed
number of steps (no data augmentation: the only randomness is the seed), or, with ``stop_loss`` set,
until the full-batch training loss first reaches ``stop_loss`` (the stopping criterion of Jiang et al.
2020: every model of a grid is trained to the same training cross-entropy), at most ``steps`` steps.

Determinism: the initialisation uses a private ``torch.Generator`` seeded from ``config.seed``; the
data come from NumPy generators seeded from the task seed; the full-batch loop has no sampling.
On CPU with a fixed thread count (the runner uses one thread) two runs with the same config
produce bit-identical weights and losses; a test checks it.

Measured quantities: train/test logistic loss and 0-1 error, and the gap ``test − train`` of
both, with the test set a large fresh sample from a seed stream disjoint from the training one.
On the ``teacher`` task (Chapter 9) there is no test sample: the test error is the exact population
error over all ``2^T`` inputs, under the task's label noise (:func:`exact_population`). On the ``digits``
task (Chapter 9) the test set is every image not used for training (:func:`heldout_population`): the
test error estimates the population error under the same label noise, it is not exact.
With ``disjoint_test`` (Chapter 8) the test inputs also exclude every training bit string, and the
per-example correctness on the test set is kept (``TrainResult.test_correct``), so models of the same
task and seed can be compared example by example.

Spectrum-shaping choices (Chapter 8): ``weight_decay`` (decoupled, AdamW, on the ``3L`` matrices —
the factors of a factorised model — not on the readout), ``nuclear`` (``λ Σ‖W‖_*`` added to the
objective; the stopping rule and the loss curve use the data loss alone) and ``rank`` (every matrix
parameterised as ``A Bᵀ``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..theory.model import ACTIVATIONS
from .tasks import DIGITS_SHAPE, TASK_KINDS, BooleanTask, sample
from .torch_model import TorchTransformer, to_numpy
from ..core.validation import check_bool, check_scalar

__all__ = ["TrainConfig", "TrainResult", "logistic_loss", "evaluate", "exact_population", "heldout_population",
           "disjoint_test_sample", "nuclear_penalty", "initial_model", "train"]

TRAIN_STREAM, TEST_STREAM = 0, 1


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines one trained model (Chapters 7 and 8).

    Every field is checked when the config is built: a wrong type raises :class:`TypeError` (an
    integer field refuses ``3.0``, a flag refuses ``1``), a wrong value :class:`ValueError`.

    Examples
    --------
    >>> TrainConfig(L=2, N=8, kind="parity", s=2).as_dict()["kind"]
    'parity'
    >>> TrainConfig(L=2.0)
    Traceback (most recent call last):
        ...
    TypeError: L (number of blocks) must be an integer, got float 2.0
    """

    L: int = 2
    N: int = 16
    n_train: int = 256
    kind: str = "majority"
    T: int = 8
    s: int = 3
    random_labels: bool = False
    steps: int = 300  # the number of Adam steps; with ``stop_loss`` set, the most that are taken
    lr: float = 1e-2
    act: str = "gelu"
    logit_scale: float = 1.0
    init_scale: float = 1.0
    n_test: int = 4096
    seed: int = 0
    stop_loss: float | None = None  # stop at the first step whose full-batch training loss is <= this
    # spectrum-shaping choices of Chapter 8 (all off by default)
    weight_decay: float = 0.0  # decoupled weight decay (AdamW) on the 3L matrices (or their factors)
    nuclear: float = 0.0  # λ of the penalty λ Σ ‖W‖_* (nuclear norm, Schatten-1) over the 3L matrices
    rank: int = 0  # > 0: every matrix factorised as A Bᵀ with A, B of shape N×rank
    disjoint_test: bool = False  # test inputs exclude every training bit string; per-example results stored
    # the robust study of Chapter 9 (off by default): the planted teacher's rank and label noise
    teacher_rank: int = 0  # kind="teacher": planted rank r* of the teacher's matrices (0: full rank)
    label_noise: float = 0.0  # probability that a training label is flipped
    teacher_seed: int = 0  # kind="teacher": which teacher of rank r* (0: the committed grid's teacher)

    def __post_init__(self):
        for name, what in (("L", "L (number of blocks)"), ("N", "N (hidden size)"), ("n_train", "n_train"),
                           ("T", "T (number of bits)"), ("s", "s (number of relevant bits)"),
                           ("n_test", "n_test")):
            check_scalar(getattr(self, name), what, int, min_val=1)
        check_scalar(self.steps, "steps (Adam steps; the budget with stop_loss)", int, min_val=0)
        check_scalar(self.seed, "seed", int, min_val=0)
        check_scalar(self.lr, "lr (learning rate)", float, min_val=0, include_boundaries="neither")
        check_scalar(self.logit_scale, "logit_scale", float, min_val=0, include_boundaries="neither")
        check_scalar(self.init_scale, "init_scale", float, min_val=0)
        if self.stop_loss is not None:
            check_scalar(self.stop_loss, "stop_loss (None: a fixed number of steps)", float, min_val=0)
        check_scalar(self.weight_decay, "weight_decay", float, min_val=0)
        check_scalar(self.nuclear, "nuclear (λ of the nuclear-norm penalty)", float, min_val=0)
        check_scalar(self.rank, f"rank (0: full matrices; at most N = {self.N})", int, min_val=0, max_val=self.N)
        check_bool(self.random_labels, "random_labels")
        check_bool(self.disjoint_test, "disjoint_test")
        self.task()  # validates teacher_rank, teacher_seed, label_noise and the digits task's fields
        if self.kind == "teacher" and self.n_test != 2 ** self.T:
            raise ValueError(f"the teacher task is tested on all 2^T inputs: set n_test = 2**T = {2 ** self.T}, "
                             f"got {self.n_test}")
        if self.kind == "digits" and (self.n_test != DIGITS_SHAPE["images"] - self.n_train or self.disjoint_test):
            raise ValueError(f"the digits task is tested on every image not used for training: set n_test = "
                             f"{DIGITS_SHAPE['images']} - n_train = {DIGITS_SHAPE['images'] - self.n_train} and "
                             f"disjoint_test=False, got n_test={self.n_test}, disjoint_test={self.disjoint_test}")
        for name, allowed in (("kind", TASK_KINDS), ("act", tuple(ACTIVATIONS))):
            v = getattr(self, name)
            if not isinstance(v, str):
                raise TypeError(f"{name} must be a str, got {type(v).__name__} {v!r}")
            if v not in allowed:
                raise ValueError(f"unknown {name} {v!r}; supported: {', '.join(allowed)}")

    #: fields left out of :meth:`as_dict` at their default, so rows written before they existed keep
    #: their format and their configuration keys (``--reuse`` matches on the exact dict)
    _OPTIONAL = {"stop_loss": None, "weight_decay": 0.0, "nuclear": 0.0, "rank": 0, "disjoint_test": False,
                 "teacher_rank": 0, "label_noise": 0.0, "teacher_seed": 0}

    def as_dict(self) -> dict:
        """The fields as a dict; optional fields (``stop_loss``, the Chapter 8 choices) only when set."""
        d = asdict(self)
        for k, default in self._OPTIONAL.items():
            if d[k] == default:
                del d[k]
        return d

    def task(self) -> BooleanTask:
        return BooleanTask(kind=self.kind, T=self.T, s=self.s, N=self.N, seed=self.seed,
                           random_labels=self.random_labels, teacher_rank=self.teacher_rank,
                           label_noise=self.label_noise, teacher_seed=self.teacher_seed)


@dataclass
class TrainResult:
    """A trained model (torch and NumPy forms), its measured losses/errors and the loss curve."""

    config: TrainConfig
    torch_model: TorchTransformer
    train_loss: float
    train_error: float
    test_loss: float
    test_error: float
    loss_curve: list
    seconds: float
    steps_taken: int = 0
    reached_target: bool | None = None  # None without ``stop_loss``
    test_correct: np.ndarray | None = None  # per test example: 1 if classified correctly (disjoint_test)
    n_test_overlap: int | None = None  # test candidates dropped because they were training inputs
    clean_test_error: float | None = None  # teacher: exact population error on the clean labels; digits: held out

    @property
    def gap_loss(self) -> float:
        return self.test_loss - self.train_loss

    @property
    def gap_error(self) -> float:
        return self.test_error - self.train_error

    @property
    def model(self):
        """The trained weights as a :class:`bounds_lib.theory.model.SingleHeadTransformer` (float64)."""
        return to_numpy(self.torch_model, meta={"config": self.config.as_dict()})

    def metrics(self) -> dict:
        return {"train_loss": self.train_loss, "train_error": self.train_error,
                "test_loss": self.test_loss, "test_error": self.test_error,
                "gap_loss": self.gap_loss, "gap_error": self.gap_error}


def logistic_loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean of ``log(1 + exp(−y f))`` (computed stably with ``softplus``)."""
    return torch.nn.functional.softplus(-y * f).mean()


@torch.no_grad()
def evaluate(model: TorchTransformer, X: torch.Tensor, y: torch.Tensor, batch: int = 2048):
    """``(mean logistic loss, 0-1 error)`` of ``model`` on ``(X, y)``; ``f = 0`` counts as an error."""
    losses, errors = 0.0, 0.0
    for i in range(0, X.shape[0], batch):
        f = model(X[i:i + batch])
        yy = y[i:i + batch]
        losses += float(torch.nn.functional.softplus(-yy * f).sum())
        errors += float((yy * f <= 0).sum())
    return losses / X.shape[0], errors / X.shape[0]


@torch.no_grad()
def exact_population(model: TorchTransformer, task, batch: int = 8192):
    """Exact population ``(logistic loss, 0-1 error, clean 0-1 error)`` of ``model`` on a ``teacher`` task.

    The input distribution is uniform on ``{±1}^T``, so the population risk is the mean over all ``2^T``
    inputs (:func:`bounds_lib.studies.tasks.all_bits`) — no test sample, no test-set noise. With label noise ``η``
    the label of input ``x`` is ``y*(x)`` with probability ``1 − η`` and ``−y*(x)`` with ``η``, so with the
    margin ``m = y* f(x)`` the risks are ``mean[(1−η)·1{m ≤ 0} + η·1{m ≥ 0}]`` (0-1; ``f = 0`` is an error
    under either label) and ``mean[(1−η)·log(1+e^{−m}) + η·log(1+e^{m})]`` (logistic), exactly; the clean
    error is ``mean 1{m ≤ 0}``. Chapter 9 (a test checks the mean over all inputs directly).
    """
    from .tasks import all_bits, encode, teacher_labels_all, token_embedding

    bits = all_bits(task.T)
    y_all = teacher_labels_all(task.T, task.teacher_rank, task.teacher_seed)
    emb = token_embedding(task.T, task.N, task.seed)
    dtype = next(model.parameters()).dtype
    margins = []
    for i in range(0, bits.shape[0], batch):
        X = torch.as_tensor(encode(bits[i:i + batch], emb), dtype=dtype)
        y = torch.as_tensor(np.array(y_all[i:i + batch]), dtype=dtype)  # a copy: y_all is read-only
        margins.append((y * model(X)).to(torch.float64))
    return _noisy_risks(torch.cat(margins), task.label_noise)


@torch.no_grad()
def heldout_population(model: TorchTransformer, task, n_train: int):
    """``(logistic loss, 0-1 error, clean 0-1 error)`` of ``model`` on every held-out image of a ``digits`` task.

    The rule of :func:`exact_population` with the mean over the ``1797 − n_train`` images not used for
    training (:func:`bounds_lib.studies.tasks.heldout_digits`) in place of the mean over all inputs: under
    label noise ``η`` the 0-1 error is ``η + (1 − 2η)·(clean error)`` when no margin is exactly 0. An
    estimate of the population error (Chapter 9), with standard deviation at most ``½/√(1797 − n_train)``.
    """
    from .tasks import heldout_digits

    X, y, _ = heldout_digits(task, n_train)
    dtype = next(model.parameters()).dtype
    m = torch.as_tensor(y, dtype=dtype) * model(torch.as_tensor(X, dtype=dtype))
    return _noisy_risks(m.to(torch.float64), task.label_noise)


def _noisy_risks(m: torch.Tensor, eta: float):
    """``(loss, 0-1 error, clean 0-1 error)`` from the margins ``m = y* f`` on the clean labels, labels flipped
    with probability ``eta`` (``f = 0`` is an error under either label)."""
    sp = torch.nn.functional.softplus
    loss = float(((1 - eta) * sp(-m) + eta * sp(m)).mean())
    err = float(((1 - eta) * (m <= 0).double() + eta * (m >= 0).double()).mean())
    return loss, err, float((m <= 0).double().mean())


def disjoint_test_sample(task, n_test: int, train_bits: np.ndarray):
    """``n_test`` test examples of ``task`` whose bit strings are none of ``train_bits``.

    Draws ``n_test + len(train_bits)`` candidates from the test stream and keeps the first ``n_test``
    that are not training inputs (i.i.d. from the input distribution conditioned on being unseen).
    Returns ``(X, y, bits, n_dropped)``; raises ``ValueError`` if too few unseen strings were drawn.
    """
    check_scalar(n_test, "n_test", int, min_val=1)
    seen = {row.tobytes() for row in np.asarray(train_bits, dtype=np.float64)}
    X, y, bits = sample(task, n_test + len(seen), TEST_STREAM)
    keep = np.array([row.tobytes() not in seen for row in bits])
    if keep.sum() < n_test:
        raise ValueError(f"only {int(keep.sum())} of {keep.size} test candidates are unseen inputs; "
                         f"T = {task.T} bits leave too few strings for n_test = {n_test}")
    idx = np.flatnonzero(keep)[:n_test]
    return X[idx], y[idx], bits[idx], int((~keep[:idx[-1] + 1]).sum())


def nuclear_penalty(model: TorchTransformer) -> torch.Tensor:
    """``Σ_{ℓ,a} ‖W^a_ℓ‖_*`` (sum of singular values) over the model's ``3L`` matrices (differentiable)."""
    return sum(torch.linalg.svdvals(W).sum() for Ws in model.matrices().values() for W in Ws)


def _optimizer(model: TorchTransformer, config: TrainConfig):
    if config.weight_decay == 0:
        return torch.optim.Adam(model.parameters(), lr=config.lr)
    mats = [p for name, p in model.named_parameters() if name != "w"]
    return torch.optim.AdamW([{"params": mats, "weight_decay": config.weight_decay},
                              {"params": [model.w], "weight_decay": 0.0}], lr=config.lr)


def initial_model(config: TrainConfig, dtype: torch.dtype = torch.float32) -> TorchTransformer:
    """The model :func:`train` starts from: ``config``'s architecture, initialised from a generator seeded
    with ``config.seed`` (so the initial spectra of a Chapter 8 row can be recomputed without training).

    >>> cfg = TrainConfig(L=1, N=4, n_train=8, T=4, s=1, steps=1, n_test=8)
    >>> all(torch.equal(a, b) for a, b in zip(initial_model(cfg).parameters(), initial_model(cfg).parameters()))
    True
    """
    gen = torch.Generator().manual_seed(int(config.seed))
    return TorchTransformer(config.L, config.N, act=config.act, logit_scale=config.logit_scale,
                            init_scale=config.init_scale, generator=gen, dtype=dtype, rank=config.rank)


def train(config: TrainConfig, dtype: torch.dtype = torch.float32) -> TrainResult:
    """Train one model from scratch as ``config`` says; deterministic for a fixed config (Chapter 7).

    Without ``config.stop_loss``: exactly ``config.steps`` Adam steps. With it: before each step the
    full-batch training loss of the current weights is computed (it is the loss the step
    differentiates); the first time it is ``<= stop_loss`` training stops *without* taking that step,
    so the returned weights have training loss ``<= stop_loss`` and ``steps_taken`` counts the Adam
    updates. If ``steps`` updates do not get there, ``reached_target`` is False (the weights after
    ``steps`` updates are returned). ``loss_curve`` holds the loss before each update (and, when the
    target was reached, the final loss that stopped the run).

    Parameters
    ----------
    config : TrainConfig
        The model, task, optimiser and spectrum-shaping choice (validated when it is built).
    dtype : torch.dtype
        Precision of training (the committed results use float32).

    Returns
    -------
    TrainResult
        The trained model (``.model`` gives the float64 NumPy twin), train/test loss and 0-1 error,
        the gaps, the loss curve and the training time.

    Raises
    ------
    TypeError
        ``config`` is not a :class:`TrainConfig`.
    ValueError
        With ``disjoint_test``, too few unseen bit strings for ``n_test`` (see
        :func:`disjoint_test_sample`).

    Examples
    --------
    >>> res = train(TrainConfig(L=1, N=4, n_train=16, T=4, s=1, steps=5, n_test=32))
    >>> len(res.loss_curve), res.steps_taken, res.reached_target
    (5, 5, None)
    >>> res.gap_error == res.test_error - res.train_error
    True
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    t0 = time.perf_counter()
    task = config.task()
    Xtr, ytr, btr = sample(task, config.n_train, TRAIN_STREAM)
    overlap = None
    if config.kind in ("teacher", "digits"):  # the population (or all held-out images) after training
        Xte = yte = None
    elif config.disjoint_test:
        Xte, yte, _, overlap = disjoint_test_sample(task, config.n_test, btr)
    else:
        Xte, yte, _ = sample(task, config.n_test, TEST_STREAM)
    Xtr, ytr = torch.as_tensor(Xtr, dtype=dtype), torch.as_tensor(ytr, dtype=dtype)
    if Xte is not None:
        Xte, yte = torch.as_tensor(Xte, dtype=dtype), torch.as_tensor(yte, dtype=dtype)
    model = initial_model(config, dtype)
    opt = _optimizer(model, config)
    curve = []
    target = config.stop_loss
    reached = None if target is None else False
    taken = 0
    for _ in range(int(config.steps)):
        opt.zero_grad(set_to_none=True)
        loss = logistic_loss(model(Xtr), ytr)  # the data loss: the stopping rule and the curve use it
        if target is not None and float(loss.detach()) <= target:
            curve.append(float(loss.detach()))
            reached = True
            break
        objective = loss + config.nuclear * nuclear_penalty(model) if config.nuclear > 0 else loss
        objective.backward()
        opt.step()
        taken += 1
        curve.append(float(loss.detach()))
    else:
        if target is not None:  # the budget is spent: does the last update reach the target?
            with torch.no_grad():
                last = float(logistic_loss(model(Xtr), ytr))
            if last <= target:
                curve.append(last)
                reached = True
    model.eval()
    tr_loss, tr_err = evaluate(model, Xtr, ytr)
    clean = None
    if Xte is None:
        te_loss, te_err, clean = (exact_population(model, task) if config.kind == "teacher"
                                  else heldout_population(model, task, config.n_train))
    else:
        te_loss, te_err = evaluate(model, Xte, yte)
    correct = None
    if config.disjoint_test:
        with torch.no_grad():
            correct = (yte * model(Xte) > 0).numpy().astype(np.uint8)
    return TrainResult(config, model, tr_loss, tr_err, te_loss, te_err, curve,
                       time.perf_counter() - t0, taken, reached, correct, overlap, clean)
