"""Write a random sharded safetensors checkpoint (for the memory and scale benchmarks).

Shards are written one at a time, so the writer never holds more than one shard in memory.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def write_sharded(folder: Path, config: dict, shapes: dict, dtype, shard_mb: float, seed=0):
    """``config.json``, shards ``model-XXXXX-of-YYYYY.safetensors`` of at most ``shard_mb`` MiB with
    entries ``0.02·N(0,1)`` in ``dtype``, and ``model.safetensors.index.json``.

    Returns ``(number of shards, total bytes, largest tensor in bytes)``.
    """
    from safetensors.numpy import save_file

    itemsize = np.dtype(dtype).itemsize
    rng = np.random.default_rng(seed)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    groups, cur, size = [], [], 0
    for name, shp in shapes.items():
        nbytes = itemsize * int(np.prod(shp))
        if cur and size + nbytes > shard_mb * 2**20:
            groups.append(cur)
            cur, size = [], 0
        cur.append(name)
        size += nbytes
    groups.append(cur)
    weight_map, total = {}, 0
    for i, names in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        tensors = {n: (0.02 * rng.standard_normal(shapes[n], dtype=np.float32)).astype(dtype, copy=False)
                   for n in names}
        save_file(tensors, folder / fname, metadata={"format": "pt"})
        total += sum(t.nbytes for t in tensors.values())
        del tensors
        weight_map.update({n: fname for n in names})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    largest = max(itemsize * int(np.prod(s)) for s in shapes.values())
    return len(groups), total, largest
