"""The findings that matter most in one run, each a sentence with its number: what the first
screen of the page (`nsys2prv analyze --html`) and `analyze --json`'s "findings" say.

Every finding is read from what the other analyses computed (the efficiency model, why the
GPUs wait, the step, the layers, the kernels and their launches), never measured again
here, and only where their tables support it: no idle finding without GPU work, no layer
finding without a layer level of two layers or more, no step finding without a step. Each
has a score, the share of the run's GPU time it concerns (an idle GPU weighs its idle
share; a layer or a kernel its share of the GPU's work times the share of time the GPUs
work), and the `TOP` with the largest scores are kept, best first. The number is rounded
as the sentence prints it, so that the page and --json show the same number.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .idle import CAUSE_LABELS

TOP = 5
SCHEMA = {"rank": pl.Int64, "section": pl.Utf8, "sentence": pl.Utf8, "number": pl.Float64,
          "unit": pl.Utf8}
NOTABLE_IMBALANCE = 0.9  # a load balance below this is a finding (several devices)
NOTABLE_SHARE = 0.1  # copies, NCCL or short kernels with this share of the work at least


@dataclass
class _Finding:
    section: str  # the page's section (its anchor)
    sentence: str
    number: float
    unit: str
    score: float


def _pct(x: float) -> float:
    """A fraction as the percentage a sentence prints (one decimal)."""
    return round(100 * x, 1)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _name(text: str, n: int = 70) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def findings(analysis, extras=None, top: int = TOP) -> pl.DataFrame:
    """rank, section, sentence, number, unit: the `top` findings of a run
    (`model.Analysis` and what `passes.Extras` adds), best first (see the module's
    docstring)."""
    found: list[_Finding] = []
    a = analysis
    devices = a.devices
    idle_share = 0.0
    if devices and a.end > 0:
        found += _efficiency(a)
        busy = sum(g.active for g in devices) / (len(devices) * a.end)
        idle_share = 1 - busy
        found += _idle(a, getattr(extras, "samples", None))
        found += _copies_and_nccl(a, busy)
    work = 1 - idle_share  # how much the GPUs' work weighs
    if extras is not None:
        found += _step(extras, work)
        found += _layers(extras, work)
        found += _kernels(a, extras, work)
    found.sort(key=lambda f: (-f.score, f.section, f.sentence))
    rows = [{"rank": i + 1, "section": f.section, "sentence": f.sentence,
             "number": f.number, "unit": f.unit} for i, f in enumerate(found[:top])]
    return pl.DataFrame(rows, schema=SCHEMA)


def _efficiency(a) -> list[_Finding]:
    e = a.talp
    if e.parallel is None:
        return []
    factors = {"orchestration efficiency": (e.orchestration, "the GPUs run something only "
                                            "part of the run"),
               "load balance": (e.load_balance, "the devices' useful work is unequal"),
               "communication efficiency": (e.communication, "copies and sets are not "
                                            "hidden behind kernels")}
    known = {k: v for k, v in factors.items() if v[0] is not None}
    out = []
    pe = _pct(e.parallel)
    if known:
        low, (value, why) = min(known.items(), key=lambda kv: (kv[1][0], kv[0]))
        sentence = (f"Device parallel efficiency {pe:.1f} % over {e.n} "
                    f"device{'s' if e.n > 1 else ''}: the lowest factor is the {low}, "
                    f"{_pct(value):.1f} % ({why}).")
    else:
        sentence = f"Device parallel efficiency {pe:.1f} % over {e.n} devices."
    out.append(_Finding("efficiency", sentence, pe, "%", 0.5 * (1 - e.parallel)))
    if e.n > 1 and e.load_balance is not None and e.load_balance < NOTABLE_IMBALANCE:
        lb = _pct(e.load_balance)
        out.append(_Finding(
            "efficiency", f"Load balance {lb:.1f} % across {e.n} devices: "
            f"{_name(e.max_useful_device or '?')} does the most useful work.", lb, "%",
            1 - e.load_balance))
    return out


def _idle(a, samples=None) -> list[_Finding]:
    r = a.idle
    if r is None or not r.job.span:
        return []
    j = r.job
    share = j.idle / j.span
    x = _pct(share)
    n = len(a.devices)
    over = f", summed over {n} GPUs" if n > 1 else ""
    sentence = (f"GPU idle {x:.1f} % of the time between the GPUs' first and last activity "
                f"({_ms(j.idle)} of {_ms(j.span)}{over})")
    if j.idle and j.causes:
        cause, t = max(j.causes.items(), key=lambda kv: (kv[1], kv[0]))
        label = CAUSE_LABELS.get(cause, "with no launch record (host unknown)")
        sentence += (f": {_pct(t / j.idle):.1f} % of it the thread that launched the next "
                     f"work was {label}")
        if j.nvtx:  # the range open on that thread for most of the idle time
            rng, rt = max(j.nvtx.items(), key=lambda kv: (kv[1], kv[0]))
            if rt >= 0.25 * j.idle:
                sentence += (f"; the NVTX range '{_name(rng, 50)}' was open on it "
                             f"{_pct(rt / j.idle):.1f} % of the idle time")
        sentence += _in_the_code(samples)
    return [_Finding("idle", sentence + ".", x, "%", share)]


def _in_the_code(samples) -> str:
    """The code behind the job's idle time (`samples.gap_summary`: the job's row, or the
    only device's), where the CPU samples and call stacks name it: '; in the code, it
    blocked in sem_timedwait from ... (96.6 % of the idle time), while 2 other processes
    ran 87.0 % of the samples taken meanwhile'."""
    code = getattr(samples, "gap_code", None)
    if code is None or code.height == 0:
        return ""
    job = code.filter(pl.col("device") == "job")
    r = (job if job.height else code).row(0, named=True)
    out = ""
    if r["verb"] in ("blocked in", "was in") and r["code_share"] is not None:
        out = (f"; in the code, it {r['verb']} {_name(r['code'], 110)} "
               f"({_pct(r['code_share']):.1f} % of the idle time)")
    elif r["verb"] == "computed:":
        out = f"; in the code, it computed: {_name(r['code'], 110)} of its samples"
    if r["others_n"] and r["others_share"] is not None and r["others_share"] >= 0.25:
        n = r["others_n"]
        out += (f"{';' if not out else ','} while {n} other process{'es' if n != 1 else ''} "
                f"ran {_pct(r['others_share']):.1f} % of the samples taken meanwhile")
    return out


def _copies_and_nccl(a, busy: float) -> list[_Finding]:
    out = []
    active = sum(g.active for g in a.devices)
    if not active:
        return out
    comm = sum(g.comm_talp for g in a.devices) / active
    if comm >= NOTABLE_SHARE:
        x = _pct(comm)
        out.append(_Finding("efficiency", f"Copies and sets outside kernels take {x:.1f} % "
                            "of the GPUs' active time.", x, "%", comm * busy))
    nccl = sum(g.nccl_time for g in a.devices)
    if nccl and nccl / active >= NOTABLE_SHARE:
        x = _pct(nccl / active)
        hidden = sum(g.hidden_comm for g in a.devices) / nccl
        out.append(_Finding("efficiency", f"NCCL kernels run {x:.1f} % of the GPUs' active "
                            f"time, {_pct(hidden):.1f} % of it beside compute kernels.", x,
                            "%", nccl / active * busy * (1 - hidden)))
    return out


def _step(extras, work: float) -> list[_Finding]:
    it = extras.iterations
    if it is None or isinstance(it, str) or it.steps.height == 0:
        return []
    d = it.steps["duration"]
    median = float(d.median())
    med = round(median / 1e6, 3)
    name = it.name + (f"@{it.domain}" if it.domain else "")
    sentence = f"{it.steps.height} steps of '{_name(name, 50)}': median {med:.3f} ms"
    score = 0.2 * work
    slow = int(d.arg_max())
    longest = float(d[slow])
    if it.steps.height > 1 and median > 0:
        sentence += (f", the slowest (step {int(it.steps['instance'][slow])}) "
                     f"{longest / 1e6:.3f} ms, {100 * (longest / median - 1):+.1f} % against "
                     "the median")
        if "outlier" in it.steps.columns and it.steps["outlier"].any():
            k = int(it.steps["outlier"].sum())
            sentence += f"; {k} outlier step{'s' if k > 1 else ''}"
            score += 0.2 * work * min(1.0, longest / median - 1)
    return [_Finding("steps", sentence + ".", med, "ms", score)]


def _layers(extras, work: float) -> list[_Finding]:
    lay = extras.layers
    if lay is None or lay.pick.kind is None or lay.layers.height < 2:
        return []
    from .layers import layer_label

    top = lay.layers.row(0, named=True)
    x = _pct(top["share"])
    scope = "the step's" if lay.step else "the run's"
    return [_Finding("layers", f"Layer '{_name(layer_label(top['layer']), 60)}' holds "
                     f"{x:.1f} % of {scope} GPU time ({_ms(top['gpu'])} in "
                     f"{top['instances']} instances).", x, "%", top["share"] * work)]


def _kernels(a, extras, work: float) -> list[_Finding]:
    out = []
    r = a.idle
    if r is not None and r.launches:
        total = sum(k.kernel_time for k in r.launches)
        k = max(r.launches, key=lambda k: (k.kernel_time, k.name))
        if total and len(r.launches) > 1:
            share = k.kernel_time / total
            x = _pct(share)
            out.append(_Finding("kernels", f"Kernel '{_name(k.label or k.name, 60)}' takes "
                                f"{x:.1f} % of the launched kernels' time ({k.count} "
                                "launches, mean "
                                f"{k.kernel_time / k.count / 1e3:.1f} us).", x, "%",
                                share * work * 0.9))
        if r.short_kernel_share is not None and r.short_kernel_share >= NOTABLE_SHARE:
            x = _pct(r.short_kernel_share)
            out.append(_Finding("kernels", f"Kernels shorter than their launch call hold "
                                f"{x:.1f} % of the kernel time: launching them costs more "
                                "than running them.",
                                x, "%", r.short_kernel_share * work))
    km = extras.kernel_metrics
    launch = getattr(km, "launch", None)
    if launch is not None and not launch.empty and launch.findings.height:
        f = launch.findings.row(0, named=True)
        x = _pct(f["share"])
        out.append(_Finding("kernels", f"'{_name(f['label'] or f['kernel'], 60)}' "
                            f"({x:.1f} % of its GPU's kernel time): {f['text']}.", x, "%",
                            f["share"] * work * 0.8))
    return out
