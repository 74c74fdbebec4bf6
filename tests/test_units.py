"""How a worker reopens a checkpoint (``bounds_lib.analysis.units._Opener``), in this process.

A worker process is handed an ``_Opener`` (storage kind, absolute file paths, config, description,
identity), never the open source. It opens each checkpoint once per process and keeps it; it refuses a
file it cannot see with one error that names the worker's machine and the file. The tests in
``tests/test_parallel.py`` run this inside worker processes, where a mutation test cannot trace it;
these call it directly.
"""
import json

import numpy as np
import pytest

from bounds_lib.analysis import units as UNITS
from bounds_lib.analysis.cluster import ClusterError
from bounds_lib.checkpoints import open_checkpoint
from bounds_lib.checkpoints.formats import SafetensorsSource, TorchBinSource

from test_parallel import write_tiny


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``{"safetensors": folder, "pytorch-bin": folder}``: one tiny BERT stored both ways."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file

    base = tmp_path_factory.mktemp("opener")
    st = write_tiny(base / "st", "bert", seed=2)
    binary = base / "bin"
    binary.mkdir()
    tensors = load_file(st / "model.safetensors")
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, binary / "pytorch_model.bin")
    (binary / "config.json").write_text((st / "config.json").read_text())
    return {"safetensors": st, "pytorch-bin": binary}


@pytest.fixture(autouse=True)
def fresh_worker(monkeypatch):
    """Each test starts as a fresh worker process: nothing opened yet."""
    monkeypatch.setattr(UNITS, "_OPENED", {})


@pytest.mark.parametrize("storage, cls", [("safetensors", SafetensorsSource), ("pytorch-bin", TorchBinSource)])
def test_a_worker_opens_the_checkpoint_it_is_handed_once(checkpoints, storage, cls):
    source = open_checkpoint(checkpoints[storage])
    opener = UNITS._opener(source)
    assert opener.storage == storage
    opened = opener.open()
    assert type(opened) is cls
    assert opened.config == source.config and opened.description == source.description
    assert [str(f) for f in opened.files] == [str(f) for f in source.files]
    for name in source.names():
        np.testing.assert_array_equal(opened.read(name), source.read(name))
    assert UNITS._OPENED == {opener: opened}
    assert opener.open() is opened  # kept for the next task
    again = UNITS._Opener(opener.storage, opener.files, opener.config_json, opener.description, opener.identity)
    assert again.open() is opened  # an equal opener is the same checkpoint
    named = UNITS._Opener(opener.storage, opener.files, opener.config_json, "the model as the user named it")
    assert named.open().description == "the model as the user named it"  # errors in the worker say it so


def test_weights_in_memory_have_no_opener(checkpoints):
    from bounds_lib.checkpoints.formats import StateDictSource

    source = open_checkpoint(checkpoints["safetensors"])
    arrays = StateDictSource({n: source.read(n) for n in source.names()}, source.config)
    assert UNITS._opener(arrays) is None


def test_a_file_the_worker_cannot_see_is_one_error_naming_the_machine_and_the_file(checkpoints, tmp_path):
    source = open_checkpoint(checkpoints["safetensors"])
    opener = UNITS._opener(source)
    gone = str(tmp_path / "elsewhere" / "model.safetensors")
    moved = UNITS._Opener(opener.storage, (gone, *opener.files), opener.config_json, opener.description)
    with pytest.raises(ClusterError) as err:
        moved.open()
    assert str(err.value) == (f"worker on {UNITS._hostname()}: cannot open {gone}: the checkpoint must be at the "
                              "same path on every worker (a shared file system)")
    assert UNITS._OPENED == {}
    assert json.loads(opener.config_json) == source.config
