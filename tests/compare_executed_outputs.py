"""Compare the executed outputs of two book builds (reproducibility check, `make reproducibility`).

Usage: python tests/compare_executed_outputs.py BUILD_A BUILD_B

Every executed notebook of ``BUILD_A`` is matched with its twin in ``BUILD_B`` — the rendered copies
under ``jupyter_execute/`` and the full executions in ``.jupyter_cache/executed/`` (which also keep
the glued values, stripped from the rendered copies) — and the text outputs (streams,
``text/plain``, ``text/latex``, ``text/html``, glued values) of every code cell must be identical.
Images are compared by their decoded pixels' hash. Exit status 1 on any difference, with the
notebook, cell and first differing line printed.
"""
from __future__ import annotations

import base64
import hashlib
import json
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


def main(a: str, b: str) -> int:
    pairs = []
    for sub in ("jupyter_execute", ".jupyter_cache/executed"):
        root_a, root_b = Path(a) / sub, Path(b) / sub
        pairs += [(root_a, root_b, nb) for nb in sorted(root_a.rglob("*.ipynb"))]
    if not pairs:
        print(f"no executed notebooks under {a}")
        return 1
    differences = 0
    compared = 0
    for root_a, root_b, nb_a in pairs:
        nb_b = root_b / nb_a.relative_to(root_a)
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
                print(f"{nb_a.relative_to(root_a)} code cell {i}: outputs differ, e.g. {first[:200]!r}")
        if len(ca) != len(cb):
            differences += 1
            print(f"{nb_a.relative_to(root_a)}: {len(ca)} vs {len(cb)} code cells")
    print(f"{len(pairs)} executed notebooks, {compared} outputs compared, {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
