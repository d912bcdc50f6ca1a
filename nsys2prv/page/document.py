"""The page as one self-contained HTML file: its head (style, a content security policy that
allows no network request), a header, a table of contents, the sections, the script; and
its atomic write.

Every text that comes from the data (kernel and NVTX names, paths, notes) is escaped where
the sections put it in; here only the sections' HTML is assembled. Nothing here reads the
clock or the environment: the same run gives the same bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from html import escape
from pathlib import Path

from ..paraver.output import atomic_text
from ..paraver.output import check_writable as _check
from .assets import CSS, JS

# no request leaves the page: styles and scripts inline, pictures inline SVG or data: URIs
POLICY = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
          "img-src data:; font-src 'none'; connect-src 'none'")


@dataclass
class Section:
    """One part of the page: its anchor (`id`), its heading and its HTML body."""

    id: str
    title: str
    body: str


def render(title: str, subtitle: str, sections: list[Section], generator: str) -> str:
    """The whole page: `title` and `subtitle` (text, escaped here), the sections in order
    with a link to each on top, and `generator` (what made it) at the foot."""
    toc = "".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in sections)
    parts = [f'<section id="{escape(s.id)}"><h2>{escape(s.title)}</h2>{s.body}</section>'
             for s in sections]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f'<header class="top"><h1>{escape(title)}</h1><p class="sub">{escape(subtitle)}'
            f'</p></header><nav class="toc">{toc}</nav><main>' + "\n".join(parts)
            + f"</main><footer>{escape(generator)}</footer><script>{JS}</script>"
            "</body></html>\n")


def check_writable(path: str | os.PathLike[str]) -> Path:
    """Fail early, before a long analysis, where the page could not be written (one-line
    OutputError: `paraver.output.check_writable`)."""
    return _check(path, "page")


def write(text: str, path: str | os.PathLike[str]) -> Path:
    """Write the page atomically (`paraver.output.atomic_text`: a temporary file beside
    `path`, registered with the supervisor, renamed into place; an older page of that name
    stays whole until then); one-line `OutputError` when the place cannot be written."""
    _check(path, "page")
    return atomic_text(path, text, "page")
