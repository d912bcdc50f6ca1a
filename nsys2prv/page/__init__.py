"""The run on one page (docs/html.md): `analyze --html`, `diff --html`, `analyze --scaling
--html`, `Run.to_html` and the sections Jupyter shows. `build.py` assembles the pages from
`sections.py` (one function per analysis: what it returned, as HTML), `charts.py` draws
the pictures as inline SVG, `table.py` the tables, `document.py` writes the page, `assets.py`
holds its style and script. It reads what the analyses return (`run.Tables`), never the
trace."""
