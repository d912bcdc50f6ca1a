"""One Nsight Systems export: schema, strings, and facts about the run (host, start, ranks).

Environment variables recorded in the export are read only to pick out a handful of facts
(MPI rank, world size, host name); nothing else from them is kept or written anywhere.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path

import polars as pl

from ..errors import InputError
from .database import Database
from .schema import Enums, ExportSchema, detect_schema

# Environment variables that carry the MPI rank, in order of trust.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                  "SLURM_PROCID", "RANK")
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS",
                  "WORLD_SIZE")
HOST_VARIABLES = ("HOSTNAME", "SLURMD_NODENAME")
_WANTED = RANK_VARIABLES + SIZE_VARIABLES + HOST_VARIABLES
_ENV_RE = re.compile(r'(?:^|[;\x00\n])(' + "|".join(_WANTED) + r')="?([^;\x00\n"]*)')

# Tables whose presence makes a file an Nsight Systems export.
_NSYS_MARKERS = ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                 "NVTX_EVENTS", "OSRT_API", "TARGET_INFO_SESSION_START_TIME",
                 "EXPORT_META_DATA", "META_DATA_EXPORT", "ThreadNames")

PID_SHIFT = 24
PID_MASK = 0xFFFFFF


def pid_of(global_id: pl.Expr) -> pl.Expr:
    """PID bits (24-47) of a globalTid/globalPid, as NVIDIA documents the encoding."""
    return (global_id // (1 << PID_SHIFT)) % (1 << 24)


def tid_of(global_id: pl.Expr) -> pl.Expr:
    return global_id % (1 << 24)


class Report:
    """An opened export. Use :func:`nsys2prv.open_report` to get one."""

    def __init__(self, path: str | os.PathLike[str], name: str | None = None,
                 use_arrow: bool = True) -> None:
        self.path = Path(path)
        self.db = Database(self.path, use_arrow=use_arrow)
        if not any(self.db.has_table(t) for t in _NSYS_MARKERS):
            raise InputError(f"{self.path}: SQLite file is not an Nsight Systems export "
                             "(no StringIds/CUPTI/NVTX/metadata tables)")
        self.schema: ExportSchema = detect_schema(self.db)
        self.enums = Enums(self.db, self.schema)
        self.name = name or self.path.name.split(".")[0]
        # a time window [start, end) in local ns: windowed sources read only what overlaps
        # it (plus each row's first and last records), see sources.base.window_clause
        self.window: tuple[int, int] | None = None

    # -- tables ------------------------------------------------------------------------------
    def table(self, logical: str) -> str | None:
        """Real name of a logical table (highest `_V<n>` variant), or None if absent/empty."""
        return self.schema.tables.get(logical)

    def nonempty(self, logical: str) -> str | None:
        real = self.table(logical)
        if real is None:
            return None
        return real if self.db.scalar(f'SELECT 1 FROM "{real}" LIMIT 1') is not None else None

    def columns(self, logical: str) -> list[str]:
        real = self.table(logical)
        return self.db.columns(real) if real else []

    # -- strings -----------------------------------------------------------------------------
    @cached_property
    def strings(self) -> pl.DataFrame:
        """StringIds as (id, value); invalid UTF-8 is replaced, never fatal."""
        real = self.table("StringIds")
        if real is None:
            return pl.DataFrame(schema={"id": pl.Int64, "value": pl.Utf8})
        rows = self.db.rows(f'SELECT id, value FROM "{real}"')
        return pl.DataFrame({"id": [r[0] for r in rows], "value": [r[1] for r in rows]},
                            schema={"id": pl.Int64, "value": pl.Utf8}).filter(
                                pl.col("id").is_not_null())

    # -- facts about the run -----------------------------------------------------------------
    @cached_property
    def session_start_ns(self) -> int | None:
        """UTC epoch (ns) of the session start; None in legacy exports."""
        real = self.table("TARGET_INFO_SESSION_START_TIME")
        if real and "utcEpochNs" in self.db.columns(real):
            v = self.db.scalar(f'SELECT utcEpochNs FROM "{real}" LIMIT 1')
            return int(v) if v is not None else None
        return None

    @cached_property
    def _system_env(self) -> dict[str, str]:
        """Selected TARGET_INFO_SYSTEM_ENV entries (never the environment itself)."""
        real = self.table("TARGET_INFO_SYSTEM_ENV")
        if not real or not {"name", "value"} <= set(self.db.columns(real)):
            return {}
        out = {}
        for name, value in self.db.rows(
                f"SELECT name, value FROM \"{real}\" WHERE name IN "
                "('Hostname', 'CpuCores', 'OsDescription', 'CudaDriverVersion')"):
            if name and value is not None:
                out[str(name)] = str(value)
        return out

    @cached_property
    def _env_facts(self) -> dict[str, str]:
        """Rank/size/host variables picked out of the recorded environments."""
        texts: list[str] = []
        real = self.table("TARGET_INFO_SYSTEM_ENV")
        if real and {"name", "value"} <= set(self.db.columns(real)):
            texts += [r[0] for r in self.db.rows(
                f"SELECT value FROM \"{real}\" WHERE name = 'DeviceEnvironment'") if r[0]]
        real = self.table("META_DATA_CAPTURE")
        if real and {"name", "value"} <= set(self.db.columns(real)):
            texts += [r[0] for r in self.db.rows(
                f"SELECT value FROM \"{real}\" WHERE name LIKE '%ENVIRONMENT_VARIABLE%'")
                if r[0]]
        facts: dict[str, str] = {}
        for text in texts:
            for key, value in _ENV_RE.findall(str(text)):
                facts.setdefault(key, value.strip())
        return facts

    @cached_property
    def host(self) -> str | None:
        h = self._system_env.get("Hostname")
        if h:
            return h
        for var in HOST_VARIABLES:
            if self._env_facts.get(var):
                return self._env_facts[var]
        return None

    @cached_property
    def cpu_cores(self) -> int | None:
        v = self._system_env.get("CpuCores", "")
        return int(v) if v.isdigit() else None

    @cached_property
    def rank(self) -> int | None:
        """MPI rank of the profiled program when the report is one rank of a job."""
        for var in RANK_VARIABLES:
            v = self._env_facts.get(var, "")
            if v.isdigit():
                return int(v)
        return None

    @cached_property
    def world_size(self) -> int | None:
        for var in SIZE_VARIABLES:
            v = self._env_facts.get(var, "")
            if v.isdigit():
                return int(v)
        return None

    @cached_property
    def process_ranks(self) -> dict[int, int]:
        """pid -> MPI rank from MPI_RANKS or NVTX thread names 'MPI Rank N' (launcher reports)."""
        ranks: dict[int, int] = {}
        real = self.nonempty("MPI_RANKS")
        if real and {"globalTid", "rank"} <= set(self.db.columns(real)):
            for gtid, rank in self.db.rows(f'SELECT globalTid, rank FROM "{real}"'):
                if gtid is not None and rank is not None:
                    ranks.setdefault((int(gtid) >> PID_SHIFT) & PID_MASK, int(rank))
        nvtx = self.nonempty("NVTX_EVENTS")
        if not ranks and nvtx:
            thread_type = self.enums.id_of("ENUM_NSYS_EVENT_TYPE", "NvtxThread", 39)
            cols = set(self.db.columns(nvtx))
            text = "coalesce(s.value, e.text)" if "textId" in cols else "e.text"
            join = 'LEFT JOIN "StringIds" s ON s.id = e.textId' if "textId" in cols else ""
            for gtid, label in self.db.rows(
                    f'SELECT e.globalTid, {text} FROM "{nvtx}" e {join} '
                    f"WHERE e.eventType = {int(thread_type)}"):
                m = re.fullmatch(r"MPI Rank (\d+)", str(label or "").strip())
                if m and gtid is not None:
                    ranks.setdefault((int(gtid) >> PID_SHIFT) & PID_MASK, int(m.group(1)))
        return ranks

    @cached_property
    def processes(self) -> pl.DataFrame:
        """(pid, name) of every process the export lists."""
        real = self.table("PROCESSES")
        if not real or not {"pid", "name"} <= set(self.db.columns(real)):
            return pl.DataFrame(schema={"pid": pl.Int64, "process_name": pl.Utf8})
        rows = self.db.rows(f'SELECT pid, name FROM "{real}"')
        return pl.DataFrame({"pid": [r[0] for r in rows], "process_name": [r[1] for r in rows]},
                            schema={"pid": pl.Int64, "process_name": pl.Utf8}).unique(
                                "pid", keep="first", maintain_order=True)

    @cached_property
    def thread_names(self) -> pl.DataFrame:
        """(pid, tid, thread_name) from ThreadNames."""
        real = self.table("ThreadNames")
        schema = {"pid": pl.Int64, "tid": pl.Int64, "thread_name": pl.Utf8}
        if not real or not {"nameId", "globalTid"} <= set(self.db.columns(real)):
            return pl.DataFrame(schema=schema)
        rows = self.db.rows(f'SELECT t.globalTid, s.value FROM "{real}" t '
                            'JOIN "StringIds" s ON s.id = t.nameId')
        df = pl.DataFrame({"g": [r[0] for r in rows], "thread_name": [r[1] for r in rows]},
                          schema={"g": pl.Int64, "thread_name": pl.Utf8})
        return df.select(pid_of(pl.col("g")).alias("pid"), tid_of(pl.col("g")).alias("tid"),
                         "thread_name").unique(["pid", "tid"], keep="last", maintain_order=True)

    @cached_property
    def gpus(self) -> pl.DataFrame:
        """(device, gpu_name) from TARGET_INFO_GPU (`id` or, in legacy exports, `deviceId`)."""
        real = self.table("TARGET_INFO_GPU")
        schema = {"device": pl.Int64, "gpu_name": pl.Utf8}
        if not real:
            return pl.DataFrame(schema=schema)
        cols = self.db.columns(real)
        # `id` is the GPU id that CUPTI's deviceId matches in the exports we have seen;
        # `cuDevice` is not (it is 0 for every GPU in several of them).
        idcol = "id" if "id" in cols else ("deviceId" if "deviceId" in cols else None)
        if idcol is None or "name" not in cols:
            return pl.DataFrame(schema=schema)
        rows = self.db.rows(f'SELECT {idcol}, name FROM "{real}"')
        return pl.DataFrame({"device": [r[0] for r in rows], "gpu_name": [r[1] for r in rows]},
                            schema=schema).unique("device", keep="first", maintain_order=True)

    # TARGET_INFO_GPU column -> name in `gpu_limits` (the per-SM limits the occupancy
    # calculator takes from the export; 2020-era exports lack the compute capability)
    GPU_LIMITS = {"smCount": "sms", "maxWarpsPerSm": "max_warps",
                  "maxBlocksPerSm": "max_blocks", "maxRegistersPerSm": "max_registers",
                  "maxShmemPerSm": "max_shared", "computeMajor": "cc_major",
                  "computeMinor": "cc_minor"}

    @cached_property
    def gpu_limits(self) -> pl.DataFrame:
        """(gpu = TARGET_INFO_GPU id, gpu_name, sms, max_warps, max_blocks, max_registers,
        max_shared, cc_major, cc_minor) per GPU; a column the export lacks is null, and an
        export without the table gives no row."""
        schema = {"gpu": pl.Int64, "gpu_name": pl.Utf8,
                  **{v: pl.Int64 for v in self.GPU_LIMITS.values()}}
        real = self.table("TARGET_INFO_GPU")
        if not real:
            return pl.DataFrame(schema=schema)
        cols = set(self.db.columns(real))
        idcol = "id" if "id" in cols else ("deviceId" if "deviceId" in cols else None)
        if idcol is None:
            return pl.DataFrame(schema=schema)
        select = [f'"{idcol}"', '"name"' if "name" in cols else "NULL"] + [
            f'"{c}"' if c in cols else "NULL" for c in self.GPU_LIMITS]
        rows = self.db.rows(f'SELECT {", ".join(select)} FROM "{real}"')
        return pl.DataFrame(rows, schema=schema, orient="row").unique(
            "gpu", keep="first", maintain_order=True)

    def describe(self) -> dict:
        """A JSON-friendly summary (no environment content)."""
        return {
            "path": str(self.path), "name": self.name, "layout": self.schema.layout,
            "schema_version": self.schema.version_text,
            "product_version": self.schema.product_version, "host": self.host,
            "session_start_ns": self.session_start_ns, "rank": self.rank,
            "world_size": self.world_size, "cpu_cores": self.cpu_cores,
        }

    def close(self) -> None:
        self.db.close()
