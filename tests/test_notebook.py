"""The worked notebook (examples/analysis.ipynb) runs from top to bottom on the corpus export
it names, headlessly (a notebook that fails to run fails the suite), with no matplotlib
backend forced (Jupyter's inline backend draws the plots: an image in the outputs), and is
stored without its outputs; its rendered copy for the web (docs/analysis.ipynb,
tools/render_notebook.py) has the same code and prints what the notebook prints today."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import CORPUS, ROOT

NOTEBOOK = ROOT / "examples" / "analysis.ipynb"
RENDERED = ROOT / "docs" / "analysis.ipynb"


def _code(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _texts(cells) -> list[list[str]]:
    """Per code cell, its text outputs (printed text and text/plain values)."""
    out = []
    for c in cells:
        texts = []
        for o in c.get("outputs", []):
            t = o.get("text") or o.get("data", {}).get("text/plain") or ""
            texts.append("".join(t) if isinstance(t, list) else t)
        out.append(texts)
    return out


def test_the_notebook_is_stored_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = _code(nb)
    assert code, "the notebook has code"
    assert all(c.get("outputs") == [] and c.get("execution_count") is None for c in code)


def test_the_rendered_copy_is_the_notebook_with_outputs():
    nb, rendered = json.loads(NOTEBOOK.read_text()), json.loads(RENDERED.read_text())
    assert [c["source"] for c in nb["cells"]] == [c["source"] for c in rendered["cells"]]
    code = _code(rendered)
    assert all(c["outputs"] for c in code[:-1])  # every cell shows something, but close()
    kinds = [o.get("output_type") for c in code for o in c["outputs"]]
    assert "error" not in kinds
    assert any("image/png" in o.get("data", {}) for c in code for o in c["outputs"])


def test_the_notebook_runs():
    export = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"
    if not export.exists():
        pytest.skip(f"corpus export {export.name} not found under {CORPUS}")
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from render_notebook import execute
    finally:
        sys.path.pop(0)
    nb = execute(CORPUS.resolve())
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for o in outputs)
    assert "layers: operators: ConvolutionBackward0" in text
    assert "step: Batch #" in text
    assert "1. [idle] GPU idle 95.7 %" in text
    # the plot drawn inline, once (Jupyter's backend; nothing forced Agg)
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1
    # the rendered copy prints what the notebook prints today
    stored = json.loads(RENDERED.read_text())
    assert _texts(_code(json.loads(json.dumps(nb)))) == _texts(_code(stored))
