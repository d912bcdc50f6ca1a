"""NCCL's host-side NVTX ranges (`NVTX_EVENTS`) with their payloads decoded.

NCCL marks every API call with an NVTX push/pop range in its own domain, "NCCL". Exports
whose domain definitions were trimmed away still carry the ranges in a non-default domain, so
a range is NCCL's when its domain is named "NCCL", or when its domain is unnamed, not the
default one, and its text starts with "nccl", or when its payload names an NCCL communicator.

Recent NCCL releases attach an NVTX *extended payload* to each range. nsys exports it in one
of two ways, both decoded here into the same columns:

* JSON (`jsonText`, or `jsonTextId` -> StringIds): an object whose keys are the payload entry
  names, e.g. ``{"NCCL communicator ID": 123, "Message size [bytes]": 4096, "Peer rank": 1}``.
* binary (`binaryData`): a 32-byte header ``<IIIIQQ`` (domain id, reserved, schema id,
  reserved, payload size, total size) followed by the payload, whose fields are laid out as
  the schema of `NVTX_PAYLOAD_SCHEMA_ENTRIES` says (type -> size, `offset`; a NULL offset is
  the natural alignment after the previous entry, 0 for the first).

Fields are matched by entry name (the names NCCL uses, see `FIELD_NAMES`), never by schema id:
NCCL's static schema ids change between releases. Datatype and reduction are NCCL's enum ids
(ncclDataType_t, ncclRedOp_t; names in JSON are mapped to them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from . import nvtx
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "nccl"
TABLE = nvtx.TABLE
SCHEMAS_TABLE = "NVTX_PAYLOAD_SCHEMAS"
ENTRIES_TABLE = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
NCCL_DOMAIN = "NCCL"
HEADER_BYTES = 32

# canonical field -> payload entry names NCCL has used for it
FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "comm": ("NCCL communicator ID",),
    "bytes": ("Message size [bytes]", "Message size", "Bytes"),
    "datatype": ("Datatype", "Data type"),
    "redop": ("Reduction operation",),
    "root": ("Root",),
    "peer": ("Peer rank", "Peer"),
    "rank": ("Rank",),
    "nranks": ("No. of ranks",),
}
FIELDS = tuple(FIELD_NAMES)

# NVTX_PAYLOAD_ENTRY_TYPE_* (nvToolsExtPayload.h) -> (bytes, signed); floats are not read.
ENTRY_TYPES: dict[int, tuple[int, bool]] = {
    1: (1, True), 2: (1, False), 3: (2, True), 4: (2, False), 5: (4, True), 6: (4, False),
    7: (8, True), 8: (8, False), 9: (8, True), 10: (8, False), 11: (1, True), 12: (1, False),
    13: (2, True), 14: (2, False), 15: (4, True), 16: (4, False), 17: (8, True),
    18: (8, False), 22: (8, False), 23: (8, False),
}
SCHEMA_ID_STATIC_START = 1 << 24  # entry types from here on are registered enums/schemas
ENUM_BYTES = 4  # C enums (ncclRedOp_t) are ints

# JSON values given as names
REDOPS = {"sum": 0, "prod": 1, "product": 1, "max": 2, "min": 3, "avg": 4}
DATATYPES = {"int8": 0, "char": 0, "uint8": 1, "int32": 2, "int": 2, "uint32": 3, "int64": 4,
             "uint64": 5, "float16": 6, "half": 6, "float32": 7, "float": 7, "float64": 8,
             "double": 8, "bfloat16": 9, "float8e4m3": 10, "float8e5m2": 11}

COLUMNS = CPU_CALL + (
    Column("event_type", ("eventType",)),
    Column("text_id", ("textId",)),
    Column("text", ("text",), dtype=pl.Utf8),
    Column("domain_id", ("domainId",), fallback="0"),
    Column("json", ("jsonText",), dtype=pl.Utf8),
    Column("json_id", ("jsonTextId",)),
    Column("blob", ("binaryData",), dtype=pl.Utf8, transform="hex({c})"),
)

OUTPUT_SCHEMA: dict[str, pl.DataType] = {
    "row_id": pl.Int64, "start": pl.Int64, "end": pl.Int64, "pid": pl.Int64, "tid": pl.Int64,
    "text_id": pl.Int64, "text": pl.Utf8, "name": pl.Utf8,
    **{f: pl.Int64 for f in FIELDS},
}


def _range_ids(report: Report) -> list[int]:
    ids = nvtx.event_type_ids(report)
    return sorted(ids["pushpop"] | ids["startend"])


def _candidate_where(report: Report) -> str | None:
    """SQL filter that keeps every possible NCCL range (refined in `read`)."""
    table = report.table(TABLE)
    if table is None:
        return None
    cols = set(report.db.columns(table))
    ors = []
    if "domainId" in cols:
        ors.append("domainId != 0")
    ors += [f"{c} IS NOT NULL" for c in ("jsonText", "jsonTextId", "binaryData") if c in cols]
    if not ors:
        return None
    types = ",".join(str(i) for i in _range_ids(report))
    return f"eventType IN ({types}) AND ({' OR '.join(ors)})"


def available(report: Report) -> bool:
    """True when the export has at least one NCCL range (cheap SQL pre-check)."""
    where = _candidate_where(report)
    if where is None or not has_rows(report, TABLE):
        return False
    table = report.table(TABLE)
    cols = set(report.db.columns(table))
    strings = report.table("StringIds")
    named = []
    if strings and "textId" in cols:
        named.append(f'textId IN (SELECT id FROM "{strings}" WHERE value LIKE \'nccl%\')')
    if "text" in cols:
        named.append("text LIKE 'nccl%'")
    if "jsonText" in cols:
        named.append("jsonText LIKE '%NCCL communicator%'")
    if "binaryData" in cols:
        named.append("binaryData IS NOT NULL")
    if not named:
        return False
    sql = f'SELECT 1 FROM "{table}" WHERE {where} AND ({" OR ".join(named)}) LIMIT 1'
    return report.db.scalar(sql) is not None


# -- payload schemas ------------------------------------------------------------------------

def schema_layouts(report: Report) -> pl.DataFrame:
    """(domain_id, schema_id, field, offset, size, signed) of the payload fields NCCL names.

    One Python step per schema entry (schemas are a handful); offsets are from the start of
    the payload (after the binary header).
    """
    schema = {"domain_id": pl.Int64, "schema_id": pl.Int64, "field": pl.Utf8,
              "offset": pl.Int64, "size": pl.Int64, "signed": pl.Boolean}
    table = report.table(ENTRIES_TABLE)
    if table is None:
        return pl.DataFrame(schema=schema)
    cols = set(report.db.columns(table))
    if not {"schemaId", "type", "name"} <= cols:
        return pl.DataFrame(schema=schema)
    dom = "domainId" if "domainId" in cols else "0"
    idx = "idx" if "idx" in cols else "rowid"
    off = '"offset"' if "offset" in cols else "NULL"
    rows = report.db.rows(
        f'SELECT DISTINCT {dom}, schemaId, {idx}, "type", name, {off} FROM "{table}" '
        f"ORDER BY 1, 2, 3")
    by_name = {n: f for f, names in FIELD_NAMES.items() for n in names}
    out: list[tuple] = []
    prev: tuple | None = None  # (domain, schema, end of the previous entry)
    for domain, schema_id, _, etype, name, offset in rows:
        size, signed = _entry_size(etype)
        key = (domain, schema_id)
        pos = 0 if prev is None or prev[:2] != key else prev[2]
        if offset is None:
            offset = -(-pos // size) * size if size else pos  # natural alignment
        prev = (domain, schema_id, offset + (size or 0))
        field = by_name.get(str(name).strip()) if name is not None else None
        if field is not None and size:
            out.append((domain or 0, schema_id, field, offset, size, signed))
    return pl.DataFrame(out, schema=schema, orient="row").unique(
        ["domain_id", "schema_id", "field"], keep="first", maintain_order=True)


def _entry_size(etype: int | None) -> tuple[int, bool]:
    """(bytes, signed) of a payload entry type; (0, False) for types not read."""
    if etype is None:
        return 0, False
    if etype >= SCHEMA_ID_STATIC_START:
        return ENUM_BYTES, True
    return ENTRY_TYPES.get(int(etype), (0, False))


def _le_int(hex_: pl.Expr, byte_offset: int, size: int, signed: bool) -> pl.Expr:
    """Little-endian integer of `size` bytes at `byte_offset` of a hex-encoded blob.

    8-byte values are read as two 32-bit halves and kept as their signed 64-bit view (NCCL
    communicator ids use all 64 bits); shorter values are sign-extended when `signed`.
    """
    def be(first: int, n: int) -> pl.Expr:  # bytes first..first+n-1 as big-endian hex
        return pl.concat_str([hex_.str.slice(2 * (first + i), 2) for i in reversed(range(n))])

    present = hex_.str.len_chars() >= 2 * (byte_offset + size)
    if size == 8:
        lo = be(byte_offset, 4).str.to_integer(base=16, strict=False).cast(pl.UInt64)
        hi = be(byte_offset + 4, 4).str.to_integer(base=16, strict=False).cast(pl.UInt64)
        value = (hi * (1 << 32) + lo).reinterpret(signed=True)
    else:
        value = be(byte_offset, size).str.to_integer(base=16, strict=False)
        if signed:
            half = 1 << (8 * size - 1)
            value = pl.when(value >= half).then(value - 2 * half).otherwise(value)
    return pl.when(present).then(value.cast(pl.Int64))


def decode_binary(df: pl.DataFrame, layouts: pl.DataFrame) -> pl.DataFrame:
    """Payload fields of hex-encoded `blob`s, one pass per schema (loop over schemas only).

    A schema id is looked up in the event's own domain, else in the first domain defining it
    (the schema tables have no process column, and domain ids are per process)."""
    c = pl.col
    out = df.with_columns(_le_int(c("blob"), 8, 4, False).alias("_bschema"),
                          *[pl.lit(None, pl.Int64).alias(f"_b_{f}") for f in FIELDS])
    if layouts.height == 0 or out["_bschema"].null_count() == out.height:
        return out.drop("_bschema")
    known = layouts.select("domain_id", "schema_id").unique(maintain_order=True)
    first = known.group_by("schema_id", maintain_order=True).agg(
        c("domain_id").first().alias("_fdom"))
    out = (out.join(known.with_columns(pl.lit(True).alias("_own")),
                    left_on=["domain_id", "_bschema"], right_on=["domain_id", "schema_id"],
                    how="left", maintain_order="left")
           .join(first, left_on="_bschema", right_on="schema_id", how="left",
                 maintain_order="left")
           .with_columns(pl.when(c("_own")).then(c("domain_id")).otherwise(c("_fdom"))
                         .alias("_rdom")))
    for (domain, schema_id), fields in layouts.group_by(["domain_id", "schema_id"],
                                                        maintain_order=True):
        hit = (c("_rdom") == domain) & (c("_bschema") == schema_id)
        out = out.with_columns(**{
            f"_b_{f}": pl.when(hit).then(_le_int(c("blob"), HEADER_BYTES + o, s, sg))
            .otherwise(c(f"_b_{f}"))
            for f, o, s, sg in fields.select("field", "offset", "size", "signed").rows()})
    return out.drop("_bschema", "_own", "_fdom", "_rdom")


# -- JSON payloads ------------------------------------------------------------------------

_JSON_KEYS = tuple(n for names in FIELD_NAMES.values() for n in names)
_JSON_STRUCT = pl.Struct({n: pl.Utf8 for n in _JSON_KEYS})


def _json_struct(texts: pl.Series) -> pl.DataFrame:
    """Payload objects as one Utf8 column per entry name (nulls where absent or not JSON)."""
    objects = texts.filter(texts.str.strip_chars().str.starts_with("{"))
    try:
        decoded = objects.str.json_decode(_JSON_STRUCT)
    except Exception:  # noqa: BLE001 - a malformed payload: decode each distinct text alone
        decoded = _json_one_by_one(objects)
    return pl.DataFrame({"json": objects}).with_columns(decoded.alias("_j")).unnest("_j")


def _json_one_by_one(texts: pl.Series) -> pl.Series:
    """Fallback for payload texts that polars refuses as a batch (one step per text)."""
    def parse(t: str) -> dict:
        try:
            obj = json.loads(t)
        except ValueError:
            return {}
        if not isinstance(obj, dict):
            return {}
        return {k: (None if v is None else str(v)) for k, v in obj.items()
                if k in _JSON_KEYS}
    return pl.Series([parse(t) for t in texts.to_list()], dtype=_JSON_STRUCT)


def _to_int(expr: pl.Expr) -> pl.Expr:
    """JSON number text -> Int64 (uint64 above 2^63 kept as its signed view)."""
    return pl.coalesce(expr.cast(pl.Int64, strict=False),
                       expr.cast(pl.UInt64, strict=False).reinterpret(signed=True),
                       expr.cast(pl.Float64, strict=False).round(0).cast(pl.Int64, strict=False))


def _named(expr: pl.Expr, names: dict[str, int]) -> pl.Expr:
    """An enum field given as a name ('Sum', 'ncclFloat32') or as its number."""
    key = expr.str.to_lowercase().str.strip_chars().str.strip_prefix("nccl")
    return pl.coalesce(_to_int(expr), key.replace_strict(names, default=None,
                                                         return_dtype=pl.Int64))


def decode_json(df: pl.DataFrame) -> pl.DataFrame:
    """Payload fields of the `json` column (distinct texts decoded once)."""
    c = pl.col
    texts = df["json"].drop_nulls().unique()
    fields = {f: pl.lit(None, pl.Int64) for f in FIELDS}
    if texts.len() == 0:
        return df.with_columns(**{f"_j_{f}": v for f, v in fields.items()})
    table = _json_struct(texts)
    exprs = []
    for f, names in FIELD_NAMES.items():
        raw = pl.coalesce([c(n) for n in names])
        value = (_named(raw, REDOPS) if f == "redop" else
                 _named(raw, DATATYPES) if f == "datatype" else _to_int(raw))
        exprs.append(value.alias(f"_j_{f}"))
    table = table.select("json", *exprs)
    return df.join(table, on="json", how="left", maintain_order="left")


# -- reading ------------------------------------------------------------------------------

def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    """NCCL ranges: times, thread, call name (`text_id` or inline `text`, and `name`) and the
    payload fields `comm, bytes, datatype, redop, root, peer, rank, nranks` (null if absent)."""
    where = _candidate_where(report)
    if where is None:
        return
    c = pl.col
    domains = nvtx.domains(report).rename({"name": "domain_name"})
    strings = report.strings
    layouts = schema_layouts(report)
    for chunk in read_chunks(report, TABLE, COLUMNS, chunk_rows, where=where):
        df = chunk.join(domains, on=["pid", "domain_id"], how="left", maintain_order="left")
        df = df.join(strings.rename({"id": "text_id", "value": "_tv"}), on="text_id",
                     how="left", maintain_order="left")
        df = df.join(strings.rename({"id": "json_id", "value": "_jv"}), on="json_id",
                     how="left", maintain_order="left")
        df = df.with_columns(pl.coalesce("_tv", "text").alias("name"),
                             pl.coalesce("json", "_jv").alias("json"),
                             c("domain_id").fill_null(0))
        df = decode_binary(decode_json(df), layouts)
        df = df.with_columns(**{f: pl.coalesce(f"_b_{f}", f"_j_{f}") for f in FIELDS})
        nccl = ((c("domain_name") == NCCL_DOMAIN)
                | (c("domain_name").is_null() & (c("domain_id") != 0)
                   & c("name").str.starts_with("nccl"))
                | c("comm").is_not_null())
        yield df.filter(nccl).select(list(OUTPUT_SCHEMA)).cast(OUTPUT_SCHEMA)
