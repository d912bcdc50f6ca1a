"""Which export layout a database has, and where each logical table and column lives.

Three layouts exist in the wild: legacy exports without a metadata table (nsys 2020.x-2021.x),
`EXPORT_META_DATA` (up to 2023.2) and `META_DATA_EXPORT` (2023.3 onwards). Tables can carry
`_V2`/`_V3` suffixes, columns get added (never reordered by us: everything is by name) and enum
tables are created lazily, so enums are looked up by *name* with built-in fallbacks.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

from .database import Database

# Newest export schema this release was checked against (nsys 2026.2.1 writes 3.25.0).
NEWEST_KNOWN_SCHEMA = (3, 25)

_VERSIONED = re.compile(r"^(?P<base>.+?)_V(?P<n>\d+)$")


@dataclass
class ExportSchema:
    """What an export's layout is: its metadata table, schema version and the real names
    of the versioned tables."""

    meta_table: str | None
    version: tuple[int, int, int] | None
    product_version: str | None
    tables: dict[str, str] = field(default_factory=dict)  # logical name -> real name

    @property
    def layout(self) -> str:
        return self.meta_table or "legacy"

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) if self.version else "unknown"


def detect_schema(db: Database) -> ExportSchema:
    """Read the metadata table (if any) and resolve versioned table names."""
    meta_table = None
    meta: dict[str, str] = {}
    for candidate in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has_table(candidate):
            meta_table = candidate
            cols = [c.lower() for c in db.columns(candidate)]
            if "name" in cols and "value" in cols:
                meta = {str(k): str(v) for k, v in db.rows(
                    f'SELECT name, value FROM "{candidate}"') if k is not None}
            break
    version = _parse_version(meta)
    schema = ExportSchema(meta_table, version, meta.get("EXPORT_PRODUCT_VERSION"))
    # Resolve "_V<n>" variants: prefer the highest version of each base name.
    best: dict[str, tuple[int, str]] = {}
    for name in db.tables:
        m = _VERSIONED.match(name)
        base, n = (m.group("base"), int(m.group("n"))) if m else (name, 1)
        if base not in best or n > best[base][0]:
            best[base] = (n, name)
    schema.tables = {base: real for base, (_, real) in best.items()}
    return schema


def _parse_version(meta: dict[str, str]) -> tuple[int, int, int] | None:
    parts = []
    for key in ("EXPORT_SCHEMA_VERSION_MAJOR", "EXPORT_SCHEMA_VERSION_MINOR",
                "EXPORT_SCHEMA_VERSION_MICRO"):
        if key in meta and str(meta[key]).strip().isdigit():
            parts.append(int(meta[key]))
    if len(parts) == 3:
        return tuple(parts)  # type: ignore[return-value]
    text = meta.get("EXPORT_SCHEMA_VERSION")
    if text:
        nums = re.findall(r"\d+", text)
        if nums:
            nums = (nums + ["0", "0"])[:3]
            return tuple(int(x) for x in nums)  # type: ignore[return-value]
    return None


def warn_if_newer(schema: ExportSchema, source: str) -> None:
    """Warn once per report when the schema is newer than any this release was tested on."""
    if schema.version and schema.version[:2] > NEWEST_KNOWN_SCHEMA:
        warnings.warn(
            f"{source}: export schema {schema.version_text} is newer than the newest known "
            f"({NEWEST_KNOWN_SCHEMA[0]}.{NEWEST_KNOWN_SCHEMA[1]}); translating the tables and "
            "columns it recognises", stacklevel=2)


class Enums:
    """`ENUM_*` tables by name, with the built-in tables as a fallback for legacy exports."""

    def __init__(self, db: Database, schema: ExportSchema) -> None:
        self._db = db
        self._schema = schema
        self._cache: dict[str, dict[str, int]] = {}

    def ids(self, enum: str, *aliases: str) -> dict[str, int]:
        """name -> id of an enum table (first existing of `enum`, `aliases`), {} if none."""
        for name in (enum, *aliases):
            if name in self._cache:
                return self._cache[name]
            real = self._schema.tables.get(name)
            if real is None:
                continue
            cols = self._db.columns(real)
            if "id" not in cols or "name" not in cols:
                continue
            table = {str(n): int(i) for i, n in self._db.rows(f'SELECT id, name FROM "{real}"')
                     if i is not None and n is not None}
            if table:
                self._cache[name] = table
                return table
        return {}

    def labels(self, enum: str) -> dict[int, str]:
        """id -> label of an enum table ({} if absent or without labels)."""
        real = self._schema.tables.get(enum)
        if real is None or not {"id", "label"} <= set(self._db.columns(real)):
            return {}
        return {int(i): str(lbl) for i, lbl in self._db.rows(f'SELECT id, label FROM "{real}"')
                if i is not None and lbl}

    def id_of(self, enum: str, name: str, default: int) -> int:
        return self.ids(enum).get(name, default)
