"""The worked notebook (examples/analysis.ipynb) runs from top to bottom on the corpus export
it names, headlessly (a notebook that fails to run fails the suite), and is stored without
its outputs."""

from __future__ import annotations

import json
import os

import pytest

from conftest import CORPUS, ROOT

NOTEBOOK = ROOT / "examples" / "analysis.ipynb"


def test_the_notebook_is_stored_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "the notebook has code"
    assert all(c.get("outputs") == [] and c.get("execution_count") is None for c in code)


def test_the_notebook_runs(tmp_path):
    export = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"
    if not export.exists():
        pytest.skip(f"corpus export {export.name} not found under {CORPUS}")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {**os.environ, "NSYS2PRV_CORPUS": str(CORPUS), "MPLBACKEND": "Agg"}
    old = dict(os.environ)
    os.environ.update(env)  # the kernel inherits the environment
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for o in outputs)
    assert "layers: operators: ConvolutionBackward0" in text
    assert "step: Batch #" in text
