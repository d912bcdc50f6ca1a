"""The critical path's graph built on disk and in slabs against the graph held in memory,
on every corpus export: `graph_build.build_slabs` array for array against
`critical_path.build_graph`, and the critical path of both (tables, what-ifs, steps, the
path trace's events) the same. Run after a change to either builder or to the slabs.

    python tools/graph_equal.py DIR [--block BYTES] [--slab NODES] [--only TEXT]

DIR holds the corpus exports translated (made there on first use, outside the
repository). Reads the traces in windows of `--block` bytes (small: many buckets) and
cuts the graph into slabs of `--slab` nodes. Exit 1 when a trace differs, naming what.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

from nsys2prv.analysis import critical_path as C
from nsys2prv.analysis import graph_slabs as S

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("NSYS2PRV_CORPUS", ROOT.parent / "shared" / "corpus"))
WHAT_IF = ("kernel:*=0.5", "gaps=0", "nccl=0,rank:0=0.5")


def differences(trace: Path, block: int, slab: int) -> list[str]:
    """What differs between the graph held and the graph built on disk (and their paths)."""
    g = C.read_graph(trace, block=block)
    st = C.read_graph(trace, block=block, spill=True, held_nodes=0, slab_nodes=slab)
    why = []
    try:
        if st.n != g.n:
            return [f"nodes {st.n} != {g.n}"]
        parts = [st.part(s) for s in range(st.count)]
        for c in (*S.NODE_COLUMNS, *S.EDGE_COLUMNS):
            got = np.concatenate([getattr(p, c) for p in parts]) if parts else getattr(g, c)
            if not np.array_equal(got, getattr(g, c)):
                why.append(c)
        edges = np.cumsum([0] + [p.pred_ptr[-1] for p in parts])
        ptr = np.concatenate([[0]] + [p.pred_ptr[1:] + e for p, e in zip(parts, edges)])
        if not np.array_equal(ptr, g.pred_ptr):
            why.append("pred_ptr")
        if list(st.counts.items()) != list(g.counts.items()):
            why.append(f"counts {st.counts} != {g.counts}")
        C.connected(g)
        if not np.array_equal(st.connected_rows, g.connected_rows):
            why.append("connected rows")
        if st.kernel_labels != g.kernel_labels():
            why.append("kernel labels")
        if why:
            return why
        lo, hi = g.span
        k = np.arange(12)
        steps = pl.DataFrame({"instance": k, "start": lo + (hi - lo) * k // 12,
                              "end": lo + (hi - lo) * (k + 1) // 12})
        wi = [C.parse_what_if(t) for t in WHAT_IF]
        a, b = C.critical_path(st, wi), C.critical_path(g, wi)
        if a.to_dict() != b.to_dict():
            why.append("critical path " + ",".join(
                k for k in a.to_dict() if a.to_dict()[k] != b.to_dict()[k]))
        if not a.segments.equals(b.segments):
            why.append("segments")
        if not C.step_paths(st, steps).equals(C.step_paths(g, steps)):
            why.append("steps")
        if not C.path_events(st, a.segments).equals(C.path_events(g, b.segments)):
            why.append("path events")
    finally:
        st.close()
    return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="where the translated traces are kept")
    ap.add_argument("--block", type=int, default=64 << 10)
    ap.add_argument("--slab", type=int, default=700)
    ap.add_argument("--only", default="")
    ap.add_argument("--exe", default=str(Path(sys.executable).parent / "nsys2prv"))
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    bad = 0
    for sub in ("sqlite", "exported", "exported2023"):
        for db in sorted((CORPUS / sub).glob("*.sqlite")):
            if args.only not in db.name:
                continue
            trace = args.dir / f"{sub}__{db.stem}.prv"
            if not trace.exists():
                subprocess.run([args.exe, str(db), str(trace)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            why = differences(trace, args.block, args.slab)
            bad += bool(why)
            print(f"{trace.name}: {'same' if not why else 'DIFFERS: ' + '; '.join(why)}",
                  flush=True)
    print(f"{bad} trace(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
