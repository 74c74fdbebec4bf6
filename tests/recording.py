"""Recorders for the tests of the chapters' checks: a random generator that keeps every draw, and a stand-in for the
harness's ``falsify`` that keeps every call. With them a test sees what a check drew and asked, and rebuilds it."""
from __future__ import annotations

import numpy as np

from bounds_lib.checks.harness import Falsification


class Recording:
    """A ``numpy.random.Generator`` (seeded ``seed``) recording each draw as ``(method, args, kwargs, result)``;
    an array result is kept as drawn (a copy: the caller may change its own in place)."""

    def __init__(self, seed):
        self.rng, self.calls = np.random.default_rng(seed), []

    def __getattr__(self, name):
        def draw(*args, **kwargs):
            out = getattr(self.rng, name)(*args, **kwargs)
            self.calls.append((name, args, kwargs, out.copy() if isinstance(out, np.ndarray) else out))
            return out
        return draw

    def take(self, n):
        """The first ``n`` draws not yet taken."""
        out, self.calls = self.calls[:n], self.calls[n:]
        return out


def record_searches(monkeypatch, module) -> list:
    """Replace ``module.falsify`` by a recorder: each call's arguments kept as a dict (``name``, ``ratio``,
    ``sample``, ``rng``, and the keywords); the ``k``-th call returns ratios ``[k, k + 0.5]`` and one optimiser
    ratio ``10k``, so a test can see how the parts were joined."""
    seen = []

    def falsify(name, ratio, sample, rng, **kw):
        seen.append(dict(name=name, ratio=ratio, sample=sample, rng=rng, **kw))
        k = len(seen)
        return Falsification(name, np.array([k, k + 0.5]), np.array([10.0 * k]))

    monkeypatch.setattr(module, "falsify", falsify)
    return seen


def record_compositions(monkeypatch, module, attr) -> list:
    """Replace ``module.attr`` (a composition search) by a recorder of ``(generator state, keywords)``; a run asked
    for with ``weaken`` or a ``softmax_const`` (the power runs) returns a violation (1.5), any other none (0.5)."""
    calls = []

    def fake(rng, **kw):
        calls.append((rng.bit_generator.state, kw))
        return Falsification("c", np.array([1.5 if kw.get("weaken") or kw.get("softmax_const") else 0.5]))

    monkeypatch.setattr(module, attr, fake)
    return calls
