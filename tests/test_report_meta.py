"""A JSON report's meta describes what the report contains (issue 51, item 4), under every option that changes
what is computed: ``--mode``, ``--dtype``, ``--entrywise``/``--no-entrywise``, ``--logit-scale``,
``--gamma-lphi``, ``--layers``, ``--device``.

Before: in paper mode the default ``--no-entrywise`` still wrote the head products' (1,1) norms and B₁₁
(the explicit N×N products give them for free) while ``meta.entrywise_11_norms_of_heads`` said ``false``.
Now the (1,1) norms of the heads are computed exactly when asked, in both modes
(:func:`bounds_lib.analysis.kernel._head_spectra`), and the test reads the flag against the numbers."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from tiny_checkpoints import bert_encoder_weights, write_tiny_bert

from bounds_lib.cli import main

HEADS = ("QK", "V")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("m")
    return write_tiny_bert(d, hidden=16, layers=2, heads=2, intermediate=32,
                           weights=bert_encoder_weights(hidden=16, intermediate=32, layers=2, dtype=np.float64))


def _report(model, tmp_path, *options) -> dict:
    out = tmp_path / "r.json"
    assert main(["analyze", str(model), "--json", str(out), "--jobs", "1", "--quiet", "--no-progress",
                 *options]) == 0
    return json.loads(out.read_text())


def _contents(rep: dict) -> dict:
    """What the report holds, read from its numbers (not from its meta)."""
    heads = [m for m in rep["matrices"] if m["kind"] in HEADS]
    has_11 = [m["norm_11"] is not None for m in heads]
    assert all(has_11) or not any(has_11), "some heads' (1,1) norms and not others"
    return {"mode": rep["mode"], "dtype": rep["dtype"], "entrywise": all(has_11),
            "B_11": rep["summary"]["B_edelman_11_extension"]["log10"] is not None,
            "layers": len({m["layer"] for m in rep["matrices"]}),
            "logit_scale": rep["options"]["logit_scale"], "gamma_L_phi": rep["options"]["gamma_L_phi"]}


def _said(meta: dict) -> dict:
    """What the report's meta says it holds."""
    command = meta["command"]
    layers = int(command[command.index("--layers") + 1]) if "--layers" in command else 2
    return {"mode": meta["mode"], "dtype": meta["dtype"], "entrywise": meta["entrywise_11_norms_of_heads"],
            "B_11": meta["entrywise_11_norms_of_heads"], "layers": layers, "logit_scale": meta["logit_scale"],
            "gamma_L_phi": "--gamma-lphi" in command}


@pytest.mark.parametrize("mode, entrywise, dtype", list(itertools.product(
    ("clean", "paper"), ("--entrywise", "--no-entrywise", None), ("float64", "float32"))))
def test_the_meta_says_what_the_report_holds(mode, entrywise, dtype, model, tmp_path):
    rep = _report(model, tmp_path, "--mode", mode, "--dtype", dtype, *([entrywise] if entrywise else []))
    assert _said(rep["meta"]) == _contents(rep)
    assert _contents(rep)["entrywise"] is (entrywise == "--entrywise")


@pytest.mark.parametrize("options", [("--logit-scale", "0.5"), ("--gamma-lphi",), ("--layers", "1"),
                                     ("--device", "torch-cpu"), ("--mode", "paper", "--device", "torch-cpu")])
def test_the_meta_says_what_each_other_option_computed(options, model, tmp_path):
    if "torch-cpu" in options:
        pytest.importorskip("torch")
    rep = _report(model, tmp_path, *options)
    assert _said(rep["meta"]) == _contents(rep)
    if "--device" in options:
        assert rep["meta"]["device"] == "torch-cpu"


def test_the_paper_mode_without_entrywise_holds_no_11_norms_of_heads(model, tmp_path):
    """The contradiction of round five, directly: paper mode, no flag."""
    rep = _report(model, tmp_path, "--mode", "paper")
    assert rep["meta"]["entrywise_11_norms_of_heads"] is False
    assert all(m["norm_11"] is None for m in rep["matrices"] if m["kind"] in HEADS)
    assert all(m["norm_11"] is not None for m in rep["matrices"] if m["kind"] not in HEADS)
    assert rep["summary"]["B_edelman_11_extension"]["log10"] is None
