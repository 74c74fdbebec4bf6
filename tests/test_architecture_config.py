"""What :func:`~bounds_lib.checkpoints.detect_architecture` reads from a config, in memory and exactly: each size's
name in its error, the defaults transformers applies (GPT-2's ``4 · hidden``, Gemma 2's activation, Mixtral's
eight experts), the messages of an unsupported or absent ``model_type`` and of heads that do not divide, and
more layers in the weights than in the config refused unless asked for."""
from __future__ import annotations

import pytest

from bounds_lib.checkpoints import CheckpointError, detect_architecture, random_bert_state_dict
from bounds_lib.checkpoints.formats import StateDictSource
from bounds_lib.checkpoints.layouts import SUPPORTED_MODEL_TYPES, _family_activation, _spec_from_config

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
         "num_key_value_heads": 1, "intermediate_size": 16}


def _spec(config: dict, family: str | None = None):
    source = StateDictSource({}, config, description="the test model")
    return _spec_from_config(source, family or config["model_type"], config["model_type"], "")


@pytest.mark.parametrize("key, name", [
    ("num_hidden_layers", "number of layers"), ("hidden_size", "hidden size"),
    ("num_attention_heads", "number of heads"), ("num_key_value_heads", "number of key/value heads"),
    ("intermediate_size", "feed-forward width")])
def test_each_size_is_named_in_its_error(key, name):
    with pytest.raises(CheckpointError) as e:
        _spec({**LLAMA, key: 0})
    assert str(e.value) == f"config.json: {name} must be a positive integer, got 0"


def test_gpt2_without_n_inner_is_four_times_a_checked_hidden_size():
    gpt2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2}
    assert _spec(gpt2).d_ff == 32
    with pytest.raises(CheckpointError) as e:
        _spec({**gpt2, "n_embd": "8"})
    assert str(e.value) == "config.json: hidden size must be a positive integer, got '8'"


def test_heads_that_do_not_divide_the_hidden_size_are_named():
    with pytest.raises(CheckpointError) as e:
        _spec({**LLAMA, "num_attention_heads": 3, "num_key_value_heads": 3})
    assert str(e.value) == ("the test model: 3 attention heads do not divide the hidden size 8; cannot split the "
                            "projections into heads")


def test_mixtral_has_eight_experts_unless_its_config_says_otherwise():
    assert _spec({**LLAMA, "model_type": "mixtral"}).n_experts == 8
    assert _spec({**LLAMA, "model_type": "mixtral", "num_local_experts": 3}).n_experts == 3
    assert _spec(LLAMA).n_experts == 0


def test_gemma2_reads_hidden_activation_with_transformers_default():
    assert _family_activation({}, "gemma", "gemma2", "d") == "gelu_pytorch_tanh"
    assert _family_activation({"hidden_activation": "gelu"}, "gemma", "gemma2", "d") == "gelu"
    with pytest.raises(CheckpointError) as e:
        _family_activation({"hidden_activation": "relu2"}, "gemma", "gemma2", "the gemma")
    assert str(e.value).startswith("the gemma: config.json hidden_activation = 'relu2' is not a supported activation")


@pytest.mark.parametrize("config, message", [
    ({}, "the test model: config.json has no 'model_type'; supported: " + ", ".join(SUPPORTED_MODEL_TYPES)),
    ({"model_type": "t5"}, "the test model: unsupported architecture 't5'; supported model types: "
                           + ", ".join(SUPPORTED_MODEL_TYPES)),
])
def test_an_absent_or_unknown_model_type_lists_the_supported_ones(config, message):
    with pytest.raises(CheckpointError) as e:
        detect_architecture(StateDictSource({}, config, description="the test model"))
    assert str(e.value) == message and "bert, roberta, xlm-roberta, camembert" in message


def test_more_layers_than_the_config_says_are_refused_by_default():
    state, config = random_bert_state_dict(n_layers=3)
    source = StateDictSource(state, {**config, "num_hidden_layers": 2}, description="the test model")
    with pytest.raises(CheckpointError, match="config.json says 2 layers but the weights hold at least 3"):
        detect_architecture(source)
    assert detect_architecture(source, allow_extra_layers=True).n_layers == 2
