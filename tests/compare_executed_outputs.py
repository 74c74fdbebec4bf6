"""Compare the executed outputs of two book builds (reproducibility check, `make reproducibility`).

Usage: python tests/compare_executed_outputs.py BUILD_A BUILD_B

Every executed notebook of ``BUILD_A`` is matched with its twin in ``BUILD_B`` — the rendered copies
under ``jupyter_execute/`` and the full executions in ``.jupyter_cache/executed/`` (which also keep
the glued values, stripped from the rendered copies; matched by chapter through the cache's database,
so that builds of two commits with different code compare too) — and the text outputs (streams,
``text/plain``, ``text/latex``, ``text/html``, glued values) of every code cell must be identical.
Images are compared by their decoded pixels' hash. Exit status 1 on any difference, with the
notebook, cell and first differing line printed.

Exact comparison is right for two builds on **one machine** (the same CPU kind, environment and
thread counts: executions are deterministic there). Builds on two CPU kinds differ in the last digits
of numbers from training, BLAS and LAPACK, and in the pixels of figures drawn from them; across
machines, committed results are checked by ``bounds_lib.studies.reproduce`` to a measured tolerance instead.
"""
from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import sys
from pathlib import Path

TEXT_KEYS = ("text/plain", "text/latex", "text/html", "text/markdown", "application/vnd.jupyter.widget-view+json")


def cell_outputs(nb_path: Path) -> list[list[str]]:
    nb = json.loads(nb_path.read_text())
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        items = []
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                items.append(out["name"] + ":" + "".join(out["text"]))
            elif out["output_type"] in ("execute_result", "display_data"):
                data = out.get("data", {})
                for key in sorted(data):
                    if key.startswith("application/papermill.record/") or key in TEXT_KEYS:
                        val = data[key]
                        items.append(key + ":" + ("".join(val) if isinstance(val, list) else json.dumps(val)))
                if "image/png" in data:
                    raw = base64.b64decode("".join(data["image/png"]))
                    items.append("image/png:" + hashlib.sha256(_pixels(raw)).hexdigest())
            elif out["output_type"] == "error":
                items.append("error:" + out.get("ename", ""))
        cells.append(items)
    return cells


def _pixels(png: bytes) -> bytes:
    """Pixel data of a PNG (metadata chunks such as timestamps are ignored)."""
    try:
        from PIL import Image
        import io

        return Image.open(io.BytesIO(png)).tobytes()
    except Exception:  # pragma: no cover - Pillow ships with matplotlib
        return png


def cached_executions(build: Path) -> dict[str, Path]:
    """``{chapter file name: executed notebook}`` of a build's jupyter-cache.

    The cache keys its folders by a hash of the notebook's code, so the same chapter before and after
    a change of its code (a refactor: new import paths) lives under different keys; the cache's
    database says which source each key belongs to.
    """
    db = build / ".jupyter_cache" / "global.db"
    if not db.exists():
        return {}
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT hashkey, uri FROM nbcache").fetchall()
    return {Path(uri).name: build / ".jupyter_cache" / "executed" / key / "base.ipynb" for key, uri in rows}


def main(a: str, b: str) -> int:
    root_a, root_b = Path(a) / "jupyter_execute", Path(b) / "jupyter_execute"
    pairs = [(nb.relative_to(root_a), nb, root_b / nb.relative_to(root_a)) for nb in sorted(root_a.rglob("*.ipynb"))]
    cache_a, cache_b = cached_executions(Path(a)), cached_executions(Path(b))
    pairs += [(Path(".jupyter_cache") / name, cache_a[name], cache_b.get(name, Path(b) / ".jupyter_cache" / name))
              for name in sorted(cache_a)]
    if not pairs:
        print(f"no executed notebooks under {a}")
        return 1
    differences = 0
    compared = 0
    for name, nb_a, nb_b in pairs:
        if not nb_b.exists():
            print(f"{nb_b} is missing")
            differences += 1
            continue
        ca, cb = cell_outputs(nb_a), cell_outputs(nb_b)
        for i, (xa, xb) in enumerate(zip(ca, cb)):
            compared += len(xa)
            if xa != xb:
                differences += 1
                first = next((u for u, v in zip(xa, xb) if u != v), "(different number of outputs)")
                print(f"{name} code cell {i}: outputs differ, e.g. {first[:200]!r}")
        if len(ca) != len(cb):
            differences += 1
            print(f"{name}: {len(ca)} vs {len(cb)} code cells")
    print(f"{len(pairs)} executed notebooks, {compared} outputs compared, {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
