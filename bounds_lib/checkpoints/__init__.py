"""Reading real Transformer checkpoints and extracting the paper's matrices (Chapter 6).

The paper's Section 6 (and the authors' released scripts) measures four kinds of
matrices in every layer ``ℓ`` of a trained model, in the row-vector convention ``X ↦ XW``:

* ``QK_{ℓ,h} = W_{Q,h} W_{K,h}ᵀ`` (N×N, rank ≤ d_h) — head ``h``'s attention logits are
  ``X QK_{ℓ,h} Xᵀ`` (biases, rotary embeddings and the ``1/√d_h`` scale left out, as released);
* ``Ṽ_{ℓ,h} = W_{V,h} W_{O,h}`` (N×N, rank ≤ d_h) — head ``h``'s contribution ``X Ṽ_{ℓ,h}`` to the
  attention output;
* ``M_in`` (N×d_ff) and ``M_out`` (d_ff×N) — the feed-forward maps around the activation.

Sources (:func:`~bounds_lib.checkpoints.hub.open_checkpoint`): a local model directory (``config.json`` plus a single
or sharded
safetensors file, or legacy PyTorch ``.bin`` files as a fallback — chosen as transformers'
``from_pretrained`` chooses, :func:`~bounds_lib.checkpoints.hub.weight_files`), a Hugging Face Hub id resolved
through the local cache (downloading only when the user allows it and is online), or an in-memory
``torch.nn.Module`` / state dict. Tensors are read one at a time (the safetensors reader of ``formats`` seeks
to each tensor; nothing is mapped or loaded wholesale), half precision (f16, bf16) is widened exactly,
and everything is computed in float64 unless float32 is requested.

Validation (every failure is one :class:`~bounds_lib.checkpoints.formats.CheckpointError` line naming the file and the
problem):
safetensors headers follow the format library's own rules (no duplicate names, byte ranges disjoint
and covering the data section exactly; the library parses each file too, as a backstop —
:func:`~bounds_lib.checkpoints.formats.read_safetensors_header`); a shard index is followed exactly (each tensor in
the one shard
it names; a tensor stored in two files, a malformed ``weight_map`` or a shard path that leaves the
model folder is refused); JSON with duplicate keys or absurd nesting is refused; weights must be
real floating-point arrays (:func:`bounds_lib.core.validation.as_real_array`); a config declaring fewer
layers than the weights hold is refused unless a prefix is asked for; a file holding two layer stacks
(``student.``/``teacher.``) is refused unless ``prefix=`` names one; the activation must be one
transformers knows and whose Lipschitz constant is listed (:data:`~bounds_lib.checkpoints.layouts.ACTIVATION_L_PHI`);
a ``.bin``
that is not weights-only is refused without running any of it. Hub downloads have a deadline, and so
has every request.

Layouts (:data:`~bounds_lib.checkpoints.layouts.SUPPORTED_MODEL_TYPES`):

* **BERT family** (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA: ``encoder.layer.i.attention.self.query``…;
  DistilBERT: ``transformer.layer.i.attention.q_lin``…). ``nn.Linear`` stores ``(out, in)``, so
  ``W_Q = query.weightᵀ``.
* **GPT-2** (``h.i.attn.c_attn``): ``Conv1D`` stores ``(in, out)`` already; the fused ``c_attn`` has
  columns ``[Q | K | V]``.
* **LLaMA / Mistral / Qwen2 / Qwen3** (``layers.i.self_attn.q_proj``…, ``mlp.gate_proj/up_proj/down_proj``).
  Grouped-query attention: query head ``h`` reads key/value group ``h // (H / H_kv)``, exactly as
  Hugging Face's ``repeat_kv``. Gated feed-forward ``down(φ(x G) ⊙ x U)``: we take
  ``M_in = [G | U]`` (N×2d_ff, the one linear map feeding the gated unit) and ``M_out = down``
  (d_ff×N). The gate's product is not globally Lipschitz, so for these models the propagation
  factor is a proxy on the same footing as the released BERT one, not a bound. Qwen3 normalises
  every head's queries and keys (``q_norm``/``k_norm``, an RMSNorm per token) between the projections
  and the logits, so ``X QK_h Xᵀ`` is not its logit matrix (a known limitation: the projections are
  decomposed all the same; ``tests/test_architectures.py`` measures the difference).
* **Gemma / Gemma 2** (the LLaMA names): ``head_dim`` from the config (transformers' default 256 when
  absent — not ``N / H``), the GeGLU activation from ``hidden_act`` (Gemma; its legacy ``"gelu"`` is the
  tanh approximation, as transformers reads it) or ``hidden_activation`` (Gemma 2). Gemma's RMSNorm
  scales by ``1 + w`` and Gemma 2 caps its logits and scales them by ``query_pre_attn_scalar^{-1/2}``:
  norms and scalars, not matrices of the bound, so the analysed matrices are unchanged.
* **Phi-3** (``self_attn.qkv_proj``, ``mlp.gate_up_proj``): the fused query/key/value rows are
  ``[Q (H·d_h) | K (H_kv·d_h) | V (H_kv·d_h)]`` and the fused gate/up rows ``[gate | up]``, as
  ``Phi3Attention`` and ``Phi3MLP`` split their outputs.
* **GPT-NeoX** (``attention.query_key_value``): the fused rows are interleaved per head,
  ``[q_0 k_0 v_0 | q_1 k_1 v_1 | …]`` (d_h rows each), as ``GPTNeoXAttention`` views its output as
  ``(…, H, 3·d_h)``; the feed-forward is ``mlp.dense_h_to_4h`` / ``mlp.dense_4h_to_h``. With
  ``use_parallel_residual`` (the default) a block adds its attention and feed-forward outputs instead
  of composing them; the propagation factor keeps the released composed form, a proxy here too.
* **OPT** (``decoder.layers.i.self_attn.{q,k,v,out}_proj``, ``fc1``, ``fc2``; activation
  ``activation_function``). The ``word_embed_proj_dim`` projections (``project_in``/``project_out``)
  lie outside the blocks and are not read.
* **Mixtral** (mixture of experts; attention as LLaMA): every expert ``e`` of
  ``block_sparse_moe.experts.e.{w1, w3, w2}`` (gate, up, down) has its own ``M_in = [G_e | U_e]`` and
  ``M_out = down_e``, analysed as matrices of their own (the parts ``("M_in", e)``, ``("M_out", e)`` of
  :func:`~bounds_lib.checkpoints.layers.layer_parts`; ``MatrixSpectrum.expert``). The router
  ``block_sparse_moe.gate`` is not a block matrix of the bound and is not read; the routing is not
  Lipschitz, so the propagation factor of these models is a proxy (:func:`bounds_lib.analysis.scoring.score`).
* **ViT** (``vit.encoder.layer.i.attention.attention.{query,key,value}``, ``attention.output.dense``,
  ``intermediate.dense``, ``output.dense``): BERT's orientation; the patch embedding is not read.

A transformers module is read in the layout ``save_pretrained`` writes (transformers 5 keeps Mixtral's
experts fused and ViT's projections renamed in memory; ``bounds_lib.checkpoints.hub._saved_state_dict``).

Modules (each importing only those listed before it; the names below are re-exported here, the
subpackage's API):

* :mod:`bounds_lib.checkpoints.formats` — :class:`~bounds_lib.checkpoints.formats.CheckpointError`, the validated JSON
  and safetensors
  header readers, and the tensor sources (:class:`~bounds_lib.checkpoints.formats.TensorSource`,
  :class:`~bounds_lib.checkpoints.formats.SafetensorsSource`,
  :class:`~bounds_lib.checkpoints.formats.TorchBinSource`, :class:`~bounds_lib.checkpoints.formats.StateDictSource`);
* :mod:`bounds_lib.checkpoints.hub` — opening a model: a folder's weight files
  (:func:`~bounds_lib.checkpoints.hub.weight_files`),
  Hub ids through the local cache (:func:`~bounds_lib.checkpoints.hub.resolve_hub_id`), modules and state dicts
  (:func:`~bounds_lib.checkpoints.hub.open_checkpoint`);
* :mod:`bounds_lib.checkpoints.layouts` — the layouts above as tables,
  :class:`~bounds_lib.checkpoints.layouts.ArchitectureSpec`,
  :func:`~bounds_lib.checkpoints.layouts.detect_architecture`,
  :data:`~bounds_lib.checkpoints.layouts.ACTIVATION_L_PHI`,
  :func:`~bounds_lib.checkpoints.layouts.random_bert_state_dict`;
* :mod:`bounds_lib.checkpoints.layers` — a layer's parts (:func:`~bounds_lib.checkpoints.layers.layer_parts`) and
  matrices
  (:class:`~bounds_lib.checkpoints.layers.LayerWeights`, :func:`~bounds_lib.checkpoints.layers.iter_layers`).
"""
from __future__ import annotations

from .formats import (
    CheckpointError,
    SafetensorsSource,
    StateDictSource,
    TensorSource,
    TorchBinSource,
    read_safetensors_header,
)
from .hub import ALLOW_DOWNLOAD_ENV, WEIGHT_FILES, open_checkpoint, resolve_hub_id, weight_files
from .layers import LAYER_PARTS, LayerWeights, iter_layers, layer_parts, part_expert, part_tensor_names
from .layouts import (
    ACTIVATION_L_PHI,
    SUPPORTED_MODEL_TYPES,
    ArchitectureSpec,
    detect_architecture,
    random_bert_state_dict,
)

__all__ = [
    "CheckpointError",
    "SUPPORTED_MODEL_TYPES",
    "ACTIVATION_L_PHI",
    "ALLOW_DOWNLOAD_ENV",
    "TensorSource",
    "SafetensorsSource",
    "TorchBinSource",
    "StateDictSource",
    "ArchitectureSpec",
    "LayerWeights",
    "LAYER_PARTS",
    "layer_parts",
    "part_expert",
    "part_tensor_names",
    "open_checkpoint",
    "resolve_hub_id",
    "detect_architecture",
    "iter_layers",
    "read_safetensors_header",
    "weight_files",
    "WEIGHT_FILES",
    "random_bert_state_dict",
]
