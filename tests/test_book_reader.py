"""book/tools/book_reader.py on its own (the Sphinx extension; the built pages are tested in the browser tests)."""
import pytest

docutils = pytest.importorskip("docutils")
from docutils import nodes  # noqa: E402

import book_reader as br  # noqa: E402  (book/tools is on sys.path: conftest.py)


def _figure(alt, uri="../_images/abc123.png", caption="Train and test error of every model, by width."):
    fig = nodes.figure()
    img = nodes.image(uri=uri, alt=alt) if alt is not None else nodes.image(uri=uri)
    fig += img
    fig += nodes.caption(text=caption)
    return fig, img


@pytest.mark.parametrize("alt", [None, "", "../_images/abc123.png", "fig-ch7-errors.png", "build/x.SVG"])
def test_a_figure_without_real_alt_text_gets_its_caption(alt):
    doc = nodes.document(None, None)
    fig, img = _figure(alt)
    doc += fig
    assert br.figure_alt_text(doc) == 1
    assert img["alt"] == "Train and test error of every model, by width."


def test_explicit_alt_text_and_figures_without_caption_are_kept():
    doc = nodes.document(None, None)
    fig, img = _figure("Forest plot of tau, one line per measure.")
    doc += fig
    bare = nodes.figure()
    lone = nodes.image(uri="a.png", alt="a.png")
    bare += lone
    doc += bare
    assert br.figure_alt_text(doc) == 0
    assert img["alt"] == "Forest plot of tau, one line per measure." and lone["alt"] == "a.png"
