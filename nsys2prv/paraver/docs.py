"""docs/events.md, generated from the registry (a test keeps the file in sync).

    python -m nsys2prv.paraver.docs > docs/events.md
"""

from __future__ import annotations

from . import registry as reg


def render() -> str:
    out = ["# Event types, states and values", "",
           "Generated from `nsys2prv/paraver/registry.py` "
           "(`python -m nsys2prv.paraver.docs > docs/events.md`); a test fails if they differ.",
           "",
           "Numbers marked *Extrae* have exactly Extrae's meaning; all others are in the private "
           f"range {reg.PRIVATE_RANGE[0]}-{reg.PRIVATE_RANGE[1]}, which Extrae does not use. "
           "A value 0 of a name-valued type means the region ends.", "",
           "## States", "", "| value | label | colour | used for |", "|---|---|---|---|"]
    used = {
        reg.STATE_IDLE: "GPU stream with nothing running",
        reg.STATE_RUNNING: "CPU thread outside CUDA calls; GPU stream running a kernel",
        reg.STATE_NOT_CREATED: "CPU thread before its first and after its last record",
        reg.STATE_SYNC: "inside a CUDA synchronisation call",
        reg.STATE_OTHERS: "inside any other CUDA call",
        reg.STATE_MEMORY_TRANSFER: "inside a CUDA memcpy/memset call; GPU stream copying",
        reg.STATE_ALLOC: "inside a CUDA allocation call",
        reg.STATE_FREE: "inside a CUDA free call",
        reg.STATE_CONFIG_ACCEL: "inside a kernel or graph launch call",
    }
    for s in reg.STATES:
        out.append(f"| {s.value} | {s.label} | {s.color} | {used.get(s.value, '')} |")
    out += ["", "## Event types", "", "| type | label | group | values | origin | meaning |",
            "|---|---|---|---|---|---|"]
    for t in sorted(reg.EVENT_TYPES, key=lambda t: t.type):
        origin = "Extrae" if t.extrae else "nsys2prv"
        out.append(f"| {t.type} | {t.label} | {t.group} | {t.values or 'number'} | {origin} | "
                   f"{t.description} |")
    out += ["", "## Type ranges (one type per key)", "",
            "| types | label | values | meaning |", "|---|---|---|---|"]
    for r in reg.TYPE_RANGES:
        out.append(f"| {r.base}-{r.base + r.size - 1} | {r.label.format(key='…')} | "
                   f"{r.values or 'number'} | {r.description} |")
    if reg.RETIRED:
        out += ["", "## Retired numbers", "",
                "Released once, no longer written, never given another meaning (a trace made "
                "by an older nsys2prv may still hold them).", "", "| types | meaning |",
                "|---|---|"]
        for lo, hi, what in reg.RETIRED:
            out.append(f"| {lo}-{hi} | {what} |")
    out += ["", "## Types in the .pcf only", "",
            "Never written as records: labels that tie the trace to its inputs and its write.",
            "", "| type | label | meaning |", "|---|---|---|",
            f"| {reg.REPORT_INFO} | nsys2prv input report (clock offsets) | one value per "
            "input report: its file name, host, and the offset added to its clock "
            "(docs/usage.md) |",
            f"| {reg.WRITE_ID} | nsys2prv write <id> | the first section of the .pcf; the "
            "same id is on the .prv's second line and the .row's first line, and `check` "
            "refuses a set whose files name different writes (a crash between the three "
            "renames) |"]
    out += ["", "## Value tables", "",
            "Names are numbered per trace: fixed values first, then every other name of the "
            "family in name order, so one name has one value in every rank of a merged trace. "
            "Labels are in the `.pcf`.", "", "| family | first free value | contents |",
            "|---|---|---|"]
    for f in reg.VALUE_FAMILIES.values():
        fixed = f" (+ {len(f.fixed)} fixed Extrae values)" if f.fixed else ""
        out.append(f"| {f.name} | {f.first_free} | {f.description}{fixed} |")
    out += ["", "Fixed enumerations (value = CUPTI/nsys id + 1, so that 0 keeps meaning "
            "'end'):", ""]
    for name, table in reg.ENUMS.items():
        items = ", ".join(f"{v} {label}" for v, label in sorted(table.items()))
        out.append(f"* **{name}**: {items}")
    out += ["", "CUDA call values reused from Extrae (`CUDACALL_EV`):", "",
            ", ".join(f"{v} {n}" for n, v in sorted(reg.EXTRAE_CUDA_CALL_VALUES.items(),
                                                   key=lambda kv: kv[1])),
            "", "## Communications", "",
            "An MPI message keeps its MPI tag. A CUDA arrow (from a CUDA call to the GPU work "
            "it issued) has as tag the event type of the activity it points to. A dependency "
            "line (what a stream, a host thread or a collective waited for) has a tag of its "
            "own kind, which no event type uses, so that a view can show or hide each kind; "
            "it goes from the moment the awaited work ended, or the last participant "
            "arrived, to the moment the waiting side could go on. Every synchronisation "
            "record and every collective instance gets a line or is counted in the "
            "translation's summary with the reason it has none.", "",
            "| tag | meaning |", "|---|---|"]
    for tag, meaning in reg.COMM_TAGS.items():
        out.append(f"| {tag} | {meaning} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
