"""Per-layer matrices (Chapter 6): a layer's weights in the row-vector convention, read part by part.

A layer is read in *parts* (:data:`LAYER_PARTS`: the attention projections, ``M_in``, ``M_out``; a
mixture-of-experts layer has one ``M_in``/``M_out`` pair per expert, :func:`layer_parts`), each holding
only its own tensors (:func:`part_tensor_names`). :func:`iter_layers` yields a :class:`LayerWeights`
per layer, whose methods give every head's ``W_Q``, ``W_K``, ``W_V``, ``W_O``, ``QK_h`` and ``Ṽ_h``;
fused projections (GPT-2, Phi-3, GPT-NeoX) and gated feed-forwards are split and assembled here as
the layouts of :mod:`bounds_lib.checkpoints` describe.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .formats import TensorSource
from .layouts import _FUSED_QKV, ArchitectureSpec, detect_architecture


#: The work units of a layer that is not a mixture of experts, in the order their results are listed:
#: the attention projections (``W_Q, W_K, W_V, W_O``: every head's ``QK_h`` and ``Ṽ_h``), the
#: feed-forward input map ``M_in`` and the output map ``M_out``. A part is a string, or a tuple whose
#: first entry is one of these strings and whose further entries say which copy (an expert index:
#: ``("M_in", e)``), so that parts stay hashable and picklable.
LAYER_PARTS = ("attention", "M_in", "M_out")


def part_kind(part) -> str:
    """``"attention"``, ``"M_in"`` or ``"M_out"``: what a part identifier (``"M_in"``, ``("M_in", e)``) holds."""
    kind = part[0] if isinstance(part, tuple) and part else part
    if kind not in LAYER_PARTS:
        raise ValueError(f"unknown layer part {part!r}; a part is one of {LAYER_PARTS} (or a tuple starting "
                         "with one)")
    return kind


def layer_parts(spec: "ArchitectureSpec", layer: int) -> tuple:
    """The work units of ``layer``, in the order :func:`bounds_lib.analysis.kernel.layer_spectra` lists their results.

    Each unit is read (:func:`iter_layers` with ``parts=``) and decomposed on its own, so a worker
    holds only the tensors of the unit it factors. A dense layer has the three parts of
    :data:`LAYER_PARTS`; a mixture-of-experts layer (Mixtral) has ``"attention"`` and then every
    expert's ``("M_in", e)`` and ``("M_out", e)``, expert by expert.
    """
    if not 0 <= layer < spec.n_layers:
        raise ValueError(f"layer {layer} out of range 0..{spec.n_layers - 1}")
    if spec.n_experts:
        return ("attention",) + tuple((kind, e) for e in range(spec.n_experts) for kind in ("M_in", "M_out"))
    return LAYER_PARTS


def part_expert(part) -> int | None:
    """The expert a part belongs to (``("M_in", 3)`` → 3), ``None`` for the attention and a dense part."""
    return part[1] if isinstance(part, tuple) and len(part) > 1 else None


def part_roles(spec: "ArchitectureSpec", part) -> tuple:
    """The roles (keys of :meth:`~bounds_lib.checkpoints.layouts.ArchitectureSpec.tensor_names`) of the stored tensors
    a part reads."""
    kind = part_kind(part)
    if kind == "attention":
        return ("qkv", "o") if spec.family in _FUSED_QKV else ("q", "k", "v", "o")
    if spec.n_experts:
        e = part_expert(part)
        return (f"gate.{e}", f"up.{e}") if kind == "M_in" else (f"down.{e}",)
    if kind == "M_in":
        return ("gate_up",) if spec.family == "phi3" else ("gate", "up") if spec.gated_ffn else ("f_in",)
    return ("down",) if spec.gated_ffn else ("f_out",)


def part_tensor_names(spec: "ArchitectureSpec", layer: int, part) -> dict:
    """``{role: full tensor name}`` of the tensors ``part`` of ``layer`` reads (a subset of ``tensor_names``)."""
    names = spec.tensor_names(layer)
    return {role: names[role] for role in part_roles(spec, part)}


@dataclass(frozen=True)
class LayerWeights:
    """One layer's weights in the row-vector convention (``X ↦ X W``), or those of some of its parts.

    ``Wq`` (N×H·d_h), ``Wk``, ``Wv`` (N×H_kv·d_h), ``Wo`` (H·d_h×N), ``M_in`` (N×d_ff, or N×2d_ff for a
    gated feed-forward), ``M_out`` (d_ff×N). For ``nn.Linear`` layouts these are transposed *views* of
    the stored ``(out, in)`` arrays, so ``Wq[:, hs] @ Wk[:, hs].T`` is literally the released
    ``q[hs,:]ᵀ k[hs,:]``. ``parts`` lists the parts read (:func:`layer_parts`); the fields of a part
    not read are ``None``. A mixture-of-experts layer keeps ``M_in``/``M_out`` ``None`` and holds every
    expert's matrices in ``expert_matrices`` (``{("M_in", e): N×2d_ff, ("M_out", e): d_ff×N}``), read
    through :meth:`matrix`.
    """

    layer: int
    spec: ArchitectureSpec
    Wq: np.ndarray | None
    Wk: np.ndarray | None
    Wv: np.ndarray | None
    Wo: np.ndarray | None
    M_in: np.ndarray | None
    M_out: np.ndarray | None
    names: dict = field(default_factory=dict, compare=False)
    parts: tuple = field(default=None, compare=False)
    expert_matrices: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.parts is None:  # built by hand with arrays: the parts whose fields are present
            present = {"attention": self.Wq is not None, "M_in": self.M_in is not None,
                       "M_out": self.M_out is not None}
            object.__setattr__(self, "parts", tuple(p for p in LAYER_PARTS if present[p])
                               + tuple(p for p in layer_parts(self.spec, self.layer) if p in self.expert_matrices))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the arrays held (that of the first part read)."""
        for W in (self.Wq, self.Wv, self.M_in, self.M_out, *self.expert_matrices.values()):
            if W is not None:
                return W.dtype
        raise ValueError(f"layer {self.layer}: no weights were read")

    def matrix(self, part) -> np.ndarray:
        """The dense feed-forward matrix of a part (``M_in``, ``M_out``, or an expert's ``("M_in", e)``…);
        ``ValueError`` if it was not read."""
        kind = part_kind(part)
        if part_expert(part) is not None:
            W = self.expert_matrices.get((kind, part_expert(part)))
        else:
            W = self.M_in if kind == "M_in" else self.M_out if kind == "M_out" else None
        if W is None:
            raise ValueError(f"layer {self.layer}: part {part!r} is not a dense matrix that was read")
        return W

    def _attention(self, W):
        if W is None:
            raise ValueError(f"layer {self.layer}: the attention projections were not read (parts={self.parts})")

    def _cols(self, h):
        d = self.spec.head_dim
        return slice(h * d, (h + 1) * d)

    def W_Q(self, h: int) -> np.ndarray:
        """``W_{Q,h}`` (N×d_h)."""
        self._attention(self.Wq)
        return self.Wq[:, self._cols(h)]

    def W_K(self, h: int) -> np.ndarray:
        """``W_{K,h}`` (N×d_h) — the key group of query head ``h``."""
        self._attention(self.Wk)
        return self.Wk[:, self._cols(self.spec.kv_group(h))]

    def W_V(self, h: int) -> np.ndarray:
        """``W_{V,h}`` (N×d_h) — the value group of query head ``h``."""
        self._attention(self.Wv)
        return self.Wv[:, self._cols(self.spec.kv_group(h))]

    def W_O(self, h: int) -> np.ndarray:
        """``W_{O,h}`` (d_h×N) — the rows of the output projection that read head ``h``."""
        self._attention(self.Wo)
        return self.Wo[self._cols(h), :]

    def QK(self, h: int) -> np.ndarray:
        """Explicit ``QK_h = W_{Q,h} W_{K,h}ᵀ`` (N×N); logits of head ``h`` are ``X QK_h Xᵀ``."""
        return self.W_Q(h) @ self.W_K(h).T

    def V_tilde(self, h: int) -> np.ndarray:
        """Explicit ``Ṽ_h = W_{V,h} W_{O,h}`` (N×N)."""
        return self.W_V(h) @ self.W_O(h)


def iter_layers(source: TensorSource, spec: ArchitectureSpec | None = None, *, dtype=np.float64,
                layers=None, parts=None) -> Iterator[LayerWeights]:
    """Yield :class:`LayerWeights` one layer at a time (only that layer's tensors are in memory).

    ``parts`` (default: all of :func:`layer_parts`) reads only the tensors of those parts; the other
    fields are ``None``. The generator keeps no reference to a layer it has yielded, so once the
    caller drops it the next layer is read into free memory, not next to it.
    """
    spec = spec or detect_architecture(source)
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    idx = range(spec.n_layers) if layers is None else layers
    for layer in idx:
        if not 0 <= layer < spec.n_layers:
            raise ValueError(f"layer {layer} out of range 0..{spec.n_layers - 1}")
        yield _read_layer(source, spec, layer, dtype, layer_parts(spec, layer) if parts is None else parts)


def _read_layer(source: TensorSource, spec: ArchitectureSpec, layer: int, dtype,
                parts=LAYER_PARTS) -> LayerWeights:
    """The tensors of ``parts`` of ``layer`` (in the order of :func:`layer_parts`), each read once."""
    known = layer_parts(spec, layer)
    unknown = [p for p in parts if p not in known]
    if unknown or not parts:
        raise ValueError(f"layer {layer}: parts must be a non-empty selection of {known}, got {tuple(parts)!r}")
    parts = tuple(p for p in known if p in parts)
    names = spec.tensor_names(layer)
    Wq = Wk = Wv = Wo = M_in = M_out = None
    experts = {}
    for part in parts:
        if part == "attention":
            Wq, Wk, Wv, Wo = _read_attention(source, spec, names, dtype)
            continue
        W = _read_ffn(source, spec, [names[r] for r in part_roles(spec, part)], dtype)
        if part_expert(part) is not None:
            experts[part] = W
        elif part == "M_in":
            M_in = W
        else:
            M_out = W
    read = {role: names[role] for p in parts for role in part_roles(spec, p)}
    return LayerWeights(layer, spec, Wq, Wk, Wv, Wo, M_in, M_out, read, parts, experts)


def _read_attention(source: TensorSource, spec: ArchitectureSpec, names: dict, dtype) -> tuple:
    """``(Wq, Wk, Wv, Wo)`` in the row-vector convention, head-major columns, from the stored tensors.

    * GPT-2 ``c_attn`` (Conv1D, ``(in, out)``): columns ``[Q | K | V]``.
    * Phi-3 ``qkv_proj`` (``nn.Linear``, ``(out, in)``): rows ``[Q (H·d_h) | K (H_kv·d_h) | V (H_kv·d_h)]``,
      as ``Phi3Attention`` slices its output.
    * GPT-NeoX ``query_key_value``: rows interleaved per head, ``[q_0 k_0 v_0 | q_1 k_1 v_1 | …]`` (each
      d_h rows) — ``GPTNeoXAttention`` views its output as ``(…, H, 3·d_h)`` and chunks the last axis in
      three — so head ``h``'s query rows are ``3·h·d_h … 3·h·d_h + d_h``.
    * Separate projections (``nn.Linear``): the transposed views of ``q``, ``k``, ``v``, ``o``.
    """
    N, H, Hk, d = spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim
    if spec.family == "gpt2":
        qkv = source.read(names["qkv"], dtype)
        return qkv[:, :N], qkv[:, N:2 * N], qkv[:, 2 * N:], source.read(names["o"], dtype)
    if spec.family == "phi3":
        qkv = source.read(names["qkv"], dtype)
        q_end, k_end = H * d, (H + Hk) * d
        return qkv[:q_end].T, qkv[q_end:k_end].T, qkv[k_end:].T, source.read(names["o"], dtype).T
    if spec.family == "gpt_neox":
        per_head = source.read(names["qkv"], dtype).reshape(H, 3, d, -1)  # (head, q/k/v, row, in)
        Wq, Wk, Wv = (np.ascontiguousarray(per_head[:, j].reshape(H * d, -1).T) for j in range(3))
        del per_head
        return Wq, Wk, Wv, source.read(names["o"], dtype).T
    return tuple(source.read(names[r], dtype).T for r in ("q", "k", "v", "o"))


def _read_ffn(source: TensorSource, spec: ArchitectureSpec, tensor_names: list, dtype) -> np.ndarray:
    """``M_in`` (N×d_ff, or ``[G | U]`` N×2d_ff when gated) or ``M_out`` (d_ff×N) from its stored tensors.

    A gated ``M_in`` stored as two tensors (gate, up) is filled one half at a time, so they are never
    held next to it; Phi-3's fused ``gate_up_proj`` has rows ``[gate | up]`` (``Phi3MLP`` chunks its
    output in two), so its transpose is ``[G | U]`` already. GPT-2's Conv1D stores ``(in, out)``.
    """
    if len(tensor_names) == 2:  # gate and up, separately
        N, F = spec.hidden, spec.d_ff
        M_in = np.empty((N, 2 * F), dtype=dtype)
        for j, name in enumerate(tensor_names):
            M_in[:, j * F:(j + 1) * F] = source.read(name, dtype).T
        return M_in
    W = source.read(tensor_names[0], dtype)
    return W if spec.family == "gpt2" else W.T
