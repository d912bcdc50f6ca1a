"""The paragraph of a comparison, as an analyst explaining a tuning step to their team
writes it. Every number in it is one of the comparison's tables' (`Comparison.to_dict`), in
ms, s or % (tests/test_story.py checks that):

1. elapsed time, and where it went: the NVTX ranges whose total moved most, leaves before
   the containers that only add them up (`where_it_went`);
2. the step's verdict (`stats.Shift.reading`: slower, faster, no change, inconclusive);
3. inside the step, what moved beyond noise (and by 1 % of the step at least) and why: its categories (compute, NCCL,
   copies, GPU idle), the bound of its GPU idle time that changed (launching, host compute,
   synchronisation, waiting for data, copy calls), the kernels whose time per step moved
   (each family of tests Holm-corrected), the copies by memory kind ('Host-to-Device
   pageable 6.400 ms -> pinned 2.400 ms'), a device that moved apart from the others, and
   the hardware rates of the kernels that moved;
4. without a step (one sample a side, noise cannot be judged): the categories, kernels and
   idle causes of the whole run that moved most, as they are.

Nothing that did not move beyond noise is named where noise can be judged: a run whose
only change is noise reads as such.
"""

from __future__ import annotations

import polars as pl

from .stats import Shift

MATERIAL = 0.01  # where it went: ranges that moved by 1 % of the elapsed time at least
EXPLAINED = 0.5  # a container whose children's changes hold half of its own only adds up
WRAPPER = 0.9  # a single child range with its parent's count and this share of its time
APART = 3.0  # a device moved apart: its change at least this many times the others' median


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} %"


def _t(ns: float) -> str:
    """A duration: ms below 10 s, s above (3 decimals, as the tables give them in ns)."""
    return f"{ns / 1e9:.3f} s" if abs(ns) >= 10e9 else f"{ns / 1e6:.3f} ms"


def _dt(ns: float) -> str:
    """A signed change of duration."""
    return f"{ns / 1e9:+.3f} s" if abs(ns) >= 10e9 else f"{ns / 1e6:+.3f} ms"


def explain(c) -> str:
    """The paragraph of a `diff.Comparison`."""
    parts = [_elapsed(c)]
    if c.iterations is not None:
        parts.append(_step(c))
    parts += explain_changes(c)
    return " ".join(p for p in parts if p)


def explain_changes(c) -> list[str]:
    """The sentences after the elapsed time and the step's verdict: inside the step where
    there is one (beyond noise only), else the whole run's largest moves."""
    parts: list[str] = []
    if c.iterations is not None:
        parts += _inside_step(c)
    else:
        parts += _whole_run(c)
    layers = _layers(c)
    if layers:
        parts.append(layers)
    copies = _copies(c)
    if copies:
        parts.append(copies)
    code = _code(c)
    if code:
        parts.append(code)
    device = _device_apart(c)
    if device:
        parts.append(device)
    if c.warnings:
        parts.append("Note: " + " ".join(c.warnings))
    return parts


# ---------------------------------------------------------------------- elapsed time --

def _elapsed(c) -> str:
    b, a = c.before.elapsed, c.after.elapsed
    head = f"Elapsed {_t(b)} -> {_t(a)} ({_pct(c.elapsed_change)})"
    if c.iterations is None:
        v = c.verdict
        head += ("; one run a side: noise cannot be judged" if v.p is None else
                 f": {v.reading()}")
    moved = where_it_went(c)
    if not moved:
        return head + "."
    return head + "; where it went: " + ", ".join(
        f"{name} {_dt(d)}" for name, d in moved) + "."


def where_it_went(c, k: int = 3) -> list[tuple[str, int]]:
    """The `k` NVTX ranges (families) that explain the change of elapsed time, largest
    change first: from the top-level ranges down, a range whose children's changes make up
    its own is replaced by them (a container only adds them up), unless it has one child
    that is the same span (a wrapper, named by the outer range). Only when the elapsed
    time moved by MATERIAL at least, and ranges that moved by that much."""
    if c.nvtx.height == 0 or c.range_tree is None:
        return []
    floor = MATERIAL * max(c.before.elapsed, c.after.elapsed)
    if abs(c.after.elapsed - c.before.elapsed) < floor:
        return []
    delta = {(r["range"], r["domain"] or None): r for r in c.nvtx.iter_rows(named=True)}
    tree = c.range_tree
    children: dict[tuple, list[tuple]] = {}
    parent_n: dict[tuple, tuple[int, int | None]] = {}
    for r in tree.iter_rows(named=True):
        key = (r["family"], r["domain"])
        par = (r["parent"], r["parent_domain"]) if r["parent"] is not None else None
        children.setdefault(par, []).append(key)
        parent_n[key] = (r["n"], r["parent_n"])

    def d(key) -> int:
        row = delta.get(key)
        return 0 if row is None else int(row["delta"])

    def total(key) -> int:
        row = delta.get(key)
        return 0 if row is None else int(max(row["total_before"], row["total_after"]))

    def leaves(key, depth: int = 0) -> list[tuple]:
        kids = children.get(key, [])
        own = d(key)
        material = [x for x in kids if abs(d(x)) >= max(floor, 0.1 * abs(own))]
        if not material or depth > 32 or \
                abs(own - sum(d(x) for x in kids)) > EXPLAINED * abs(own):
            return [key]
        if len(material) == 1:
            x = material[0]
            n, pn = parent_n.get(x, (0, None))
            below = leaves(x, depth + 1)
            if below == [x] and pn == n and total(x) >= WRAPPER * total(key):
                return [key]  # the same span ('Data loading' around the loader's range)
            return below
        return [leaf for x in material for leaf in leaves(x, depth + 1)]

    found: list[tuple] = []
    for root in children.get(None, []):
        if abs(d(root)) >= floor:
            found += leaves(root)
    found = sorted(set(found), key=lambda x: (-abs(d(x)), x[0], x[1] or ""))
    out = []
    for name, domain in found[:k]:
        if abs(d((name, domain))) >= floor:
            out.append((f"'{name}'" + (f"@{domain}" if domain else ""), d((name, domain))))
    return out


# ------------------------------------------------------------------------- the step --

def _step(c) -> str:
    it = c.iterations
    v = it.shifts["duration"]
    name = f"'{it.name}'" + (f"@{it.domain}" if it.domain else "")
    if v.p is None:
        return (f"The step, {name} ({v.n_before} / {v.n_after} instances): median "
                f"{_t(v.median_before)} -> {_t(v.median_after)} ({_pct(v.change)}); "
                f"{v.verdict} (too few instances).")
    return (f"The step, {name} ({v.n_before} / {v.n_after} instances): median "
            f"{_t(v.median_before)} -> {_t(v.median_after)} ({_pct(v.change)}): "
            f"{v.reading()}.")


CATEGORY_WORDS = {"compute kernels": "compute kernels", "NCCL kernels": "NCCL kernels",
                  "memcpy": "copies", "memset": "memsets", "GPU idle": "GPU idle"}


def _material(c) -> float:
    """The least change per step worth naming: MATERIAL of the step's median duration (a
    kernel 3 us slower in a 1.8 ms step is not news, even beyond noise)."""
    return MATERIAL * c.iterations.shifts["duration"].median_before


def _moved(c, keys: list[str]) -> list[tuple[str, Shift]]:
    """The step's shifts of `keys` beyond noise and material, the largest change first."""
    sh, floor = c.iterations.shifts, _material(c)
    out = [(k, sh[k]) for k in keys if k in sh and sh[k].changed
           and abs(sh[k].median_after - sh[k].median_before) >= floor]
    return sorted(out, key=lambda kv: -abs(kv[1].median_after - kv[1].median_before))


def _inside_step(c) -> list[str]:
    it = c.iterations
    sh = it.shifts
    parts = []
    cats = _moved(c, list(CATEGORY_WORDS))
    groups = _moved(c, [k for k in sh if k.startswith("idle: ")])
    listed = [f"{CATEGORY_WORDS[k]} {_t(s.median_before)} -> {_t(s.median_after)} "
              f"({_pct(s.change)})" for k, s in cats]
    if not listed and not groups:
        judged = [CATEGORY_WORDS[k] for k in CATEGORY_WORDS if k in sh]
        parts.append("Inside the step nothing moved beyond noise ("
                     + ", ".join(judged) + ", the causes of GPU idle time).")
    else:
        if listed:
            parts.append("Per step, beyond noise: " + "; ".join(listed) + ".")
        if groups:
            more = sum(s.median_after - s.median_before for _, s in groups) > 0
            lead = ("the GPU now waits longer for the host: " if more else
                    "the GPU waits less for the host: ")
            parts.append(lead[0].upper() + lead[1:] + ", ".join(
                f"{k[len('idle: '):]} {_dt(s.median_after - s.median_before)}"
                for k, s in groups) + " per step.")
    moved = _step_kernels_moved(c)
    if moved.height:
        parts.append(_step_kernels(moved))
        named = moved["kernel"].to_list()
        rate = rate_sentence(c, named)
        if rate:
            parts.append(rate)
        launch = launch_sentence(c, named[:STEP_KERNELS])  # those _step_kernels names
        if launch:
            parts.append(launch)
    return parts


STEP_KERNELS = 3  # kernels named per step


def _step_kernels_moved(c) -> pl.DataFrame:
    """The kernels whose time per step moved beyond noise and by MATERIAL of the step,
    largest move first (empty when the step has no kernel table)."""
    t = c.iterations.kernels
    if t is None or t.height == 0:
        return pl.DataFrame({"kernel": []}, schema={"kernel": pl.Utf8})
    return (t.filter(pl.col("verdict").is_in(["faster", "slower"]))
            .with_columns((pl.col("median_after") - pl.col("median_before")).abs()
                          .alias("_m")).filter(pl.col("_m") >= _material(c))
            .sort("_m", "kernel", descending=[True, False]))


def _step_kernels(moved: pl.DataFrame, k: int = STEP_KERNELS) -> str:
    """'Kernels whose time per step moved: ...' of `_step_kernels_moved`'s first `k`."""
    items = []
    for r in moved.head(k).iter_rows(named=True):
        n = ("" if r["n_before"] == r["n_after"] else
             f"; {r['n_before']:g} -> {r['n_after']:g} launches")
        items.append(f"{r['label']} {_t(r['median_before'])} -> {_t(r['median_after'])} "
                     f"({_pct(r['change'])}{n})")
    more = moved.height - len(items)
    return ("Kernels whose time per step moved: " + "; ".join(items)
            + (f"; and {more} more" if more > 0 else "") + ".")


# ------------------------------------------------------------------ the whole run --

def _whole_run(c) -> list[str]:
    """Without a step noise cannot be judged: the run's largest moves, as they are."""
    parts = []
    moves = []
    for row in c.categories.sort(pl.col("delta").abs(), "category", "detail",
                                 descending=[True, False, False]).iter_rows(named=True):
        if row["delta"] == 0:
            continue
        name = row["category"] + (f" {row['detail']}" if row["detail"] else "")
        moves.append(f"{name} {_dt(row['delta'])}")
    if moves:
        parts.append("Time by category: " + ", ".join(moves[:4]) + ".")
    work = c.categories.filter(pl.col("category") == "compute kernels")
    if work.height and abs(c.after.elapsed - c.before.elapsed) < \
            MATERIAL * max(c.before.elapsed, c.after.elapsed):
        w = work.row(0, named=True)
        if abs(w["count_after"] - w["count_before"]) >= 0.05 * max(w["count_before"], 1):
            parts.append("The two runs last as long but hold different work (compute kernel "
                         f"launches {w['count_before']} -> {w['count_after']}): read the "
                         "kernels per launch.")
    k = c.kernels.filter(pl.col("delta") != 0).head(3)
    if k.height:
        ks = []
        for row in k.iter_rows(named=True):
            name = row["label"]
            if row["total_before"] == 0:
                ks.append(f"{name} added ({_t(row['total_after'])})")
            elif row["total_after"] == 0:
                ks.append(f"{name} removed ({_t(row['total_before'])})")
            elif row["count_before"] != row["count_after"]:
                # a different number of launches (a capture of fixed length holds more or
                # less work): the time per launch says whether the kernel itself changed
                ks.append(f"{name} {_dt(row['delta'])} ({row['count_before']} -> "
                          f"{row['count_after']} launches, {_pct(row['mean_ratio'] - 1)} "
                          "per launch)")
            else:
                ks.append(f"{name} {_dt(row['delta'])} ({_pct(row['ratio'] - 1)})")
        parts.append("Kernels that moved most: " + "; ".join(ks) + ".")
        rate = rate_sentence(c, k["kernel"].to_list())
        if rate:
            parts.append(rate)
        launch = launch_sentence(c, k["kernel"].to_list())
        if launch:
            parts.append(launch)
    idle = c.models.filter(pl.col("metric").str.starts_with("idle.")
                           & (pl.col("delta") != 0))
    if idle.height:
        top = idle.sort(pl.col("delta").abs(), "metric", descending=[True, False]).head(3)
        parts.append("GPU idle time by what the host was doing, the causes that moved "
                     "most: " + ", ".join(
                         f"{CAUSE_WORDS.get(r['metric'][5:], r['metric'][5:])} "
                         f"{_dt(r['delta'])}" for r in top.iter_rows(named=True)) + ".")
    return parts


CAUSE_WORDS = {"cuda_launch": "launching", "host_compute": "host compute",
               "cuda_memcpy": "in copy calls", "cuda_sync": "in synchronisation",
               "wait": "waiting on locks or conditions", "io": "in I/O",
               "sleep": "sleeping", "mpi": "in MPI", "nccl": "in NCCL calls",
               "cuda_alloc": "allocating", "cuda_other": "in other CUDA calls",
               "osrt_other": "in other OS calls", "descheduled": "descheduled",
               "no_data": "no record of the host", "unknown_host": "host unknown"}


# ------------------------------------------------------------------ where in the code --

def _code(c, k: int = 2) -> str | None:
    """The functions whose share of the CPU samples moved beyond noise (`diff.sample_table`):
    inside the GPU's idle gaps first (what the launching thread ran or waited in), else in
    the whole run."""
    t = getattr(c, "samples", None)
    if t is None or not t.height:
        return None
    for scope, words in (("gaps", "the launching thread's samples inside the GPU's idle "
                                  "gaps"), ("run", "the run's CPU samples")):
        moved = t.filter((pl.col("scope") == scope) & pl.col("moved"))
        if moved.height:
            items = [f"{r['function']} {_pct_share(r['share_before'])} -> "
                     f"{_pct_share(r['share_after'])}"
                     for r in moved.head(k).iter_rows(named=True)]
            return f"Where in the code, {words}: " + "; ".join(items) + "."
    return None


def _pct_share(x: float) -> str:
    return f"{100 * x:.0f} %"


# ------------------------------------------------------------------- copies, devices --

def _copies(c) -> str | None:
    """Copies by direction and memory kind, where they moved: a kind that went away and
    one that came in one direction ('Host-to-Device pageable 6.400 ms -> pinned 2.400
    ms'), else the rows whose time moved most (beyond noise per step, where there is a
    step)."""
    cp = c.categories.filter(pl.col("category") == "memcpy")
    if cp.height == 0:
        return None
    if c.iterations is not None and not _moved(c, ["memcpy"]):
        return None
    rows = list(cp.iter_rows(named=True))
    items, used = [], set()
    for r in rows:  # a kind that went, one that came, one direction
        if r["total_after"] or not r["total_before"]:
            continue
        direction, _, kind = r["detail"].rpartition(" ")
        for q in rows:
            d2, _, k2 = q["detail"].rpartition(" ")
            if d2 == direction and q["total_before"] == 0 and q["total_after"] and \
                    q["detail"] not in used:
                items.append(f"{direction} {kind} {_t(r['total_before'])} ({r['count_before']}"
                             f" copies) -> {k2} {_t(q['total_after'])} ({q['count_after']} "
                             "copies)")
                used |= {r["detail"], q["detail"]}
                break
    if not items:
        floor = MATERIAL * max(c.before.elapsed, c.after.elapsed)
        for r in sorted(rows, key=lambda r: -abs(r["delta"])):
            if abs(r["delta"]) >= floor and r["detail"] not in used:
                items.append(f"{r['detail']} {_t(r['total_before'])} -> "
                             f"{_t(r['total_after'])} ({_pct(r['ratio'] - 1) if r['ratio'] else 'new'})")
                if len(items) == 2:
                    break
    return ("Copies: " + "; ".join(items) + ".") if items else None


def _device_apart(c) -> str | None:
    """A device whose compute time moved apart from the others' (one rank slowed): its
    change at least APART times the others' median change and 5 % at least."""
    d = c.devices
    col = "compute kernels_ratio"
    if d is None or d.height < 2 or col not in d.columns:
        return None
    r = d.filter(pl.col(col).is_not_null())
    if r.height < 2:
        return None
    moved = (r[col] - 1).abs().to_list()
    # each device against the median change of the others
    others_median = [float(pl.Series(moved[:i] + moved[i + 1:]).median())
                     for i in range(len(moved))] if len(moved) <= 64 else \
        [float(pl.Series(moved).median())] * len(moved)
    keep = [m >= 0.05 and m >= APART * o for m, o in zip(moved, others_median)]
    apart = r.filter(pl.Series(keep))
    if apart.height == 0 or apart.height * 2 > r.height:
        return None
    rest = r.filter(~pl.col("index").is_in(apart["index"].implode()))
    items = [f"{x['device_after']} compute kernels {_t(x['compute kernels_before'])} -> "
             f"{_t(x['compute kernels_after'])} ({_pct(x[col] - 1)})"
             for x in apart.sort("index").iter_rows(named=True)]
    nccl = c.iterations.shifts.get("NCCL kernels") if c.iterations is not None else None
    wait = "; the others wait for it in NCCL" if nccl is not None and nccl.changed and \
        nccl.median_after > nccl.median_before else ""
    if rest.height <= 2:
        others = ", ".join(f"{x['device_after']} {_pct(x[col] - 1)}"
                           for x in rest.sort("index").iter_rows(named=True))
    else:
        others = f"the other {rest.height} devices moved less than a third of that"
    return ("One device moved apart from the others: " + "; ".join(items)
            + f" ({others}){wait}.")


# -------------------------------------------------------------------------- rates --

def rate_sentence(c, kernels: list[str]) -> str | None:
    """The largest GPU metric rate change among `kernels` (the sample-mixing model's rates,
    `kernel_rates`): 'Largest rate change among them: GEMM -25.0 %: Tensor Active 31.0 % ->
    58.0 %'."""
    if c.rates is None or c.rates.height == 0 or not kernels:
        return None
    r = c.rates.filter(pl.col("kernel").is_in(kernels) & pl.col("delta").is_not_null())
    if r.height == 0:
        return None
    top = r.sort(pl.col("delta").abs(), "kernel", descending=[True, False]).row(0, named=True)
    if abs(top["delta"]) < 1.0:
        return "The kernels that moved kept their GPU metric rates (within 1 point)."
    k = c.kernels.filter(pl.col("kernel") == top["kernel"]).row(0, named=True)
    ratio = "" if k["ratio"] is None else f" {_pct(k['ratio'] - 1)}"
    return (f"Largest rate change among them: {k['label']}{ratio}: "
            f"{top['metric']} {top['before']:.1f} % -> {top['after']:.1f} %.")


def launch_sentence(c, kernels: list[str], k: int = 3) -> str | None:
    """Of `kernels` (those the paragraph named as moving), the ones launched differently
    after (`launch.launch_changes`: their main configuration) with what the change allows:
    a kernel that got slower because its registers halved its occupancy reads as such."""
    t = getattr(c, "launches", None)
    if t is None or t.height == 0 or not kernels:
        return None
    t = t.filter(pl.col("kernel").is_in(kernels))
    if t.height == 0:
        return None
    order = {name: i for i, name in enumerate(kernels)}
    label = dict(zip(c.kernels["kernel"].to_list(), c.kernels["label"].to_list()))
    rows = sorted(t.iter_rows(named=True), key=lambda r: order[r["kernel"]])
    items = [f"{label.get(r['kernel'], r['kernel'])} {r['before']} -> {r['after']} "
             f"({r['change']})" for r in rows[:k]]
    return ("Launched differently after: " + "; ".join(items)
            + (f"; and {len(rows) - k} more" if len(rows) > k else "") + ".")


# ------------------------------------------------------------------ layers on the GPU --

def _layers(c, k: int = 3) -> str | None:
    """The NVTX ranges whose GPU time (their projection onto the GPU) moved: per step beyond
    noise and material where there is a step (`Iterations.layers`), else the run's largest
    moves by MATERIAL of its GPU time; leaves before the containers that only add them up
    (a range is not named when a range inside it moved by EXPLAINED of its change), of
    ranges that nest with the same numbers (an operator and its autograd wrapper) the first
    one only, never the step itself."""
    from .layers import layer_label

    it = c.iterations
    t = c.layers
    parent = {} if t is None else dict(zip(t["range"].to_list(), t["parent"].to_list()))

    def inside(x: str, y: str) -> bool:  # x lies (at any depth) inside y
        seen = 0
        p = parent.get(x)
        while p is not None and seen < 64:
            if p == y:
                return True
            p, seen = parent.get(p), seen + 1
        return False

    def pick(moves: list[tuple[str, float, float, float]]) -> list[tuple]:
        """Of (range, before, after, change) sorted by the size of the move: the leaves."""
        kept, seen = [], set()
        for name, b, a, ch in moves:
            if it is not None and name == it.name:
                continue
            if any(inside(o, name) and abs(oa - ob) >= EXPLAINED * abs(a - b)
                   for o, ob, oa, _ in moves if o != name):
                continue
            same = (round(b), round(a))
            if same in seen:
                continue
            seen.add(same)
            kept.append((name, b, a, ch))
        return kept[:k]

    if it is not None and it.layers is not None and it.layers.height:
        moved = (it.layers.filter(pl.col("verdict").is_in(["faster", "slower"]))
                 .with_columns((pl.col("median_after") - pl.col("median_before")).abs()
                               .alias("_m")).filter(pl.col("_m") >= _material(c))
                 .sort("_m", "range", descending=[True, False]))
        items = pick([(r["range"], r["median_before"], r["median_after"], r["change"])
                      for r in moved.iter_rows(named=True)])
        if not items:
            return None
        return "On the GPU, per step (NVTX ranges projected): " + "; ".join(
            f"{layer_label(n)} {_t(b)} -> {_t(a)} ({_pct(ch)})" for n, b, a, ch in items) + "."
    if t is None or t.height == 0:
        return None
    total = max(int(t["gpu_before"].max() or 0), int(t["gpu_after"].max() or 0))
    floor = MATERIAL * total
    moves = [(r["range"], r["gpu_before"], r["gpu_after"],
              None if not r["gpu_before"] else r["gpu_after"] / r["gpu_before"] - 1)
             for r in t.filter(pl.col("delta").abs() >= max(floor, 1)).iter_rows(named=True)]
    items = pick(moves)
    if not items:
        return None
    return "GPU time of the NVTX ranges (projected onto the GPU) that moved most: " + "; ".join(
        f"{layer_label(n)} {_t(b)} -> {_t(a)}" + ("" if ch is None else f" ({_pct(ch)})")
        for n, b, a, ch in items) + "."
