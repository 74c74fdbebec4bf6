"""``bounds-lib compare``, ``analyze --spectra``, ``--version`` and the suggestions for mistyped options.

Every bad input: exit 1 (2 for usage), one line on stderr, no report written."""
import csv
import io
import json

import numpy as np
import pytest

from tiny_checkpoints import write_tiny_bert

from bounds_lib.analysis.describe import COLUMNS, COMPARE_COLUMNS
from bounds_lib.checkpoints import random_bert_state_dict
from bounds_lib.cli import main

N, H, F, L = 16, 2, 32, 2


def _pair(tmp_path, d_ff_b=F):
    """A tiny BERT A and B = A with a rank-1 update of norm 2 of layer 1's output.dense (``M_out``)."""
    sd, _ = random_bert_state_dict(n_layers=L, hidden=N, n_heads=H, d_ff=F, seed=2)
    a = write_tiny_bert(tmp_path / "a", layers=L, hidden=N, heads=H, intermediate=F, weights=sd)
    if d_ff_b != F:
        sd_b, _ = random_bert_state_dict(n_layers=L, hidden=N, n_heads=H, d_ff=d_ff_b, seed=2)
        return a, write_tiny_bert(tmp_path / "b", layers=L, hidden=N, heads=H, intermediate=d_ff_b, weights=sd_b)
    u, v = np.eye(N)[0], np.eye(F)[3]
    sd_b = {**sd, "encoder.layer.1.output.dense.weight": sd["encoder.layer.1.output.dense.weight"]
            + 2.0 * np.outer(u, v)}
    return a, write_tiny_bert(tmp_path / "b", layers=L, hidden=N, heads=H, intermediate=F, weights=sd_b)


def test_compare_ranks_the_changed_matrix_first(tmp_path, capsys):
    a, b = _pair(tmp_path)
    rc = main(["compare", str(a), str(b), "--csv", str(tmp_path / "c.csv"), "--json", str(tmp_path / "c.json"),
               "--rows", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[5].split()[:2] == ["1", "L1.M_out"] and "1 of 12 matrices changed" in out
    rows = list(csv.DictReader(io.StringIO((tmp_path / "c.csv").read_text())))
    assert tuple(rows[0]) == tuple(COMPARE_COLUMNS)
    assert rows[0]["kind"] == "M_out" and rows[0]["tensors"] == "encoder.layer.1.output.dense.weight"
    assert float(rows[0]["abs_change_fro"]) == pytest.approx(2.0, rel=1e-12)
    assert float(rows[0]["abs_change_spec"]) == pytest.approx(2.0, rel=1e-12)
    assert all(float(r["rel_change_fro"]) == 0.0 for r in rows[1:])
    d = json.loads((tmp_path / "c.json").read_text())
    assert d["summary"]["n_changed"] == 1 and d["matrices"][0]["rank_of_change"] == 1


def test_compare_bad_inputs_are_one_line(tmp_path, capsys):
    a, b = _pair(tmp_path, d_ff_b=2 * F)
    rc = main(["compare", str(a), str(b), "--csv", str(tmp_path / "c.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert "shapes differ: encoder.layer.0.intermediate.dense.weight (32, 16) in A vs (64, 16) in B" in err[0]
    assert not (tmp_path / "c.csv").exists()
    for extra, message in ((["--rows", "-1"], "--rows must be >= 0"), (["--top-k", "0"], "top_k")):
        rc = main(["compare", str(a), str(a), "--quiet", *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and message in err[0], err
    rc = main(["compare", str(a), str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "no such model directory" in err[0]


def test_spectra_outputs(tmp_path, capsys):
    a, _ = _pair(tmp_path)
    assert main(["analyze", str(a), "--spectra", str(tmp_path / "s.csv"), "--csv", str(tmp_path / "r.csv"),
                 "--quiet"]) == 0
    # every column of the per-matrix CSV is described (in --help and on the API page), in order
    assert tuple(next(csv.reader(io.StringIO((tmp_path / "r.csv").read_text())))) == tuple(COLUMNS)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "s.csv").read_text())))
    assert tuple(rows[0]) == ("layer", "head", "expert", "kind", "tensors", "i", "sigma")
    # min(rows, cols) values per matrix (a head product's beyond d_h are its exact zeros in the clean mode)
    assert len(rows) == L * (2 * H * N + 2 * N)
    assert sum(float(r["sigma"]) == 0.0 for r in rows) == L * 2 * H * (N - N // H)
    assert main(["analyze", str(a), "--spectra", str(tmp_path / "s.json"), "--quiet"]) == 0
    d = json.loads((tmp_path / "s.json").read_text())
    first = d["matrices"][0]
    assert [float(r["sigma"]) for r in rows if r["layer"] == "0" and r["kind"] == first["kind"]
            and r["head"] == str(first["head"])] == first["sigma"]
    rc = main(["analyze", str(a), "--spectra", str(tmp_path / "no" / "s.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--spectra" in err[0] and "does not exist" in err[0]


def test_version_and_suggestions(capsys):
    import bounds_lib

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"bounds-lib {bounds_lib.__version__}\n"
    with pytest.raises(SystemExit) as e:
        main(["analyze", "x", "--jsno", "r.json"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "(did you mean: --json for --jsno?)" in err
    with pytest.raises(SystemExit):
        main(["analyse", "x"])
    assert "did you mean: analyze for analyse?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["analyze", "x", "--zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err  # nothing close: no suggestion


@pytest.mark.parametrize("command, columns", [("analyze", COLUMNS), ("compare", COMPARE_COLUMNS)])
def test_help_describes_every_column(command, columns, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert all(f"  {c}: " in text for c in columns), [c for c in columns if f"  {c}: " not in text]


def test_the_hubs_error_is_never_cut(monkeypatch, capsys):
    """A Hub error of many words and lines (huggingface_hub's offline message) is one line, whole."""
    import huggingface_hub

    words = " ".join(f"w{i}" for i in range(80))
    message = f"An error happened while trying to locate the files on the Hub\n{words}\nPlease check your connection."

    def fake(repo_id, local_files_only=False, **kw):
        raise (FileNotFoundError("not cached") if local_files_only else OSError(message))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    rc = main(["analyze", "someone/some-model", "--allow-download"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0].endswith(f"on the Hub {words} Please check your connection.") and "w79" in err[0]
