"""Bad input, round two (issue 21): ambiguous checkpoints, activations, falsy config values, outputs that
are not regular files, inputs a run must not write over, concurrent runs, signals, zero matrices,
odd paths and deadlines.

Same contract as tests/test_bad_inputs.py (its helpers are reused): a refused case exits ≠ 0 with one
``bounds-lib: error:`` line naming the problem and what is supported, and leaves no output; an
accepted case gives the numbers derived here independently (never typed in).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_bad_inputs import F, H, L, N, assert_one_clear_line, run_cli, tensors, write_model

from bounds_lib.checkpoints import ACTIVATION_L_PHI, CheckpointError, detect_architecture, open_checkpoint
from bounds_lib.cli import main
from bounds_lib.scoring import analyze, score
from bounds_lib.spectra import compute_spectra

SIZES = {"hidden": N, "heads": H, "intermediate": F, "layers": L}


def _two_stacks(d: Path, a: str, b: str) -> Path:
    """One file holding two BERT layer stacks, under the name prefixes ``a`` and ``b`` (other weights)."""
    t = {a + k: v for k, v in tensors(seed=0).items()}
    t.update({b + k: v for k, v in tensors(seed=1).items()})
    return write_model(d, t)


# ------------------------------------------------------------------ 1. two layer stacks in one file


@pytest.mark.parametrize("a, b", [("student.", "teacher."), ("encoder_q.", "encoder_k."), ("bert.", "bart."),
                                  ("", "teacher.")],
                         ids=["student/teacher", "encoder_q/encoder_k", "bert/bart", "bare/teacher"])
def test_two_layer_stacks_are_refused_with_the_candidates(a, b, tmp_path, capsys):
    """Which stack was read used to follow the hash seed (the same file gave 10^2.70 or 10^1.37); now the
    file is refused, the message lists both prefixes and says how to choose."""
    model = _two_stacks(tmp_path / "m", a, b)
    rc, cap, out = run_cli(capsys, tmp_path, model)
    assert_one_clear_line(rc, cap, out, "2 'bert' layer stacks")
    assert repr(a) in cap.err and repr(b) in cap.err and "--prefix" in cap.err
    with pytest.raises(CheckpointError, match="ambiguous"):
        detect_architecture(open_checkpoint(model))


def test_prefix_picks_a_stack_and_gives_that_models_numbers(tmp_path, capsys):
    """``--prefix teacher.`` gives exactly the numbers of the teacher's weights saved alone."""
    model = _two_stacks(tmp_path / "m", "student.", "teacher.")
    alone = write_model(tmp_path / "teacher_alone", tensors(seed=1))
    for prefix, ref in (("teacher.", alone), ("student.", write_model(tmp_path / "student_alone", tensors(seed=0)))):
        got = analyze(model, prefix=prefix)
        want = analyze(ref)
        assert got.arch.prefix == prefix
        assert (got.log_B_ours_sum, got.log_B_edelman) == (want.log_B_ours_sum, want.log_B_edelman)
    # the two stacks differ, so the choice matters (the test has power)
    assert analyze(model, prefix="student.").log_B_edelman != analyze(model, prefix="teacher.").log_B_edelman
    (tmp_path / "out").mkdir()
    assert main(["analyze", str(model), "--prefix", "teacher.", "--json", str(tmp_path / "out" / "r.json"),
                 "--quiet", "--no-progress"]) == 0
    d = json.loads((tmp_path / "out" / "r.json").read_text())
    assert d["summary"]["B_edelman"]["log10"] == pytest.approx(analyze(alone).log_B_edelman / math.log(10),
                                                               rel=1e-15)


def test_prefix_that_names_no_stack(tmp_path, capsys):
    model = _two_stacks(tmp_path / "m", "student.", "teacher.")
    rc, cap, out = run_cli(capsys, tmp_path, model, "--prefix", "nobody.")
    assert_one_clear_line(rc, cap, out, "no layer stack under the prefix 'nobody.'")
    assert "'student.'" in cap.err and "'teacher.'" in cap.err
    with pytest.raises(TypeError, match="prefix must be"):
        detect_architecture(open_checkpoint(model), prefix=1)


# ------------------------------------------------------------------ 3. the activation of every architecture


def test_every_listed_activation_is_transformers_own_with_its_lipschitz_constant():
    """Each name is a key of transformers' ``ACT2FN``, and its ``L_φ`` bounds the largest slope of
    transformers' own implementation (autograd on a fine grid) and is within 0.002 of it (tight)."""
    torch = pytest.importorskip("torch")
    from transformers.activations import ACT2FN

    x = torch.linspace(-12, 12, 480_001, dtype=torch.float64, requires_grad=True)
    for name, L_phi in ACTIVATION_L_PHI.items():
        assert name in ACT2FN, name
        (g,) = torch.autograd.grad(ACT2FN[name](x).sum(), x)
        slope = float(g.abs().max())
        assert slope <= L_phi + 1e-12 and L_phi - slope < 2e-3, (name, slope, L_phi)


def test_unknown_activation_is_refused_as_transformers_does(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    with pytest.raises(KeyError):  # transformers cannot build such a model
        transformers.BertModel(transformers.BertConfig(hidden_size=N, num_hidden_layers=1, num_attention_heads=H,
                                                       intermediate_size=F, vocab_size=10,
                                                       hidden_act="no_such_activation"))
    for bad in ("no_such_activation", None, 3, "relu2"):
        model = write_model(tmp_path / f"m{bad}", hidden_act=bad)
        rc, cap, out = run_cli(capsys, tmp_path, model)
        assert_one_clear_line(rc, cap, out, f"hidden_act = {bad!r} is not a supported activation; supported: ")
        assert "relu" in cap.err and "silu" in cap.err


def test_score_uses_the_configs_activation(tmp_path):
    """ReLU (L_φ = 1) and GELU (the released 1.13) give Λ that differ by exactly log 1.13 per layer; an
    explicit ``L_phi`` still overrides; a hand-made spectrum with an unknown activation is refused."""
    from dataclasses import replace

    relu = compute_spectra(write_model(tmp_path / "relu", hidden_act="relu"))
    gelu = compute_spectra(write_model(tmp_path / "gelu", hidden_act="gelu"))
    r, g = score(relu), score(gelu)
    assert r.L_phi == ACTIVATION_L_PHI["relu"] == 1.0 and g.L_phi == ACTIVATION_L_PHI["gelu"]
    np.testing.assert_allclose(g.log_Lambda - r.log_Lambda, math.log(ACTIVATION_L_PHI["gelu"]), rtol=1e-12)
    assert r.log_B_edelman < g.log_B_edelman  # a smaller L_φ, smaller depth weights α
    assert score(relu, L_phi=ACTIVATION_L_PHI["gelu"]).log_B_edelman == g.log_B_edelman
    assert r.to_dict()["options"]["L_phi_value"] == 1.0
    weird = replace(relu, arch=replace(relu.arch, activation="no_such_activation"))
    with pytest.raises(ValueError, match="activation 'no_such_activation' has no Lipschitz constant"):
        score(weird)


def test_llama_reads_silu_and_gpt2_reads_gelu_new(tmp_path):
    """The other families' activation keys (``hidden_act``, ``activation_function``, ``activation``)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cases = {
        "llama": (transformers.LlamaConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=12, vocab_size=10), transformers.LlamaModel, "silu"),
        "gpt2": (transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10, n_positions=8,
                                         bos_token_id=0, eos_token_id=0), transformers.GPT2Model, "gelu_new"),
        "distilbert": (transformers.DistilBertConfig(dim=8, n_layers=1, n_heads=2, hidden_dim=12, vocab_size=10,
                                                     max_position_embeddings=8, activation="relu"),
                       transformers.DistilBertModel, "relu"),
    }
    for name, (cfg, cls, act) in cases.items():
        torch.manual_seed(0)
        cls(cfg).save_pretrained(tmp_path / name)
        rep = analyze(tmp_path / name)
        assert rep.arch.activation == act and rep.L_phi == ACTIVATION_L_PHI[act]


# ------------------------------------------------------------------ 4. falsy config values are not defaults


def test_gpt2_n_inner_zero_is_refused_as_transformers_does(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10, n_positions=8, bos_token_id=0,
                                  eos_token_id=0)
    torch.manual_seed(0)
    transformers.GPT2Model(cfg).save_pretrained(tmp_path / "m")
    f = tmp_path / "m" / "config.json"
    assert analyze(tmp_path / "m").arch.d_ff == 4 * 8            # n_inner: null means 4·n_embd
    f.write_text(json.dumps({**json.loads(f.read_text()), "n_inner": 0}))
    transformers.logging.set_verbosity_error()
    with pytest.raises(RuntimeError):                           # transformers: size mismatch, refused
        transformers.GPT2Model.from_pretrained(tmp_path / "m")
    rc, cap, out = run_cli(capsys, tmp_path, tmp_path / "m")
    assert_one_clear_line(rc, cap, out, "feed-forward width must be a positive integer, got 0")


def test_zero_key_value_heads_is_refused(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.LlamaConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, intermediate_size=12, vocab_size=10)
    torch.manual_seed(0)
    transformers.LlamaModel(cfg).save_pretrained(tmp_path / "m")
    f = tmp_path / "m" / "config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), "num_key_value_heads": 0}))
    rc, cap, out = run_cli(capsys, tmp_path, tmp_path / "m")
    assert_one_clear_line(rc, cap, out, "number of key/value heads must be a positive integer, got 0")
    with pytest.raises(ZeroDivisionError):  # transformers cannot build it either
        transformers.LlamaModel(transformers.LlamaConfig(**{**cfg.to_dict(), "num_key_value_heads": 0}))

