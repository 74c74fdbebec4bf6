"""Sparse Boolean tasks and the deterministic trainer (Chapter 7)."""
import dataclasses
import math

import numpy as np
import pytest
import torch

from bounds_lib.studies.tasks import BooleanTask, boolean_labels, encode, sample, task_support, token_embedding
from bounds_lib.studies.training import TrainConfig, evaluate, logistic_loss, train
from bounds_lib.studies.torch_model import TorchTransformer

TINY = TrainConfig(L=2, N=8, n_train=32, T=8, s=3, steps=12, n_test=128, seed=5)


def test_labels_closed_form():
    bits = np.array([[1, 1, 1, -1], [1, -1, -1, 1], [-1, -1, 1, 1]], dtype=float)
    sup = np.array([0, 1, 2])
    assert boolean_labels(bits, sup, "majority").tolist() == [1, -1, -1]
    assert boolean_labels(bits, sup, "and").tolist() == [1, -1, -1]
    assert boolean_labels(bits, sup, "parity").tolist() == [1, 1, 1]
    assert boolean_labels(bits, np.array([1, 3]), "parity").tolist() == [-1, -1, -1]


@pytest.mark.parametrize("kind", ["majority", "and", "parity"])
def test_labels_depend_only_on_support(kind):
    task = BooleanTask(kind=kind, T=10, s=3, N=8, seed=2)
    X, y, bits = sample(task, 500, 0)
    flipped = bits.copy()
    off = np.setdiff1d(np.arange(10), task.support)
    flipped[:, off] *= -1
    assert np.array_equal(boolean_labels(flipped, task.support, kind), y)
    assert set(np.unique(y)) <= {-1.0, 1.0}


def test_random_labels_are_independent_of_the_input():
    task = BooleanTask(kind="parity", T=10, s=3, N=8, seed=2, random_labels=True)
    _, y, bits = sample(task, 4000, 0)
    true = boolean_labels(bits, task.support, "parity")
    agree = float(np.mean(y == true))
    assert abs(agree - 0.5) < 0.05 and abs(float(np.mean(y))) < 0.05


def test_encoding_and_streams():
    task = BooleanTask(T=6, s=3, N=5, seed=1)
    X, y, bits = sample(task, 10, 0)
    emb = token_embedding(6, 5, 1)
    assert X.shape == (10, 7, 5)
    assert np.array_equal(X[:, 0], np.broadcast_to(emb["cls"], (10, 5)))
    np.testing.assert_allclose(X[:, 1:], encode(bits, emb)[:, 1:])
    X2, _, bits2 = sample(task, 10, 1)
    assert not np.array_equal(bits, bits2)  # train and test streams differ
    assert np.array_equal(task_support(6, 3, 1), task.support)


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="xor"), "unknown task"), (dict(s=9, T=8), "1 <= s <= T"), (dict(kind="majority", s=2), "odd"),
])
def test_bad_tasks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BooleanTask(**kwargs)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(T=8.0), TypeError, r"T \(number of bits\) must be an integer, got float 8.0"),
    (dict(s=True), TypeError, "got bool True"), (dict(kind=None), TypeError, "task kind must be a str"),
    (dict(random_labels=1), TypeError, "random_labels must be True or False"),
    (dict(N=0), ValueError, r"N \(hidden size\) == 0"), (dict(seed=-1), ValueError, "seed == -1"),
])
def test_bad_task_types_and_values(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        BooleanTask(**kwargs)


def test_sample_sizes_are_checked():
    task = BooleanTask()
    with pytest.raises(ValueError, match=r"n \(number of examples\) == 0"):
        sample(task, 0, 0)
    with pytest.raises(TypeError, match="must be an integer, got float 10.0"):
        sample(task, 10.0, 0)


def test_logistic_loss_and_error():
    f = torch.tensor([0.0, 2.0, -1.0])
    y = torch.tensor([1.0, 1.0, 1.0])
    expected = (math.log(2) + math.log1p(math.exp(-2)) + math.log1p(math.exp(1))) / 3
    assert abs(float(logistic_loss(f, y)) - expected) < 1e-6

    class Const(TorchTransformer):
        def forward(self, X):
            return X[:, 0, 0]

    m = Const(1, 2)
    X = torch.tensor([[[1.0, 0]], [[-1.0, 0]], [[0.0, 0]], [[2.0, 0]]])
    loss, err = evaluate(m, X, torch.tensor([1.0, 1.0, 1.0, -1.0]))
    assert err == 0.75  # f = 0 counts as an error


def test_same_seed_same_everything():
    torch.set_num_threads(1)
    a, b = train(TINY), train(TINY)
    assert a.loss_curve == b.loss_curve
    sa, sb = a.torch_model.state_dict(), b.torch_model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.metrics() == b.metrics()


def test_other_seed_differs_and_training_reduces_loss():
    torch.set_num_threads(1)
    a = train(TINY)
    c = train(dataclasses.replace(TINY, seed=6))
    assert a.loss_curve != c.loss_curve
    assert a.loss_curve[-1] < a.loss_curve[0]
    assert a.gap_error == a.test_error - a.train_error


def test_result_model_is_the_trained_weights():
    torch.set_num_threads(1)
    r = train(TINY)
    m = r.model
    assert m.L == TINY.L and m.N == TINY.N
    assert np.array_equal(m.blocks[1].W_V, r.torch_model.W_V[1].detach().double().numpy())


STOP = dataclasses.replace(TINY, kind="parity", s=2, steps=200, lr=1e-2, stop_loss=0.3)


def test_stop_loss_is_deterministic_and_stops_at_the_first_step_below_target():
    torch.set_num_threads(1)
    a, b = train(STOP), train(STOP)
    assert a.reached_target is True and 0 < a.steps_taken < STOP.steps
    assert (a.steps_taken, a.loss_curve, a.metrics()) == (b.steps_taken, b.loss_curve, b.metrics())
    sa, sb = a.torch_model.state_dict(), b.torch_model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # the curve holds the loss before each update, then the loss that stopped the run
    assert len(a.loss_curve) == a.steps_taken + 1
    assert a.loss_curve[-1] <= STOP.stop_loss < min(a.loss_curve[:-1])
    assert abs(a.train_loss - a.loss_curve[-1]) < 1e-6  # the returned weights are the stopped ones
    # a fixed-step run of exactly steps_taken steps gives the same weights
    fixed = train(dataclasses.replace(STOP, stop_loss=None, steps=a.steps_taken))
    sf = fixed.torch_model.state_dict()
    assert all(torch.equal(sa[k], sf[k]) for k in sa)
    assert fixed.reached_target is None and fixed.steps_taken == a.steps_taken
    assert fixed.loss_curve == a.loss_curve[:-1]


def test_stop_loss_not_reached_is_reported():
    torch.set_num_threads(1)
    r = train(dataclasses.replace(STOP, steps=3, stop_loss=1e-6))
    assert r.reached_target is False and r.steps_taken == 3 and len(r.loss_curve) == 3
    assert r.train_loss > 1e-6


def test_config_dict_omits_an_unset_stop_loss():
    optional = ("stop_loss", "weight_decay", "nuclear", "rank", "disjoint_test", "teacher_rank", "label_noise",
                "teacher_seed")
    assert TINY.as_dict() == {k: v for k, v in dataclasses.asdict(TINY).items() if k not in optional}
    assert STOP.as_dict()["stop_loss"] == 0.3
    assert TrainConfig(**TINY.as_dict()) == TINY and TrainConfig(**STOP.as_dict()) == STOP


def test_chapter8_choices_round_trip_and_reject_bad_values():
    cfg = dataclasses.replace(TINY, weight_decay=0.1, nuclear=1e-3, rank=2, disjoint_test=True)
    d = cfg.as_dict()
    assert d["weight_decay"] == 0.1 and d["rank"] == 2 and d["disjoint_test"] is True
    assert TrainConfig(**d) == cfg
    for bad in (dict(weight_decay=-1.0), dict(nuclear=float("nan")), dict(rank=TINY.N + 1), dict(lr=0.0),
                dict(steps=-1), dict(stop_loss=-0.1), dict(kind="xor"), dict(act="swish"), dict(n_test=0)):
        with pytest.raises(ValueError):
            dataclasses.replace(TINY, **bad)
    for bad in (dict(rank=1.5), dict(rank=1.0), dict(L=2.0), dict(steps=True), dict(lr="1e-2"),
                dict(weight_decay=None), dict(random_labels=0), dict(disjoint_test="yes"), dict(kind=3)):
        with pytest.raises(TypeError):
            dataclasses.replace(TINY, **bad)
    # a real parameter takes an integer; the dict keeps the value as given (--reuse matches on it)
    assert dataclasses.replace(TINY, weight_decay=1).as_dict()["weight_decay"] == 1


def test_low_rank_model_has_rank_at_most_r():
    torch.set_num_threads(1)
    res = train(dataclasses.replace(TINY, rank=2, steps=5))
    from bounds_lib.theory.norms import numerical_rank, singular_values
    for b in res.model.blocks:
        for W in (b.W_QK, b.W_V, b.W_M):
            assert numerical_rank(singular_values(W)) <= 2


def test_nuclear_penalty_and_weight_decay_shrink_the_spectrum():
    torch.set_num_threads(1)
    from bounds_lib.theory.norms import singular_values
    base = dataclasses.replace(TINY, steps=60)

    def nuclear_sum(cfg):
        m = train(cfg).model
        return sum(singular_values(W).sum() for b in m.blocks for W in (b.W_QK, b.W_V, b.W_M))

    plain = nuclear_sum(base)
    assert nuclear_sum(dataclasses.replace(base, nuclear=0.05)) < 0.9 * plain
    assert nuclear_sum(dataclasses.replace(base, weight_decay=2.0)) < 0.9 * plain


def test_disjoint_test_inputs_and_per_example_results():
    torch.set_num_threads(1)
    from bounds_lib.studies.tasks import sample
    cfg = dataclasses.replace(TINY, T=6, n_train=40, n_test=20, disjoint_test=True, steps=3)
    res = train(cfg)
    _, _, btr = sample(cfg.task(), cfg.n_train, 0)
    from bounds_lib.studies.training import disjoint_test_sample
    _, _, bte, dropped = disjoint_test_sample(cfg.task(), cfg.n_test, btr)
    train_set = {r.tobytes() for r in btr}
    assert not any(r.tobytes() in train_set for r in bte)
    assert dropped > 0  # with 2^6 strings and 40 training inputs, some candidates were training inputs
    assert res.test_correct.shape == (20,) and abs(res.test_correct.mean() - (1 - res.test_error)) < 1e-12
    with pytest.raises(TypeError, match="n_test must be an integer, got float"):
        disjoint_test_sample(cfg.task(), 20.0, np.array([[1.0, 1, 1]]))
    with pytest.raises(ValueError, match="too few strings"):
        disjoint_test_sample(dataclasses.replace(cfg, T=3).task(), 20, np.array([[1.0, 1, 1]]))


def test_halfspace_labels_closed_form():
    from bounds_lib.studies.tasks import halfspace_weights

    v = halfspace_weights(3, seed=0)
    bits = np.array([[1, 1, 1], [-1, -1, -1], [1, -1, 1]], dtype=float)
    expected = np.where(bits @ v >= 0, 1.0, -1.0)
    assert boolean_labels(bits, np.arange(3), "halfspace", seed=0).tolist() == expected.tolist()
    # the two constant strings always get opposite labels (a linear form without offset)
    assert boolean_labels(bits[:2], np.arange(3), "halfspace", seed=0).sum() == 0
    X, y, b = sample(BooleanTask(kind="halfspace", T=6, s=6, N=4, seed=1), 200, 0)
    assert set(np.unique(y)) == {-1.0, 1.0} and 0.2 < np.mean(y > 0) < 0.8
