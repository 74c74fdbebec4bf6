"""Model layouts (Chapter 6): which tensors of a checkpoint hold the paper's matrices, and how to read them.

The ``config.json`` ``model_type`` values read (:data:`SUPPORTED_MODEL_TYPES`) map onto layout
families; each family's tensor names are a table (``_ROLES``: the layer stack and, for every role —
``q``, ``k``, ``v``, ``o``, a fused ``qkv``, the feed-forward maps — the name inside a block), and so
are the config keys of its sizes and activation (``_SIZE_KEYS``, ``_ACTIVATION_KEYS``).
:func:`detect_architecture` reads a source's layout into an :class:`ArchitectureSpec`, checking every
layer's tensors against the config; :data:`ACTIVATION_L_PHI` lists the activations accepted with
their global Lipschitz constants. :func:`random_bert_state_dict` builds a tiny BERT-layout model for
examples and tests. The layouts themselves are described in :mod:`bounds_lib.checkpoints`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..core.validation import check_scalar
from ..theory.propagation import LPHI_GELU_RELEASED
from .formats import CheckpointError, TensorSource


# ``config.json`` model_type -> layout family (the tensor names and how they split into the paper's matrices)
_FAMILY_OF = {
    "bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "camembert": "bert", "electra": "bert",
    "distilbert": "distilbert", "gpt2": "gpt2",
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama",
    "gemma": "gemma", "gemma2": "gemma",
    "phi3": "phi3", "gpt_neox": "gpt_neox", "opt": "opt", "mixtral": "mixtral", "vit": "vit",
}
#: ``config.json`` ``model_type`` values this module reads.
SUPPORTED_MODEL_TYPES = tuple(_FAMILY_OF)


def _silu_lipschitz() -> float:
    """``max_x SiLU'(x)`` with ``SiLU(x) = x σ(x)``: ``SiLU'' = σ'(x)(2 + x(1 − 2σ(x))) = 0`` where
    ``x tanh(x/2) = 2`` (bisection on [2, 3]); the value ``σ(x)(1 + x(1 − σ(x))) = 1.0998…``. QuickGELU,
    ``x σ(1.702 x)``, has the same maximum slope (substitute ``u = 1.702 x``)."""
    lo, hi = 2.0, 3.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid * math.tanh(mid / 2) < 2.0 else (lo, mid)
    x = 0.5 * (lo + hi)
    s = 1.0 / (1.0 + math.exp(-x))
    return s * (1.0 + x * (1.0 - s))


#: The activations a checkpoint may name (transformers' ``ACT2FN`` keys) and the global Lipschitz
#: constant ``L_φ`` the proxies use for each (Chapter 3's ``Λ``): every GELU variant (exact ``erf``,
#: tanh and sigmoid approximations, clipped) the released ``1.13`` (their largest slope is 1.12890…
#: resp. 1.12899…); SiLU/Swish and QuickGELU ``1.0998…``; ReLU, ReLU6, leaky ReLU (slope 0.01), tanh
#: and the identity 1; the sigmoid 1/4. Names transformers knows without a global constant here
#: (``relu2``, ``prelu``, ``xielu``, …) are refused, as are names transformers does not know.
ACTIVATION_L_PHI = {
    **dict.fromkeys(("gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh",
                     "gelu_python_tanh", "gelu_accurate"), LPHI_GELU_RELEASED),
    **dict.fromkeys(("silu", "swish", "quick_gelu"), _silu_lipschitz()),
    **dict.fromkeys(("relu", "relu6", "leaky_relu", "tanh", "linear"), 1.0),
    "sigmoid": 0.25,
}

# role -> tensor name suffix inside block ``{prefix}{stack}.{i}.``; ``{e}`` stands for an expert's index
_LLAMA_ATTENTION = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
                    "o": "self_attn.o_proj.weight"}
_LLAMA_BLOCK = {**_LLAMA_ATTENTION, "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
                "down": "mlp.down_proj.weight"}
_ROLES = {
    "bert": ("encoder.layer", {
        "q": "attention.self.query.weight", "k": "attention.self.key.weight",
        "v": "attention.self.value.weight", "o": "attention.output.dense.weight",
        "f_in": "intermediate.dense.weight", "f_out": "output.dense.weight"}),
    "distilbert": ("transformer.layer", {
        "q": "attention.q_lin.weight", "k": "attention.k_lin.weight", "v": "attention.v_lin.weight",
        "o": "attention.out_lin.weight", "f_in": "ffn.lin1.weight", "f_out": "ffn.lin2.weight"}),
    "gpt2": ("h", {
        "qkv": "attn.c_attn.weight", "o": "attn.c_proj.weight",
        "f_in": "mlp.c_fc.weight", "f_out": "mlp.c_proj.weight"}),
    "llama": ("layers", _LLAMA_BLOCK),
    "gemma": ("layers", _LLAMA_BLOCK),  # Gemma's blocks name their tensors as LLaMA's do
    "phi3": ("layers", {
        "qkv": "self_attn.qkv_proj.weight", "o": "self_attn.o_proj.weight",
        "gate_up": "mlp.gate_up_proj.weight", "down": "mlp.down_proj.weight"}),
    "gpt_neox": ("layers", {
        "qkv": "attention.query_key_value.weight", "o": "attention.dense.weight",
        "f_in": "mlp.dense_h_to_4h.weight", "f_out": "mlp.dense_4h_to_h.weight"}),
    "opt": ("decoder.layers", {
        "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
        "o": "self_attn.out_proj.weight", "f_in": "fc1.weight", "f_out": "fc2.weight"}),
    # the router block_sparse_moe.gate is not a matrix of the bound and is not read
    "mixtral": ("layers", {
        **_LLAMA_ATTENTION, "gate": "block_sparse_moe.experts.{e}.w1.weight",
        "up": "block_sparse_moe.experts.{e}.w3.weight", "down": "block_sparse_moe.experts.{e}.w2.weight"}),
    "vit": ("encoder.layer", {
        "q": "attention.attention.query.weight", "k": "attention.attention.key.weight",
        "v": "attention.attention.value.weight", "o": "attention.output.dense.weight",
        "f_in": "intermediate.dense.weight", "f_out": "output.dense.weight"}),
}
#: Families with a gated feed-forward ``down(φ(x G) ⊙ x U)`` (``M_in = [G | U]``).
_GATED = frozenset({"llama", "gemma", "phi3", "mixtral"})
#: Families whose configs may declare grouped-query attention (``num_key_value_heads``).
_GQA = frozenset({"llama", "gemma", "phi3", "mixtral"})
#: Families storing the query, key and value projections as one tensor (split by ``_read_attention``).
_FUSED_QKV = frozenset({"gpt2", "phi3", "gpt_neox"})

#: The ``config.json`` keys of a family's sizes — ``(layers, hidden size, heads, feed-forward width)``,
#: the first key present read, as its transformers config class names them (:data:`_SIZE_KEYS_DEFAULT`
#: for the families not listed). GPT-2's ``n_inner`` may be absent: ``4 * hidden_size``, as transformers.
_SIZE_KEYS = {
    "distilbert": (("n_layers", "num_hidden_layers"), ("dim", "hidden_size"), ("n_heads", "num_attention_heads"),
                   ("hidden_dim", "intermediate_size")),
    "gpt2": (("n_layer", "num_hidden_layers"), ("n_embd", "hidden_size"), ("n_head", "num_attention_heads"),
             ("n_inner",)),
    "opt": (("num_hidden_layers",), ("hidden_size",), ("num_attention_heads",), ("ffn_dim",)),
}
_SIZE_KEYS_DEFAULT = (("num_hidden_layers",), ("hidden_size",), ("num_attention_heads",), ("intermediate_size",))
_SIZE_NAMES = ("number of layers", "hidden size", "number of heads", "feed-forward width")
#: ``(config key, transformers' default)`` of a family's feed-forward activation (``("hidden_act", "gelu")``
#: for the families not listed); Gemma 2 reads ``hidden_activation`` instead (``_family_activation``).
_ACTIVATION_KEYS = {
    "distilbert": ("activation", "gelu"), "gpt2": ("activation_function", "gelu_new"),
    "opt": ("activation_function", "relu"), "gemma": ("hidden_act", "gelu_pytorch_tanh"),
    **dict.fromkeys(("llama", "phi3", "mixtral"), ("hidden_act", "silu")),
}


@dataclass(frozen=True)
class ArchitectureSpec:
    """What the extraction needs to know about a model (read from ``config.json`` and the tensor names).

    ``family`` is the tensor layout (one per row of the module docstring's list; the ``model_type``
    values of :data:`SUPPORTED_MODEL_TYPES` map onto them); ``n_experts`` is the number of
    feed-forward experts per layer of a mixture-of-experts model (Mixtral), 0 for a dense one.
    """

    family: str
    model_type: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    activation: str
    prefix: str
    gated_ffn: bool = False
    n_experts: int = 0

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def experts(self) -> tuple:
        """``(0, …, E − 1)`` for a mixture-of-experts feed-forward, ``(None,)`` for a dense one (every layer)."""
        return tuple(range(self.n_experts)) if self.n_experts else (None,)

    def kv_group(self, h: int) -> int:
        """Key/value group read by query head ``h`` (Hugging Face ``repeat_kv`` order)."""
        return h // self.group_size

    def tensor_names(self, layer: int) -> dict:
        """``{role: full tensor name}`` for ``layer``; an expert's roles are ``"gate.e"``, ``"up.e"``, ``"down.e"``."""
        stack, roles = _ROLES[self.family]
        block = f"{self.prefix}{stack}.{layer}."
        names = {r: block + s for r, s in roles.items() if "{e}" not in s}
        for e in range(self.n_experts):
            names.update({f"{r}.{e}": block + s.format(e=e) for r, s in roles.items() if "{e}" in s})
        return names

    def expected_shapes(self) -> dict:
        """``{role: (rows, cols)}`` as stored in the checkpoint (the keys of :meth:`tensor_names`)."""
        N, H, Hk, d, F = self.hidden, self.n_heads, self.n_kv_heads, self.head_dim, self.d_ff
        linear_ffn = {"f_in": (F, N), "f_out": (N, F)}
        attention = {"q": (H * d, N), "k": (Hk * d, N), "v": (Hk * d, N), "o": (N, H * d)}
        if self.family == "gpt2":  # Conv1D stores (in, out)
            return {"qkv": (N, 3 * N), "o": (N, N), "f_in": (N, F), "f_out": (F, N)}
        if self.family == "gpt_neox":
            return {"qkv": (3 * H * d, N), "o": (N, H * d), **linear_ffn}
        if self.family == "phi3":
            return {"qkv": ((H + 2 * Hk) * d, N), "o": (N, H * d), "gate_up": (2 * F, N), "down": (N, F)}
        if self.family == "mixtral":
            experts = {f"{r}.{e}": shape for e in range(self.n_experts)
                       for r, shape in (("gate", (F, N)), ("up", (F, N)), ("down", (N, F)))}
            return {**attention, **experts}
        if self.gated_ffn:
            return {**attention, "gate": (F, N), "up": (F, N), "down": (N, F)}
        return {**attention, **linear_ffn}

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _cfg(config: dict, *keys, default=None, required=True, what=""):
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    if required and default is None:
        raise CheckpointError(f"config.json has no {keys[0]!r} ({what}); cannot read the model")
    return default


def _positive_int(value, name):
    """``value`` checked by :func:`~bounds_lib.core.validation.check_scalar`; a bad config is a
    :class:`~bounds_lib.checkpoints.formats.CheckpointError`."""
    try:
        return check_scalar(value, name, int, min_val=1)
    except (TypeError, ValueError):  # a file's content, not an argument: one message, one error class
        raise CheckpointError(f"config.json: {name} must be a positive integer, got {value!r}") from None


def _activation(config: dict, key: str, default: str, description: str) -> str:
    """The activation named by ``config[key]`` (``default`` when the key is absent), as transformers reads it.

    transformers builds the activation with ``ACT2FN[name]``, which raises for a name it does not know,
    so such a model does not load there; it is refused here too, and so is a name whose global Lipschitz
    constant :data:`ACTIVATION_L_PHI` does not hold (``relu2``, ``prelu``, …: the propagation
    factor needs one).
    """
    act = config.get(key, default)
    if not isinstance(act, str) or act not in ACTIVATION_L_PHI:
        raise CheckpointError(f"{description}: config.json {key} = {act!r} is not a supported activation; "
                              "supported: " + ", ".join(sorted(ACTIVATION_L_PHI)))
    return act


def _stack_prefix(source: TensorSource, stack: str, first: str, model_type, prefix):
    """The one name prefix under which ``source`` holds the layer stack; ambiguity is refused.

    A file with two stacks (``student.``/``teacher.``, ``encoder_q.``/``encoder_k.``) holds two models;
    picking one by a rule the user did not choose would analyse either silently, so the candidates are
    listed and ``prefix`` must name one.
    """
    pat = re.compile(r"^(.*?)" + re.escape(f"{stack}.0.{first}") + r"$")
    found = sorted({m.group(1) for n in source.names() if (m := pat.match(n))}, key=lambda p: (len(p), p))
    if not found:
        raise CheckpointError(f"{source.description}: no tensor named like '{stack}.0.{first}' — the weights "
                              f"do not match the {model_type!r} layout of config.json"
                              + _in_memory_hint(source, _FAMILY_OF.get(str(model_type))))
    shown = ", ".join(repr(p) for p in found)
    if prefix is not None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a tensor-name prefix (str), got {type(prefix).__name__} {prefix!r}")
        if prefix not in found:
            raise CheckpointError(f"{source.description}: no layer stack under the prefix {prefix!r}; the "
                                  f"weights hold one under {shown}")
        return prefix
    if len(found) > 1:
        raise CheckpointError(f"{source.description}: the weights hold {len(found)} {model_type!r} layer stacks, "
                              f"under the prefixes {shown}; which one to analyse is ambiguous — choose one "
                              "with --prefix (prefix= in Python)")
    return found[0]


def detect_architecture(source: TensorSource, *, allow_extra_layers: bool = False,
                        prefix: str | None = None) -> ArchitectureSpec:
    """Read the layout of ``source`` from its config and tensor names, checking every layer's tensors.

    Raises :class:`~bounds_lib.checkpoints.formats.CheckpointError` naming the problem: an unsupported ``model_type``
    or activation,
    heads that do not divide the hidden size, a size that is not a positive integer (``n_inner: 0``
    included: transformers would build a zero-width layer), two layer stacks under different name
    prefixes (unless ``prefix`` names one of them), a layer without one of its tensors, a tensor of
    the wrong shape, or weights with more layers than ``config.json`` declares (unless
    ``allow_extra_layers``: the caller analyses a prefix on purpose).
    """
    model_type, family = _model_family(source)
    # the tensor names first: a config whose model_type lies about the weights is named as such, not as
    # a size the other family's config lacks
    stack, first = _stack_and_first(family)
    spec = _spec_from_config(source, family, model_type, _stack_prefix(source, stack, first, model_type, prefix))
    if not allow_extra_layers:
        _refuse_extra_layers(source, spec)
    _check_layer_tensors(source, spec)
    _refuse_extra_experts(source, spec)
    return spec


def _model_family(source: TensorSource) -> tuple:
    """``(model_type, family)`` of ``source``'s config; an absent or unsupported ``model_type`` is refused."""
    model_type = source.config.get("model_type")
    if model_type is None:
        raise CheckpointError(f"{source.description}: config.json has no 'model_type'; supported: "
                              + ", ".join(SUPPORTED_MODEL_TYPES))
    family = _FAMILY_OF.get(str(model_type))
    if family is None:
        raise CheckpointError(f"{source.description}: unsupported architecture {model_type!r}; supported "
                              "model types: " + ", ".join(SUPPORTED_MODEL_TYPES))
    return model_type, family


def _stack_and_first(family: str) -> tuple:
    """``(stack, first)``: the name of a family's layer stack and the tensor that marks each of its blocks."""
    stack, roles = _ROLES[family]
    return stack, next(iter(roles.values()))


def _spec_from_config(source: TensorSource, family: str, model_type, prefix: str) -> ArchitectureSpec:
    """The :class:`ArchitectureSpec` the config of ``source`` declares, every size checked.

    Absent keys take transformers' config defaults; a key present with a falsy value (0, ``""``) is
    validated, never replaced by the default (transformers tests ``is None``, not truth).
    """
    cfg, desc = source.config, source.description
    L, N, H, F = _config_sizes(cfg, family)
    act = _family_activation(cfg, family, str(model_type), desc)
    Hk, hd = H, None
    if family in _GQA:
        Hk = cfg.get("num_key_value_heads")
        Hk = H if Hk is None else Hk
        hd = cfg.get("head_dim")
        if hd is None and family == "gemma":
            hd = 256  # GemmaConfig / Gemma2Config default: Gemma's head_dim is not hidden_size / heads
    E = 0
    if family == "mixtral":
        E = cfg.get("num_local_experts")
        E = _positive_int(8 if E is None else E, "number of experts (num_local_experts)")
    L, N, H, Hk, F = (_positive_int(v, n) for v, n in
                      ((L, "number of layers"), (N, "hidden size"), (H, "number of heads"),
                       (Hk, "number of key/value heads"), (F, "feed-forward width")))
    if hd is None:
        if N % H:
            raise CheckpointError(f"{desc}: {H} attention heads do not divide the hidden size {N}; cannot "
                                  "split the projections into heads")
        hd = N // H
    hd = _positive_int(hd, "head_dim")
    if H % Hk:
        raise CheckpointError(f"{desc}: {Hk} key/value heads do not divide {H} query heads")
    return ArchitectureSpec(family=family, model_type=str(model_type), n_layers=L, hidden=N, n_heads=H,
                            n_kv_heads=Hk, head_dim=hd, d_ff=F, activation=act, prefix=prefix,
                            gated_ffn=family in _GATED, n_experts=E)


def _config_sizes(cfg: dict, family: str) -> tuple:
    """``(layers, hidden size, heads, feed-forward width)`` as ``cfg`` states them (:data:`_SIZE_KEYS`)."""
    keys = _SIZE_KEYS.get(family, _SIZE_KEYS_DEFAULT)
    L, N, H = (_cfg(cfg, *k, what=what) for k, what in zip(keys[:3], _SIZE_NAMES))
    F = _cfg(cfg, *keys[3], required=family != "gpt2", what=_SIZE_NAMES[3])
    if F is None:  # transformers' GPT-2 MLP: ``n_inner if n_inner is not None else 4 * hidden_size``
        F = 4 * _positive_int(N, "hidden size")
    return L, N, H, F


def _family_activation(cfg: dict, family: str, model_type: str, description: str) -> str:
    """The feed-forward activation of a ``family`` as its transformers class reads it from ``cfg``."""
    if model_type == "gemma2":  # Gemma2MLP: ACT2FN[config.hidden_activation]
        return _activation(cfg, "hidden_activation", "gelu_pytorch_tanh", description)
    key, default = _ACTIVATION_KEYS.get(family, ("hidden_act", "gelu"))
    act = _activation(cfg, key, default, description)
    # GemmaConfig rewrites the legacy "gelu" of the official releases to the tanh approximation
    # it was meant to be (the same L_φ either way)
    return "gelu_pytorch_tanh" if family == "gemma" and act == "gelu" else act


def _refuse_extra_layers(source: TensorSource, spec: ArchitectureSpec):
    """Weights with more layers than ``config.json`` declares are refused (a wrong config, not a choice)."""
    stack, first = _stack_and_first(spec.family)
    L = spec.n_layers
    if f"{spec.prefix}{stack}.{L}.{first}" not in source:
        return
    n_found = L
    while f"{spec.prefix}{stack}.{n_found}.{first}" in source:
        n_found += 1
    raise CheckpointError(f"{source.description}: config.json says {L} layers but the weights hold at "
                          f"least {n_found}; fix config.json, or pass --layers K (n_layers=K) to analyse "
                          "the first K layers on purpose")


def _check_layer_tensors(source: TensorSource, spec: ArchitectureSpec):
    """Every layer holds every tensor of its layout, each of the shape the config implies."""
    stack, _ = _stack_and_first(spec.family)
    shapes = spec.expected_shapes()
    for layer in range(spec.n_layers):
        block = f"{spec.prefix}{stack}.{layer}."
        for role, name in spec.tensor_names(layer).items():
            if name not in source:
                raise CheckpointError(f"{source.description}: layer {layer} has no {name[len(block):]!r} tensor "
                                      f"(looked for {name!r}); the checkpoint is incomplete"
                                      + _in_memory_hint(source, spec.family))
            got = tuple(source.shape(name))
            if got != shapes[role]:
                raise CheckpointError(f"{source.description}: tensor {name!r} has shape {got}, expected "
                                      f"{shapes[role]} from config.json{_shape_hint(spec, role)}")


def _refuse_extra_experts(source: TensorSource, spec: ArchitectureSpec):
    """A mixture-of-experts layer 0 with more experts than ``num_local_experts`` declares is refused."""
    E = spec.n_experts
    if not E:
        return
    stack, roles = _ROLES[spec.family]
    n_found = E
    while f"{spec.prefix}{stack}.0.{roles['gate'].format(e=n_found)}" in source:
        n_found += 1
    if n_found > E:
        raise CheckpointError(f"{source.description}: config.json says {E} experts per layer "
                              f"(num_local_experts) but layer 0 holds at least {n_found}; fix config.json")


#: A tensor-name ending that only transformers 5's in-memory layout of a family has (not its saved one).
_IN_MEMORY_MARKERS = {"mixtral": "mlp.experts.gate_up_proj", "vit": "attention.q_proj.weight"}


def _in_memory_hint(source: TensorSource, family: str | None) -> str:
    """A hint for a state dict taken from a transformers 5 module whose memory layout is not the saved one."""
    marker = _IN_MEMORY_MARKERS.get(family)
    if marker is None or not any(n.endswith(marker) for n in source.names()):
        return ""
    return (f" (these are transformers' in-memory names ('…{marker}'): pass the model itself, or a folder "
            "written by save_pretrained)")


def _shape_hint(spec: ArchitectureSpec, role: str) -> str:
    """What the expected shape of a fused tensor is made of (``""`` for the others)."""
    H, Hk, d, F = spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_ff
    if role == "qkv" and spec.family == "phi3":
        return (f" (rows [q | k | v] = ({H} + 2·{Hk} key/value heads) × head_dim {d}; check num_attention_heads, "
                "num_key_value_heads and head_dim)")
    if role == "qkv" and spec.family == "gpt_neox":
        return f" (rows: {H} heads × [q | k | v] × head_dim {d}; check num_attention_heads)"
    if role == "gate_up":
        return f" (rows [gate | up] = 2 × intermediate_size {F})"
    if role in ("q", "k", "v", "o") and spec.family in _GQA:
        return f" ({H} query heads, {Hk} key/value heads, head_dim {d}; check num_key_value_heads and head_dim)"
    return ""


def random_bert_state_dict(n_layers: int = 2, hidden: int = 8, n_heads: int = 2, d_ff: int = 16, *,
                           seed: int = 0, std: float = 0.5) -> tuple[dict, dict]:
    """A tiny BERT-layout model with Gaussian weights, in memory: ``(state_dict, config)``.

    For examples and tests: ``open_checkpoint(state_dict, config=config)`` reads it like a saved BERT
    checkpoint (attention and feed-forward weights of every layer, ``nn.Linear`` ``(out, in)`` layout,
    float64; no embeddings, biases or layer norms, which the analysis does not read).

    Parameters
    ----------
    n_layers, hidden, n_heads, d_ff : int
        Layers, hidden size ``N`` (a multiple of ``n_heads``), attention heads, feed-forward width.
    seed : int
        Seed of ``numpy.random.default_rng``.
    std : float
        Standard deviation of the entries.

    Returns
    -------
    tuple of (dict, dict)
        ``{tensor name: ndarray}`` and the ``config.json`` content.

    Raises
    ------
    TypeError
        A size or the seed is not an integer, or ``std`` not a real number.
    ValueError
        A size below 1, ``n_heads`` not dividing ``hidden``, or ``std`` not positive and finite.

    Examples
    --------
    >>> from bounds_lib.checkpoints import open_checkpoint
    >>> sd, cfg = random_bert_state_dict(n_layers=1, hidden=4, n_heads=2, d_ff=8)
    >>> detect_architecture(open_checkpoint(sd, config=cfg)).head_dim
    2
    """
    L = check_scalar(n_layers, "n_layers", int, min_val=1)
    N = check_scalar(hidden, "hidden (hidden size)", int, min_val=1)
    H = check_scalar(n_heads, "n_heads", int, min_val=1)
    F = check_scalar(d_ff, "d_ff (feed-forward width)", int, min_val=1)
    std = check_scalar(std, "std", float, min_val=0, include_boundaries="neither")
    if N % H:
        raise ValueError(f"n_heads = {H} does not divide hidden = {N}")
    rng = np.random.default_rng(check_scalar(seed, "seed", int, min_val=0))
    _, roles = _ROLES["bert"]
    shapes = {"q": (N, N), "k": (N, N), "v": (N, N), "o": (N, N), "f_in": (F, N), "f_out": (N, F)}
    state_dict = {f"encoder.layer.{layer}.{roles[r]}": std * rng.standard_normal(shapes[r])
                  for layer in range(L) for r in ("q", "k", "v", "o", "f_in", "f_out")}
    config = {"model_type": "bert", "num_hidden_layers": L, "hidden_size": N, "num_attention_heads": H,
              "intermediate_size": F, "hidden_act": "gelu"}
    return state_dict, config
