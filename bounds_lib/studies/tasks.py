"""Sparse Boolean tasks with known structure, and a random-label control (Chapter 7).

Following the *sparse variable creation* setting of Edelman et al. (2022): an input is a string of
``T`` bits ``b ∈ {±1}^T``; the label depends only on ``s`` of the ``T`` positions (the *support*
``I``, drawn once from the task seed):

* ``majority``: ``y = sign(Σ_{t∈I} b_t)`` (``s`` odd, so no ties);
* ``and``: ``y = +1`` iff ``b_t = +1`` for every ``t ∈ I`` (unbalanced: ``P(y=+1) = 2^{-s}``);
* ``parity``: ``y = Π_{t∈I} b_t``;
* ``halfspace``: ``y = sign(Σ_{t∈I} v_t b_t)`` with fixed weights ``v_t ~ 𝒩(0, 1)`` drawn from the
  task seed (a linear threshold function; with ``s = T`` every bit matters — the dense family next
  to the sparse ones, used in Chapter 8; ties have probability 0 and are broken towards ``+1``).

* ``teacher`` (the planted-spectrum teacher of Chapter 9): ``y = sign(f*(b) − median f*)``, with
  ``f*`` the paper's own architecture (:mod:`bounds_lib.theory.model`, ``L = 2`` blocks of width 16) whose
  ``3L`` matrices are planted with ``teacher_rank`` equal singular values (``0``: full rank), on its own
  fixed encoding; the threshold is the median of ``f*`` over all ``2^T`` inputs, so the classes balance.
  The whole input space can be enumerated (:func:`all_bits`), so population errors are exact.
  ``teacher_seed`` draws the teacher (``0``: the teacher of the committed grid); a replication draws
  several teachers per rank (Chapter 9).

* ``digits`` (a real task of Chapter 9): the 1797 images of 8 × 8 pixels of scikit-learn's
  ``load_digits`` (package data, read offline), ``y = +1`` for a digit ``≥ 5`` and ``−1`` for a digit
  ``< 5`` (896 against 901 images). An image is a sequence of ``T = 8`` tokens, its pixel rows scaled to
  ``[0, 1]`` (:func:`digits_data`, :func:`encode_digits`). The seed permutes the images
  (:func:`digits_split`): the first ``n`` are the training set, and the test error is measured on *all*
  the others (:func:`heldout_digits`) — an estimate of the population error on a finite pool, not an
  exact one as for the teacher.

With ``label_noise = η > 0`` every label :func:`sample` returns is flipped independently with
probability ``η`` (for any kind; the population of the noisy task is the same noise on every input).

With ``random_labels=True`` the labels are i.i.d. uniform ``±1`` independent of the input (the
control of Zhang et al. 2017): any gap there is pure memorisation, and a measure of capacity that
"tracks generalisation" should be larger for those models.

Encoding into the paper's token matrices ``X ∈ ℝ^{(T+1)×N}``: row 0 is a fixed [CLS] vector ``c``
and row ``t ≥ 1`` is ``(b_t e + p_t)/√2`` with a fixed bit direction ``e`` and position vectors
``p_t``; ``c, e, p_t`` are i.i.d. ``𝒩(0, I_N/N)`` drawn from the task seed and ``N`` (the model has
no positional embedding of its own, so positions must be in the input). The encoding is fixed, not
trained, so every trained parameter is one of the paper's matrices.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..core.validation import check_bool, check_scalar

__all__ = ["TASK_KINDS", "TEACHER_SHAPE", "DIGITS_SHAPE", "BooleanTask", "all_bits", "bit_index", "planted_teacher",
           "teacher_labels_all", "task_support", "halfspace_weights", "boolean_labels", "token_embedding",
           "encode", "sample_bits", "sample", "digits_data", "digits_split", "digits_embedding", "encode_digits",
           "heldout_digits"]

#: The task families (see the module docstring).
TASK_KINDS = ("majority", "and", "parity", "halfspace", "teacher", "digits")
#: The ``digits`` task: images, tokens per image (pixel rows), pixels per token, the largest pixel value.
DIGITS_SHAPE = {"images": 1797, "T": 8, "pixels": 8, "max_pixel": 16.0}
#: The planted teacher's architecture (``L`` blocks of width ``N``) and its planted singular value.
TEACHER_SHAPE = {"L": 2, "N": 16, "sigma": 3.0}
#: Largest ``T`` for which the ``teacher`` task enumerates its input space (``2^T`` inputs).
TEACHER_MAX_T = 20


@dataclass(frozen=True)
class BooleanTask:
    """A sparse Boolean task: ``kind`` of ``s`` of ``T`` bits, encoded in width ``N`` (Chapter 7).

    Raises :class:`TypeError` for a field of the wrong type and :class:`ValueError` for an unknown
    ``kind``, ``s`` outside ``[1, T]``, an even ``s`` for ``majority``, ``N < 1`` or a negative seed.

    >>> BooleanTask(kind="parity", T=8, s=2, seed=0).support
    array([3, 7])
    """

    kind: str = "majority"
    T: int = 8
    s: int = 3
    N: int = 16
    seed: int = 0
    random_labels: bool = False
    teacher_rank: int = 0  # ``teacher`` only: the planted rank r* of every teacher matrix (0: full rank)
    label_noise: float = 0.0  # probability that sample() flips a label
    teacher_seed: int = 0  # ``teacher`` only: which teacher of rank r* is drawn (0: the committed grid's)

    def __post_init__(self):
        if not isinstance(self.kind, str):
            raise TypeError(f"task kind must be a str, got {type(self.kind).__name__} {self.kind!r}; "
                            f"supported: {', '.join(TASK_KINDS)}")
        if self.kind not in TASK_KINDS:
            raise ValueError(f"unknown task kind {self.kind!r}; supported: {', '.join(TASK_KINDS)}")
        T = check_scalar(self.T, "T (number of bits)", int, min_val=1)
        check_scalar(self.s, f"s (number of relevant bits; need 1 <= s <= T = {T})", int, min_val=1, max_val=T)
        if self.kind == "majority" and self.s % 2 == 0:
            raise ValueError(f"majority needs an odd number of relevant bits to avoid ties, got s={self.s}")
        check_scalar(self.N, "N (hidden size)", int, min_val=1)
        check_scalar(self.seed, "seed", int, min_val=0)
        check_bool(self.random_labels, "random_labels")
        check_scalar(self.teacher_rank, f"teacher_rank (0: full; at most {TEACHER_SHAPE['N']})", int, min_val=0,
                     max_val=TEACHER_SHAPE["N"])
        check_scalar(self.label_noise, "label_noise (flip probability)", float, min_val=0, max_val=0.5,
                     include_boundaries="left")
        if self.kind == "teacher" and T > TEACHER_MAX_T:
            raise ValueError(f"the teacher task enumerates all 2^T inputs; T = {T} exceeds {TEACHER_MAX_T}")
        check_scalar(self.teacher_seed, "teacher_seed (the teacher draw; 0: the committed teacher)", int, min_val=0)
        if self.teacher_seed and self.kind != "teacher":
            raise ValueError(f"teacher_seed draws the planted teacher; the {self.kind!r} task has none "
                             f"(got teacher_seed={self.teacher_seed})")
        if self.kind == "digits":
            self._check_digits()

    def _check_digits(self):
        if self.T != DIGITS_SHAPE["T"]:
            raise ValueError(f"the digits task has T = {DIGITS_SHAPE['T']} tokens (the pixel rows), got T = {self.T}")
        if self.random_labels or self.teacher_rank:
            raise ValueError("the digits task has real labels and no teacher: random_labels and teacher_rank "
                             f"must be off, got random_labels={self.random_labels}, teacher_rank={self.teacher_rank}")

    @property
    def support(self) -> np.ndarray:
        return task_support(self.T, self.s, self.seed)


def task_support(T: int, s: int, seed: int) -> np.ndarray:
    """The ``s`` relevant positions (sorted, 0-based among the ``T`` bit positions)."""
    rng = np.random.default_rng([seed, 1])
    return np.sort(rng.choice(T, size=s, replace=False))


def halfspace_weights(s: int, seed: int) -> np.ndarray:
    """The weights ``v`` (``s`` i.i.d. standard normals) of the ``halfspace`` task of seed ``seed``."""
    return np.random.default_rng([seed, 4]).standard_normal(s)


def boolean_labels(bits: np.ndarray, support: np.ndarray, kind: str, seed: int = 0) -> np.ndarray:
    """Labels ``±1`` (float64) of ``bits`` (shape ``(n, T)``, entries ±1) under the task ``kind``.

    ``seed`` draws the weights of the ``halfspace`` task (ignored by the other kinds).
    """
    b = np.asarray(bits, dtype=np.float64)[:, support]
    if kind == "halfspace":
        return np.where(b @ halfspace_weights(len(support), seed) >= 0, 1.0, -1.0)
    if kind == "majority":
        return np.sign(b.sum(axis=1))
    if kind == "and":
        return np.where(np.all(b > 0, axis=1), 1.0, -1.0)
    if kind == "parity":
        return np.prod(b, axis=1)
    raise ValueError(f"unknown task kind {kind!r}; supported: {', '.join(TASK_KINDS)}")


def token_embedding(T: int, N: int, seed: int) -> dict:
    """The fixed vectors ``c`` (CLS), ``e`` (bit direction) and ``p`` (``T×N`` positions)."""
    rng = np.random.default_rng([seed, 2, N])
    c = rng.standard_normal(N) / np.sqrt(N)
    e = rng.standard_normal(N) / np.sqrt(N)
    p = rng.standard_normal((T, N)) / np.sqrt(N)
    return {"cls": c, "bit": e, "pos": p}


def encode(bits: np.ndarray, emb: dict) -> np.ndarray:
    """Token matrices ``(n, T+1, N)``: row 0 = CLS, row ``t`` = ``(b_t e + p_t)/√2``."""
    bits = np.asarray(bits, dtype=np.float64)
    n, T = bits.shape
    tokens = (bits[:, :, None] * emb["bit"][None, None, :] + emb["pos"][None]) / np.sqrt(2.0)
    cls = np.broadcast_to(emb["cls"], (n, 1, emb["cls"].size))
    return np.concatenate([cls, tokens], axis=1)


def _bits(task, n, seed):
    check_scalar(n, "n (number of examples)", int, min_val=1)
    check_scalar(seed, "seed (the stream: 0 training, 1 test)", int, min_val=0)
    rng = np.random.default_rng([task.seed, 3, seed])
    return rng, rng.choice([-1.0, 1.0], size=(n, task.T))


def sample_bits(task: BooleanTask, n: int, seed: int) -> np.ndarray:
    """The bit strings ``(n, T)`` that :func:`sample` draws from stream ``seed`` (without encoding them)."""
    return _bits(task, n, seed)[1]


def sample(task: BooleanTask, n: int, seed: int):
    """``n`` i.i.d. examples ``(X, y, bits)`` of ``task`` from the stream ``seed``.

    Parameters
    ----------
    task : BooleanTask
        The task (support, labels and the fixed token encoding).
    n : int
        Number of examples, ``>= 1``.
    seed : int
        The stream, ``>= 0`` (the trainer draws training inputs from 0 and test inputs from 1).

    Returns
    -------
    X : numpy.ndarray
        Token matrices, shape ``(n, T+1, N)`` (row 0 is [CLS]).
    y : numpy.ndarray
        Labels in ``{±1}``, shape ``(n,)``. For a random-label task ``y`` is drawn independently of
        ``bits`` from the same seed stream.
    bits : numpy.ndarray
        The bit strings, shape ``(n, T)``; for ``digits`` the indices of the images in ``load_digits``,
        shape ``(n,)`` (the first ``n`` of :func:`digits_split`; only stream 0 exists, the test set is
        :func:`heldout_digits`).

    Raises
    ------
    TypeError
        ``n`` or ``seed`` is not an integer.
    ValueError
        ``n < 1`` or ``seed < 0``; for ``digits`` a stream other than 0, or ``n`` leaving no test image.

    Examples
    --------
    >>> X, y, bits = sample(BooleanTask(kind="parity", T=8, s=2, N=4), 5, 0)
    >>> X.shape, bool(np.all(y == bits[:, 3] * bits[:, 7]))  # the parity of the support's bits
    ((5, 9, 4), True)
    """
    if task.kind == "digits":
        return _sample_digits(task, n, seed)
    rng, bits = _bits(task, n, seed)
    if task.random_labels:
        y = rng.choice([-1.0, 1.0], size=n)
    elif task.kind == "teacher":
        y = teacher_labels_all(task.T, task.teacher_rank, task.teacher_seed)[bit_index(bits)]
    else:
        y = boolean_labels(bits, task.support, task.kind, task.seed)
    if task.label_noise > 0:  # its own stream: the inputs and clean labels are those of the noiseless task
        flip = np.random.default_rng([task.seed, 5, seed]).random(n) < task.label_noise
        y = np.where(flip, -y, y)
    X = encode(bits, token_embedding(task.T, task.N, task.seed))
    return X, y, bits


# ----------------------------------------------------------------------------- the planted teacher (Ch. 9)


def all_bits(T: int) -> np.ndarray:
    """Every bit string of length ``T`` (shape ``(2^T, T)``, entries ±1); row ``i`` is ``i`` in binary.

    Bit ``t`` of row ``i`` is ``+1`` iff bit ``t`` of the integer ``i`` is set, so :func:`bit_index` inverts it.

    >>> all_bits(2).tolist()
    [[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]]
    """
    T = check_scalar(T, "T (number of bits)", int, min_val=1, max_val=TEACHER_MAX_T)
    i = np.arange(2 ** T)[:, None]
    return np.where((i >> np.arange(T)[None, :]) & 1, 1.0, -1.0)


def bit_index(bits: np.ndarray) -> np.ndarray:
    """The row of :func:`all_bits` holding each bit string of ``bits`` (shape ``(n, T)``).

    >>> bit_index(all_bits(3)).tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    b = np.asarray(bits) > 0
    return (b.astype(np.int64) << np.arange(b.shape[1])[None, :]).sum(axis=1)


def planted_teacher(T: int, rank: int, seed: int = 0):
    """The planted teacher ``f*`` of the ``teacher`` task and its fixed token encoding (Chapter 9).

    The paper's architecture with :data:`TEACHER_SHAPE` (``L`` blocks, width ``N``); every matrix is
    ``U diag(σ) Vᵀ`` with Haar-random orthogonal ``U, V`` and ``rank`` singular values equal to
    ``TEACHER_SHAPE["sigma"]`` (``rank = 0``: all ``N``), the rest exactly 0; the readout is a random
    unit vector. Returns ``(model, embedding)``; both are fixed by ``seed`` (the task's teacher, not
    the student's seed).

    >>> from bounds_lib.theory.norms import singular_values
    >>> net, _ = planted_teacher(16, 1)
    >>> s = singular_values(net.blocks[0].W_M)
    >>> round(float(s[0]), 12), bool(s[1] < 1e-12)
    (3.0, True)
    """
    from scipy.stats import ortho_group

    from ..theory.model import Block, SingleHeadTransformer

    L, N, sigma = TEACHER_SHAPE["L"], TEACHER_SHAPE["N"], TEACHER_SHAPE["sigma"]
    check_scalar(rank, f"rank (0: full; at most {N})", int, min_val=0, max_val=N)
    r = N if rank == 0 else rank
    rng = np.random.default_rng([seed, 6, r])
    s = np.zeros(N)
    s[:r] = sigma

    def planted():
        U = ortho_group.rvs(N, random_state=rng)
        V = ortho_group.rvs(N, random_state=rng)
        return (U * s) @ V.T

    blocks = tuple(Block(planted(), planted(), planted()) for _ in range(L))
    w = rng.standard_normal(N)
    emb = token_embedding(T, N, int(rng.integers(2 ** 31)))
    return SingleHeadTransformer(blocks, w / np.linalg.norm(w)), emb


@lru_cache(maxsize=8)
def teacher_labels_all(T: int, rank: int, seed: int = 0) -> np.ndarray:
    """Clean labels ``±1`` of all ``2^T`` inputs (order of :func:`all_bits`): ``f*`` above its median.

    Computed once per ``(T, rank, seed)`` (deterministic; the returned array is read-only). Ties at the
    median (none in practice: ``f*`` takes distinct values) go to ``−1``; exactly half of the inputs are
    ``+1`` when ``f*`` has no ties.

    >>> y = teacher_labels_all(10, 1)
    >>> y.shape, float(y.mean())
    ((1024,), 0.0)
    """
    from ..theory.model import forward

    net, emb = planted_teacher(T, rank, seed)
    bits = all_bits(T)
    f = np.concatenate([forward(net, encode(bits[i:i + 4096], emb)) for i in range(0, bits.shape[0], 4096)])
    y = np.where(f > np.median(f), 1.0, -1.0)
    y.setflags(write=False)
    return y


# ----------------------------------------------------------------------------- the digits task (Ch. 9)


@lru_cache(maxsize=1)
def digits_data():
    """``(pixels, labels, digits)`` of scikit-learn's ``load_digits`` (package data, no network; Chapter 9).

    ``pixels``: shape ``(1797, 8, 8)``, scaled to ``[0, 1]`` (the raw values are 0–16); ``labels``: ``+1``
    for a digit ``≥ 5``, ``−1`` below; ``digits``: the digit 0–9. Read once; the arrays are read-only.

    Raises
    ------
    ImportError
        scikit-learn is not installed (it is in the ``grid`` extra: ``pip install bounds_lib[grid]``).

    Examples
    --------
    >>> pixels, labels, digits = digits_data()
    >>> pixels.shape, float(pixels.max()), int((labels > 0).sum())
    ((1797, 8, 8), 1.0, 896)
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn is pinned in constraints.txt
        raise ImportError("the digits task reads scikit-learn's load_digits: pip install scikit-learn "
                          "(or bounds_lib[grid])") from e
    d = load_digits()
    pixels = np.asarray(d.images, dtype=np.float64) / DIGITS_SHAPE["max_pixel"]
    digits = np.asarray(d.target, dtype=np.int64)
    labels = np.where(digits >= 5, 1.0, -1.0)
    if pixels.shape != (DIGITS_SHAPE["images"], DIGITS_SHAPE["T"], DIGITS_SHAPE["pixels"]):
        raise ValueError(f"load_digits returned images of shape {pixels.shape}; expected "
                         f"({DIGITS_SHAPE['images']}, {DIGITS_SHAPE['T']}, {DIGITS_SHAPE['pixels']})")
    for a in (pixels, labels, digits):
        a.setflags(write=False)
    return pixels, labels, digits


def digits_split(seed: int) -> np.ndarray:
    """The permutation of the 1797 images that seed ``seed`` draws: training images first (Chapter 9).

    A training set of ``n`` images is ``digits_split(seed)[:n]`` and its test set all the others, so the
    split is fixed by the seed alone (and the training sets of one seed are nested in ``n``).

    >>> a = digits_split(0)
    >>> sorted(a.tolist()) == list(range(1797)), bool((a == digits_split(0)).all())
    (True, True)
    """
    check_scalar(seed, "seed", int, min_val=0)
    return np.random.default_rng([seed, 8]).permutation(DIGITS_SHAPE["images"])


def digits_embedding(N: int, seed: int) -> dict:
    """The fixed encoding of the digits task in width ``N``: ``cls`` and ``pos`` (``8×N``) i.i.d.
    ``𝒩(0, I_N/N)``, and the linear map ``A`` (``8×N``, entries ``𝒩(0, 1/(8N))``, so a token's pixel part
    has expected squared norm ``‖x_t‖²/8 ≤ 1``), drawn from the seed and ``N`` (Chapter 9)."""
    check_scalar(N, "N (hidden size)", int, min_val=1)
    rng = np.random.default_rng([seed, 7, N])
    P, T = DIGITS_SHAPE["pixels"], DIGITS_SHAPE["T"]
    return {"cls": rng.standard_normal(N) / np.sqrt(N), "pos": rng.standard_normal((T, N)) / np.sqrt(N),
            "map": rng.standard_normal((P, N)) / np.sqrt(P * N)}


def encode_digits(pixels: np.ndarray, emb: dict) -> np.ndarray:
    """Token matrices ``(n, 9, N)`` of images ``(n, 8, 8)``: row 0 = CLS, row ``t`` = ``(x_t A + p_t)/√2``
    with ``x_t`` the image's ``t``-th pixel row (the model has no positional embedding of its own).

    >>> encode_digits(digits_data()[0][:3], digits_embedding(4, 0)).shape
    (3, 9, 4)
    """
    pixels = np.asarray(pixels, dtype=np.float64)
    tokens = (pixels @ emb["map"] + emb["pos"][None]) / np.sqrt(2.0)
    cls = np.broadcast_to(emb["cls"], (pixels.shape[0], 1, emb["cls"].size))
    return np.concatenate([cls, tokens], axis=1)


def _check_digits_n(n: int) -> int:
    return check_scalar(n, f"n (training images; at most {DIGITS_SHAPE['images'] - 1}, so a test image is left)",
                        int, min_val=1, max_val=DIGITS_SHAPE["images"] - 1)


def _sample_digits(task, n, stream):
    n = _check_digits_n(n)
    check_scalar(stream, "seed (the stream: the digits task has only the training stream 0)", int, min_val=0,
                 max_val=0)
    pixels, labels, _ = digits_data()
    idx = digits_split(task.seed)[:n]
    y = labels[idx].copy()
    if task.label_noise > 0:  # the teacher's flip stream: the noisy labels of the training set
        flip = np.random.default_rng([task.seed, 5, stream]).random(n) < task.label_noise
        y = np.where(flip, -y, y)
    return encode_digits(pixels[idx], digits_embedding(task.N, task.seed)), y, idx


def heldout_digits(task: BooleanTask, n_train: int):
    """``(X, y, idx)``: every image not among the ``n_train`` training images of ``task`` (clean labels).

    The test set of the digits task (Chapter 9): its error estimates the population error, with
    standard deviation at most ``½/√(1797 − n_train)`` (0.0122 at ``n_train = 128``).

    >>> X, y, idx = heldout_digits(BooleanTask(kind="digits", T=8, s=1, N=4), 128)
    >>> X.shape, len(set(idx) & set(sample(BooleanTask(kind="digits", T=8, s=1, N=4), 128, 0)[2]))
    ((1669, 9, 4), 0)
    """
    if task.kind != "digits":
        raise ValueError(f"heldout_digits needs the digits task, got kind {task.kind!r}")
    n_train = _check_digits_n(n_train)
    pixels, labels, _ = digits_data()
    idx = digits_split(task.seed)[n_train:]
    return encode_digits(pixels[idx], digits_embedding(task.N, task.seed)), labels[idx].copy(), idx
