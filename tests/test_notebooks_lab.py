"""`make lab`: JupyterLab opens the .md chapters as notebooks (jupytext) with MyST rendered (jupyterlab-myst).

A bounded smoke check: a Jupyter server on a free local port serves a chapter ``.md`` as a notebook
through jupytext's contents manager, and the MyST renderer is an enabled JupyterLab extension.
Skipped when the ``lab`` extra is not installed.
"""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("jupyterlab")
pytest.importorskip("jupyterlab_myst")
jupytext = pytest.importorskip("jupytext")

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "ch02_interpolation.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read()


@pytest.mark.slow
def test_lab_serves_a_chapter_md_as_a_notebook(tmp_path):
    shutil.copy(CHAPTER, tmp_path / CHAPTER.name)
    port, token = _free_port(), "bounds-test-token"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--ServerApp.open_browser=False",
         "--ServerApp.allow_root=True"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                if _get(f"{base}/api/status?token={token}")[0] == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None, server.stdout.read()[-3000:]
            assert time.time() < deadline, "JupyterLab did not start within 90 s"
            time.sleep(1)
        status, body = _get(f"{base}/api/contents/{CHAPTER.name}?type=notebook&content=1&token={token}")
        model = json.loads(body)
        assert status == 200 and model["type"] == "notebook"
        cells = model["content"]["cells"]
        expected = jupytext.read(tmp_path / CHAPTER.name).cells
        assert [c["cell_type"] for c in cells] == [c.cell_type for c in expected]
        assert any(c["cell_type"] == "code" and "from bounds_lib" in "".join(c["source"]) for c in cells)
        assert _get(f"{base}/lab?token={token}")[0] == 200
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    listing = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], capture_output=True,
                             text=True, timeout=120)
    out = listing.stdout + listing.stderr
    line = next((ln for ln in out.splitlines() if "jupyterlab-myst" in ln and " v" in ln), "")
    assert "enabled" in line and "OK" in line and "not compatible" not in out, out  # loads in this JupyterLab
