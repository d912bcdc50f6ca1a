"""Name tables: local ids inside one report, and the trace-wide numbering of every name.

Inside a report a name is an id (its StringIds id, or an interned id for inline text). When
all reports are known, each value family numbers its names once: the family's fixed values
(e.g. Extrae's CUDA call numbers) first, then every other name in name order from
`first_free`. So the same name gets the same value in every rank, and the same inputs give
the same numbers.

With the numbering of another trace (`values_like`, read from its `.pcf` by
`read_values_like`), a name that trace has keeps its value there and the others follow its
largest value, in name order: two runs opened side by side show the same colour for the same
kernel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ..sources.cuda_api import normalise_name
from ..errors import InputError
from . import registry as reg

INLINE_ID_BASE = 1 << 40  # ids of interned inline strings (above any StringIds id)
STRING_ID_OFFSET = 1  # local id = StringIds id + 1, so that no name is ever value 0 ("end")

def _demangle(name: str) -> str:
    if name.startswith("_Z"):
        try:
            import cxxfilt  # imported when a mangled name first appears

            return cxxfilt.demangle(name)
        except Exception:  # noqa: BLE001 - keep the mangled name if it cannot be demangled
            return name
    return name


NORMALISERS = {
    "cuda_api": normalise_name,
    "kernel_names": _demangle,
}


def clean_label(name: str | None) -> str:
    """A label every `.pcf`/`.row` reader accepts: one line of printable ASCII, never empty.

    Control characters become spaces; other non-ASCII characters become \\uXXXX escapes
    (pertalde rejects non-ASCII labels, and Paraver's display of them depends on its build).
    """
    if name is None:
        return "(unnamed)"
    text = re.sub(r"[\x00-\x1f\x7f]+", " ", str(name)).strip()
    if not text.isascii():
        text = "".join(ch if ch.isascii() else f"\\u{ord(ch):04x}" if ord(ch) < 0x10000
                       else f"\\U{ord(ch):08x}" for ch in text)
    if text.startswith("#"):  # '#' starts a comment line for some .pcf/.row readers
        text = "\\" + text
    return text or "(unnamed)"


class LocalNames:
    """Per-report: which string ids each family uses, plus interned inline strings."""

    def __init__(self, strings: pl.DataFrame) -> None:
        self._strings = strings
        self._used: dict[str, list[pl.Series]] = {}
        self._inline: dict[str, int] = {}
        self._inline_family: dict[str, set[int]] = {}

    def use(self, family: str, ids: pl.Series) -> None:
        """Record that `family` uses these StringIds ids (their local id is id + 1). Kept
        compact (polars' `unique` keeps a buffer as large as its input: 1.6 MB a chunk of
        kernels, 200 MB over 13M kernels) and merged every 64 chunks."""
        parts = self._used.setdefault(family, [])
        parts.append(ids.drop_nulls().unique().shrink_to_fit())
        if len(parts) > 64:
            parts[:] = [pl.concat(parts).unique().shrink_to_fit()]

    def intern(self, family: str, names: pl.Series) -> pl.Series:
        """Local ids for inline strings (null stays null)."""
        uniq = [n for n in names.drop_nulls().unique().to_list()]
        fam = self._inline_family.setdefault(family, set())
        mapping = {}
        for n in uniq:  # one step per distinct name, not per event
            i = self._inline.get(n)
            if i is None:
                i = INLINE_ID_BASE + len(self._inline)
                self._inline[n] = i
            fam.add(i)
            mapping[n] = i
        if not mapping:
            return pl.Series(names.name, [None] * names.len(), dtype=pl.Int64)
        return names.replace_strict(mapping, default=None, return_dtype=pl.Int64)

    def family_table(self, family: str) -> pl.DataFrame:
        """(local_id, name) of every name the family uses in this report."""
        parts = []
        used = self._used.get(family)
        if used:
            ids = pl.concat(used).unique()
            parts.append(pl.DataFrame({"id": ids.cast(pl.Int64)}).join(
                self._strings.rename({"value": "name"}), on="id", how="left").select(
                    (pl.col("id") + STRING_ID_OFFSET).alias("local_id"),
                    pl.col("name").fill_null(pl.format("(string {})", pl.col("id")))))
        fam = self._inline_family.get(family)
        if fam:
            inv = {i: n for n, i in self._inline.items() if i in fam}
            parts.append(pl.DataFrame({"local_id": list(inv), "name": list(inv.values())},
                                      schema={"local_id": pl.Int64, "name": pl.Utf8}))
        if not parts:
            return pl.DataFrame(schema={"local_id": pl.Int64, "name": pl.Utf8})
        return pl.concat(parts, how="vertical").unique("local_id", keep="first").sort("local_id")

    def families(self) -> list[str]:
        return sorted(set(self._used) | set(self._inline_family))

    def name_of(self, family: str, ids: pl.Series) -> pl.Series:
        """Names of string ids (for classification, e.g. CUDA call -> state)."""
        table = self._strings.rename({"id": "local_id", "value": "name"})
        return pl.DataFrame({"local_id": ids.cast(pl.Int64)}).join(
            table, on="local_id", how="left", maintain_order="left")["name"]


def global_numbering(family: str, names: Iterable[str],
                     like: Mapping[str, int] | None = None) -> dict[str, int]:
    """name -> value for one family across the whole trace (see module docstring); `like`
    (label -> value of another trace's table) gives the values of the names it has."""
    spec = reg.VALUE_FAMILIES[family]
    norm = NORMALISERS.get(family, lambda s: s)
    out: dict[str, int] = {}
    used_values = set(spec.fixed.values())
    free = []
    for name in sorted(set(names)):
        key = norm(name)
        if key in spec.fixed:
            out[name] = spec.fixed[key]
        else:
            free.append(name)
    by_key: dict[str, int] = {}
    nxt = spec.first_free
    if like:
        for name in free:  # a value of the other trace, unless fixed here or taken
            key = norm(name)
            value = like.get(clean_label(key))
            if key not in by_key and value is not None and value not in used_values:
                by_key[key] = value
                used_values.add(value)
        nxt = max(nxt, max(like.values()) + 1)
    for name in free:
        key = norm(name)
        if key not in by_key:
            while nxt in used_values:
                nxt += 1
            by_key[key] = nxt
            used_values.add(nxt)
            nxt += 1
        out[name] = by_key[key]
    return out


def labels_of(family: str, numbering: dict[str, int]) -> dict[int, str]:
    """value -> label (the normalised name) for the `.pcf`."""
    norm = NORMALISERS.get(family, lambda s: s)
    out: dict[int, str] = {}
    for name, value in sorted(numbering.items(), key=lambda kv: (kv[1], kv[0])):
        out.setdefault(value, clean_label(norm(name)))
    return out


REPORT_INFO_LABEL = "nsys2prv input report (clock offsets)"  # the .pcf type only we write


@dataclass(frozen=True)
class ValuesLike:
    """The numbering of an existing nsys2prv trace, from its `.pcf`: per value family,
    label -> value; per type range numbered by key (NVTX domains, GPU metrics), type label
    -> type."""

    path: str
    values: dict[str, dict[str, int]] = field(default_factory=dict)
    types: dict[str, dict[str, int]] = field(default_factory=dict)


def read_values_like(path: str | Path) -> ValuesLike:
    """The numbering of the trace `path` (.prv, .prv.gz or its .pcf); `InputError` when it
    is missing or its .pcf was not written by nsys2prv (a foreign numbering could not be
    mapped back to names)."""
    from .check import pcf_type_labels

    path = Path(path)
    name = path.name
    base = next((name[: -len(s)] for s in (".prv.gz", ".prv", ".pcf") if name.endswith(s)),
                None)
    if base is None:
        raise InputError(f"{path}: --values-like needs a trace (.prv, .prv.gz or its .pcf)")
    pcf = path.with_name(base + ".pcf")
    if not path.exists() or not pcf.is_file():
        raise InputError(f"{path}: no such trace (or no {pcf.name} beside it) to take the "
                         "values from")
    text = pcf.read_text(encoding="utf-8", errors="replace")
    type_labels = pcf_type_labels(text)
    if type_labels.get(reg.REPORT_INFO) != REPORT_INFO_LABEL:
        raise InputError(f"{pcf}: not the .pcf of a trace written by nsys2prv: its values "
                         "cannot be matched to names")
    tables = _pcf_values(text)
    values: dict[str, dict[str, int]] = {}
    types: dict[str, dict[str, int]] = {}
    for t in sorted(tables):
        r = reg.type_range_of(t)
        family = reg.EVENT_TYPE_BY_NUMBER[t].values if t in reg.EVENT_TYPE_BY_NUMBER else \
            r.values if r is not None else None
        if family in reg.VALUE_FAMILIES and family not in values:
            table: dict[str, int] = {}
            for v, label in sorted(tables[t].items()):
                if v != 0:
                    table.setdefault(label, v)
            values[family] = table
        if r is not None and not r.numeric_keys and t in type_labels:
            types.setdefault(r.name, {}).setdefault(type_labels[t], t)
    return ValuesLike(str(path), values, types)


def _pcf_values(text: str) -> dict[int, dict[int, str]]:
    """type -> {value: whole label} of every EVENT_TYPE section of a .pcf."""
    out: dict[int, dict[int, str]] = {}
    group: list[int] = []
    section, in_values = None, False
    for raw in text.splitlines():
        line = raw.replace("\t", " ").strip()
        if not line:
            continue
        if line.isupper() and " " not in line:  # a section name, or VALUES
            in_values = line == "VALUES"
            if not in_values:
                section, group = line, []
            continue
        if section != "EVENT_TYPE" or line.startswith("PRECISION"):
            continue
        parts = line.split(None, 1 if in_values else 2)
        if in_values and parts[0].lstrip("-").isdigit():
            for t in group:
                out[t][int(parts[0])] = parts[1] if len(parts) > 1 else ""
        elif not in_values and len(parts) == 3 and parts[1].isdigit():
            group.append(int(parts[1]))
            out.setdefault(group[-1], {})
    return out
