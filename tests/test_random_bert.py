"""``bounds_lib.checkpoints.random_bert_state_dict``, the in-memory BERT of the examples and many tests: its
names, shapes, dtype, config, draws and refusals, pinned (a mutation run of checkpoints.layouts after the
move found 45 changes to it that no test saw)."""
import numpy as np
import pytest

from bounds_lib.checkpoints import detect_architecture, open_checkpoint, random_bert_state_dict

ROLES = ("attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight",
         "attention.output.dense.weight", "intermediate.dense.weight", "output.dense.weight")


def test_defaults_names_shapes_and_config():
    sd, cfg = random_bert_state_dict()
    assert cfg == {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                   "intermediate_size": 16, "hidden_act": "gelu"}
    assert list(sd) == [f"encoder.layer.{layer}.{r}" for layer in range(2) for r in ROLES]
    shapes = [(8, 8)] * 4 + [(16, 8), (8, 16)]
    assert [a.shape for a in sd.values()] == shapes * 2
    assert all(a.dtype == np.float64 for a in sd.values())


def test_the_draws_are_std_times_the_seeded_standard_normals_in_name_order():
    sd, _ = random_bert_state_dict(n_layers=3, hidden=6, n_heads=3, d_ff=5, seed=7, std=0.25)
    rng = np.random.default_rng(7)
    for name, a in sd.items():
        assert np.array_equal(a, 0.25 * rng.standard_normal(a.shape)), name
    default = random_bert_state_dict()[0]
    rng = np.random.default_rng(0)
    assert all(np.array_equal(a, 0.5 * rng.standard_normal(a.shape)) for a in default.values())


def test_it_reads_as_the_bert_it_says_it_is():
    sd, cfg = random_bert_state_dict(n_layers=3, hidden=12, n_heads=4, d_ff=20)
    arch = detect_architecture(open_checkpoint(sd, config=cfg))
    got = (arch.family, arch.n_layers, arch.hidden, arch.n_heads, arch.head_dim, arch.d_ff)
    assert got == ("bert", 3, 12, 4, 3, 20)


@pytest.mark.parametrize("kw, error, message", [
    ({"n_layers": 0}, ValueError, "n_layers == 0, must be >= 1"),
    ({"hidden": 0}, ValueError, "hidden (hidden size) == 0, must be >= 1"),
    ({"n_heads": 0}, ValueError, "n_heads == 0, must be >= 1"),
    ({"d_ff": 0}, ValueError, "d_ff (feed-forward width) == 0, must be >= 1"),
    ({"std": 0.0}, ValueError, "std == 0.0, must be > 0"),
    ({"seed": -1}, ValueError, "seed == -1, must be >= 0"),
    ({"hidden": 6, "n_heads": 4}, ValueError, "n_heads = 4 does not divide hidden = 6"),
    ({"n_layers": 1.0}, TypeError, "n_layers must be an integer, got float 1.0"),
    ({"hidden": 8.0}, TypeError, "hidden (hidden size) must be an integer, got float 8.0"),
    ({"n_heads": True}, TypeError, "n_heads must be an integer"),
    ({"d_ff": "16"}, TypeError, "d_ff (feed-forward width) must be an integer"),
    ({"seed": 0.5}, TypeError, "seed must be an integer"),
    ({"std": "a"}, TypeError, "std must be a real number, got str 'a'"),
])
def test_bad_arguments_are_refused_with_the_argument_named(kw, error, message):
    with pytest.raises(error) as err:
        random_bert_state_dict(**kw)
    assert str(err.value).startswith(message)


def test_the_smallest_valid_model():
    sd, cfg = random_bert_state_dict(n_layers=1, hidden=1, n_heads=1, d_ff=1, std=1e-300)
    assert len(sd) == 6 and all(a.shape == (1, 1) for a in sd.values()) and cfg["num_hidden_layers"] == 1


def _spec(family, **kw):
    from bounds_lib.checkpoints import ArchitectureSpec

    base = dict(n_layers=1, hidden=16, n_heads=4, n_kv_heads=2, head_dim=4, d_ff=24, activation="silu", prefix="")
    return ArchitectureSpec(family, family, **{**base, **kw})


@pytest.mark.parametrize("family, role, hint", [
    ("phi3", "qkv", " (rows [q | k | v] = (4 + 2·2 key/value heads) × head_dim 4; check num_attention_heads, "
                    "num_key_value_heads and head_dim)"),
    ("gpt_neox", "qkv", " (rows: 4 heads × [q | k | v] × head_dim 4; check num_attention_heads)"),
    ("phi3", "gate_up", " (rows [gate | up] = 2 × intermediate_size 24)"),
    *[("llama", role, " (4 query heads, 2 key/value heads, head_dim 4; check num_key_value_heads and head_dim)")
      for role in ("q", "k", "v", "o")],
    ("llama", "f_in", ""), ("bert", "q", ""), ("bert", "qkv", ""), ("gpt_neox", "q", ""),
])
def test_each_shape_hint_names_what_the_expected_shape_is_made_of(family, role, hint):
    from bounds_lib.checkpoints.layouts import _shape_hint

    assert _shape_hint(_spec(family), role) == hint


def test_the_in_memory_hint_says_what_to_pass_instead():
    from bounds_lib.checkpoints.layouts import _in_memory_hint

    class Names:
        def __init__(self, *names):
            self._names = names

        def names(self):
            return list(self._names)

    assert _in_memory_hint(Names("model.layers.0.mlp.experts.gate_up_proj"), "mixtral") == (
        " (these are transformers' in-memory names ('…mlp.experts.gate_up_proj'): pass the model itself, or a "
        "folder written by save_pretrained)")
    assert _in_memory_hint(Names("model.layers.0.mlp.experts.gate_up_proj"), "llama") == ""
    assert _in_memory_hint(Names("model.layers.0.block_sparse_moe.experts.0.w1.weight"), "mixtral") == ""
