"""The worked notebook rendered with its outputs for readers on the web:
`python tools/render_notebook.py` runs examples/analysis.ipynb (kept without outputs) on the
corpus export it names and writes docs/analysis.ipynb, its plots drawn inline by
Jupyter's own backend (none forced). tests/test_notebook.py checks that the rendered copy's
code is the notebook's and that its text outputs are what the notebook prints today.

Needs the [notebook] extra and the corpus (NSYS2PRV_CORPUS, default ../shared/corpus)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "analysis.ipynb"
RENDERED = ROOT / "docs" / "analysis.ipynb"
CORPUS_SHOWN = "../../shared/corpus"  # the notebook's own default, as a reader runs it


def execute(corpus: Path):
    """The notebook run top to bottom in a fresh kernel (in a temporary directory: the
    files it writes stay there); its outputs with the corpus' path as the notebook's
    default."""
    import nbclient
    import nbformat

    nb = nbformat.read(SOURCE, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["NSYS2PRV_CORPUS"] = str(corpus)
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits the environment
    try:
        with tempfile.TemporaryDirectory() as work:
            nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                    resources={"metadata": {"path": work}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for key in ("text",):
                if key in out:
                    out[key] = out[key].replace(str(corpus), CORPUS_SHOWN)
            for mime, value in out.get("data", {}).items():
                if isinstance(value, str) and mime.startswith("text/"):
                    out["data"][mime] = value.replace(str(corpus), CORPUS_SHOWN)
    return nb


def main() -> int:
    import nbformat

    corpus = Path(os.environ.get("NSYS2PRV_CORPUS", ROOT.parent / "shared" / "corpus"))
    nb = execute(corpus.resolve())
    nbformat.write(nb, RENDERED)
    print(f"wrote {RENDERED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
