"""Translators, one module per kind of nsys data (see base.py); collected here in order."""

from __future__ import annotations

import importlib
import pkgutil

from .base import Context, Translator

_MODULES = [importlib.import_module(f"{__name__}.{m.name}")
            for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
            if m.name != "base" and not m.name.startswith("_")]

TRANSLATORS: dict[str, Translator] = {
    t.name: t for t in sorted((t for m in _MODULES for t in getattr(m, "TRANSLATORS", ())),
                              key=lambda t: (t.order, t.name))}

__all__ = ["TRANSLATORS", "Translator", "Context"]
