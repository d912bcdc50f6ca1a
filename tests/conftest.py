from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("NSYS2PRV_CORPUS", ROOT.parent / "shared" / "corpus"))


def corpus_files(*subdirs: str) -> list[Path]:
    out = []
    for sub in subdirs or ("sqlite", "exported", "exported2023"):
        d = CORPUS / sub
        if d.is_dir():
            out += sorted(d.glob("*.sqlite"))
    return out


def need_corpus() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"real-export corpus not found at {CORPUS} (set NSYS2PRV_CORPUS)")


@pytest.fixture(scope="session")
def corpus() -> Path:
    need_corpus()
    return CORPUS
