"""`nsys2prv diff BEFORE AFTER`: what changed between two runs, and whether beyond noise.

Prints the verdict and a paragraph, then the tables of `analysis.diff` (categories, kernels,
NVTX ranges, devices, models, rules); `--json` and `--csv` carry every number;
`--fail-if-slower PCT` is a CI gate (exit 1). The numbers come from `analysis/diff.py`; this
module only prints.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys

import polars as pl

from ..analysis.labels import fit_labels
from ..errors import UsageError
from .common import Parser, add_window_arguments, window_of


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsys2prv diff",
               description="Compare two runs: per kernel, NVTX range, category and device, "
                           "the efficiency models and the causes of GPU idle time side by "
                           "side, and a noise-aware verdict on a repeated NVTX range.")
    p.add_argument("before", metavar="BEFORE",
                   help="one export or report, several rank exports (a directory, a quoted "
                        "glob or @LIST), or a trace (.prv) written by nsys2prv")
    p.add_argument("after", metavar="AFTER", help="the same for the other run")
    p.add_argument("--iterations", metavar="RANGE[@DOMAIN]",
                   help="the repeated NVTX range (a training step) whose instances the "
                        "verdict compares (default: the step is found, at any depth: a range "
                        "repeated one after the other on one thread that launches most of "
                        "the GPU work, in both runs; docs/diff.md)")
    p.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit 1 when the iteration median (else the elapsed time) got slower "
                        "by more than PCT %% and, where noise can be judged, beyond noise")
    p.add_argument("--json", action="store_true", help="print every number as JSON")
    p.add_argument("--csv", action="store_true",
                   help="print every number as CSV (table, key, metric, before, after)")
    p.add_argument("--top", type=int, default=15, metavar="N",
                   help="kernels and NVTX ranges listed, largest change first (default 15)")
    p.add_argument("--html", metavar="PAGE.html",
                   help="also write the comparison on one self-contained page (docs/html.md): "
                        "the paragraph and the verdict, then before/after charts per changed "
                        "item (kernels, layers, steps, memory kinds) and every table")
    p.add_argument("--trace", metavar="BOTH.prv",
                   help="also write one trace holding both runs as two Paraver applications "
                        "(1 = before, 2 = after) with one value numbering (needs reports)")
    p.add_argument("--no-rules", action="store_true", help="skip nsys' rules on the exports")
    p.add_argument("--no-models", action="store_true",
                   help="skip the efficiency model and the causes of GPU idle time")
    p.add_argument("--no-idle", action="store_true",
                   help="skip the causes of GPU idle time (a second pass over each side)")
    add_window_arguments(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _ratio(r) -> str:
    """A ratio in at most 7 characters (a kernel 480 times longer is '480.4', not a number
    that runs into the delta before it)."""
    if r is None:
        return "-"
    return f"{r:.3f}" if abs(r) < 100 else f"{r:.1f}" if abs(r) < 10_000 else f"{r:.3g}"


def _p3(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _count_delta(r: dict) -> str:
    """The change in launches (instances) of a row: '+12', '0'."""
    d = r["count_after"] - r["count_before"]
    return f"{d:+d}" if d else "0"


def _rate(v) -> str:
    return "-" if v is None or v != v else f"{v:.1f}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def format_text(c, top: int = 15) -> str:
    """The comparison as text: verdict, paragraph, then one block per table."""
    out = io.StringIO()
    w = out.write
    w(f"before: {c.before.source}  ({c.before.elapsed / 1e6:.3f} ms of trace)\n")
    w(f"after:  {c.after.source}  ({c.after.elapsed / 1e6:.3f} ms of trace)\n")
    for note in c.warnings:
        w(f"warning: {note}\n")
    it = c.iterations
    if it is None and c.step_search is not None:
        w(f"\nno step: {c.step_search.why}; the verdict compares the elapsed times\n")
        w(format_runners_up(c.step_search, 3, "  "))
    if it is not None:
        how = "--iterations" if not it.picked or it.pick is None else f"picked: {it.pick.why}"
        w(f"\niterations: '{it.name}'" + (f"@{it.domain}" if it.domain else "")
          + f" ({how}), {it.before.height} / {it.after.height} instances\n")
        if it.picked and it.pick is not None:
            w(format_runners_up(it.pick, 3, "  "))
        w(f"  {'':<18}{'median before':>15}{'median after':>15}{'change':>10}  verdict\n")
        for key, s in it.shifts.items():
            ch = "-" if s.change is None else f"{100 * s.change:+.1f}%"
            w(f"  {key:<18}{s.median_before / 1e6:>12.3f} ms{s.median_after / 1e6:>12.3f} ms"
              f"{ch:>10}  {s.reading()}\n")
        sk = it.kernels
        if sk is not None and sk.height:
            w(f"\n  kernels per step (the {sk.height} whose median time per step moved most; "
              "launches and ms per step, medians; verdicts Holm-corrected)\n")
            fit = fit_labels(c.kernels["label"].to_list(), 43)
            for r in sk.iter_rows(named=True):
                ch = "-" if r["change"] is None else f"{100 * r['change']:+.1f}%"
                verdict = r["verdict"] if r["p"] is None else f"{r['verdict']} ({_p3(r['p'])})"
                w(f"  {fit.get(r['label'], r['label']):<44}{r['n_before']:>6g}{r['n_after']:>6g}"
                  f"{r['median_before'] / 1e6:>11.3f}{r['median_after'] / 1e6:>11.3f}"
                  f"{ch:>9}  {verdict}\n")
    w(f"\n{c.paragraph}\n")
    w(f"\n{'category':<36}{'n before':>9}{'n after':>9}{'before ms':>14}{'after ms':>14}"
      f"{'delta ms':>14}{'ratio':>8}\n")
    for r in c.categories.iter_rows(named=True):
        name = r["category"] + (f" {r['detail']}" if r["detail"] else "")
        counted = r["category"] not in ("GPU idle", "CUDA synchronisation")  # time only
        nb, na = (r["count_before"], r["count_after"]) if counted else ("", "")
        w(f"{_short(name, 35):<36}{nb:>9}{na:>9}{_ms(r['total_before']):>14}"
          f"{_ms(r['total_after']):>14}{_ms(r['delta']):>14} {_ratio(r['ratio']):>7}\n")
    k = c.kernels
    w(f"\nkernels ({k.height}; {top} largest changes; totals in ms)\n")
    w(f"{'kernel':<44}{'n before':>9}{'n after':>9}{'n delta':>8}{'before':>13}{'after':>13}"
      f"{'delta':>13}{'ratio':>8}  match\n")
    fit = fit_labels(k["label"].to_list(), 43)  # cut, but still told apart
    for r in k.head(top).iter_rows(named=True):
        w(f"{fit[r['label']]:<44}{r['count_before']:>9}{r['count_after']:>9}"
          f"{_count_delta(r):>8}{_ms(r['total_before']):>13}{_ms(r['total_after']):>13}"
          f"{_ms(r['delta']):>13} {_ratio(r['ratio']):>7}  {r['matched_by']}\n")
    tb, ta = int(k["total_before"].sum()), int(k["total_after"].sum())
    cb, ca = int(k["count_before"].sum()), int(k["count_after"].sum())
    w(f"{'all kernels':<44}{cb:>9}{ca:>9}{ca - cb:>+8}{_ms(tb):>13}{_ms(ta):>13}"
      f"{_ms(ta - tb):>13}\n")
    norm = k.filter(pl.col("matched_by") == "normalised")
    for r in norm.iter_rows(named=True):
        w(f"  matched by normalised name: {_short(r['kernel'], 60)} <- "
          f"{len(r['names'])} names\n")
    rates = c.rates
    if rates is not None and rates.height:
        shown = k.head(top)["kernel"].to_list()
        r = rates.filter(pl.col("kernel").is_in(shown))
        if r.height:
            w(f"\nkernel GPU metric rates (%, before -> after; sample-mixing model, "
              f"docs/kernel_metrics.md)\n")
            for (kern,), part in r.group_by("kernel", maintain_order=True):
                name = k.filter(pl.col("kernel") == kern)["label"][0]
                cells = ", ".join(f"{m['metric']} {_rate(m['before'])} -> {_rate(m['after'])}"
                                  for m in part.iter_rows(named=True))
                w(f"  {fit[name]:<44}{cells}\n")
    launches = c.launches
    if launches is not None and launches.height:
        w(f"\nkernels whose launch changed ({launches.height}; the launch with most time; "
          "docs/kernel_metrics.md)\n")
        labels = dict(zip(k["kernel"].to_list(), k["label"].to_list()))
        for r in launches.head(top).iter_rows(named=True):
            w(f"  {_short(labels.get(r['kernel'], r['kernel']), 43):<44}{r['before']} -> "
              f"{r['after']}: {r['change']}\n")
    n = c.nvtx
    if n.height:
        w(f"\nNVTX ranges ({n.height}; digits folded to #; {top} largest changes; ms)\n")
        for r in n.head(top).iter_rows(named=True):
            name = r["range"] + (f" @{r['domain']}" if r["domain"] else "")
            w(f"{_short(name, 43):<44}{r['count_before']:>9}{r['count_after']:>9}"
              f"{_count_delta(r):>8}{_ms(r['total_before']):>13}{_ms(r['total_after']):>13}"
              f"{_ms(r['delta']):>13} {_ratio(r['ratio']):>7}\n")
    lay = c.layers
    if lay is not None and lay.height:
        w(f"\nNVTX ranges on the GPU ({lay.height}; each range's projection: the GPU time of "
          f"the work its calls launched; digits folded to #; {top} largest changes; ms)\n")
        for r in lay.head(top).iter_rows(named=True):
            name = r["range"] + (f" @{r['domain']}" if r["domain"] else "")
            w(f"{_short(name, 43):<44}{r['count_before']:>9}{r['count_after']:>9}"
              f"{_count_delta(r):>8}{_ms(r['gpu_before']):>13}{_ms(r['gpu_after']):>13}"
              f"{_ms(r['delta']):>13} {_ratio(r['ratio']):>7}\n")
    st = c.iterations.layers if c.iterations is not None else None
    if st is not None and st.height:
        w("\nNVTX ranges on the GPU per step (medians over the steps; ms; verdicts "
          "Holm-corrected)\n")
        for r in st.iter_rows(named=True):
            w(f"{_short(r['range'], 43):<44}{_ms(r['median_before']):>13}"
              f"{_ms(r['median_after']):>13}  {r['verdict']}\n")
    smp = c.samples
    if smp is not None and smp.height:
        for scope, title in (("run", "CPU samples by function (share of the run's samples)"),
                             ("gaps", "the launching threads' samples inside the GPU's idle "
                                      "gaps, by function")):
            part = smp.filter(pl.col("scope") == scope)
            if not part.height:
                continue
            total_b, total_a = part["total_before"][0], part["total_after"][0]
            w(f"\n{title} ({total_b} -> {total_a} samples; {top} largest changes; "
              "p Holm-adjusted; * moved beyond noise; docs/samples.md)\n")
            for r in part.head(top).iter_rows(named=True):
                name = r["function"] + (f" ({r['module']})" if r["module"] else "")
                w(f"{_short(name, 55):<56}{100 * r['share_before']:>8.1f} %"
                  f"{100 * r['share_after']:>8.1f} %{100 * r['delta']:>+9.1f} pt  "
                  f"{_p3(r['p'])}{' *' if r['moved'] else ''}\n")
    if c.devices is not None:
        _devices(w, c.devices, top)
    if c.models.height and c.before.analysis is not None:
        w(f"\n{'models':<30}{'before':>16}{'after':>16}{'delta':>16}\n")
        for r in c.models.iter_rows(named=True):
            idle = r["metric"].startswith("idle.")
            fmt = (lambda v: "-" if v is None else f"{v / 1e6:.3f} ms") if idle else \
                (lambda v: "-" if v is None else f"{v:.3f}")
            w(f"  {r['metric']:<28}{fmt(r['before']):>16}{fmt(r['after']):>16}"
              f"{fmt(r['delta']):>16}\n")
    if c.rules is not None:
        w(f"\n{'nsys rules (rows found)':<30}{'before':>16}{'after':>16}\n")
        for r in c.rules.iter_rows(named=True):
            w(f"  {r['rule']:<28}{'-' if r['before'] is None else r['before']:>16}"
              f"{'-' if r['after'] is None else r['after']:>16}\n")
    return out.getvalue()


def format_runners_up(found, k: int, indent: str) -> str:
    """The `k` best candidates that are not the step (`steps.StepPick`), one line each
    with why: what an analyst checks before trusting a picked range."""
    rows = found.runners_up(k)
    if rows.height == 0:
        return ""
    lines = [f"{indent}{'runners-up' if found.name else 'closest candidates'}:"]
    for r in rows.iter_rows(named=True):
        name = r["family"] + (f"@{r['domain']}" if r["domain"] else "")
        lines.append(f"{indent}  '{_short(name, 50)}' ({r['n']} instance"
                     f"{'' if r['n'] == 1 else 's'}, "
                     f"{100 * r['gpu_share']:.0f} % of the GPU time): {r['note']}")
    return "\n".join(lines) + "\n"


def _devices(w, devices: pl.DataFrame, top: int) -> None:
    """The devices side by side: all of them in order when they are few; else the `top` whose
    times moved most (summed over the categories), and how many more there are - a job of a
    thousand GPUs is not a thousand blocks of text (--json and --csv carry every device)."""
    cats = [col[: -len("_before")] for col in devices.columns
            if col.endswith("_before") and col != "device_before"]
    moved = pl.sum_horizontal([pl.col(f"{c}_delta").abs() for c in cats]) if cats \
        else pl.lit(0)
    devices = devices.with_columns(moved.alias("_moved"))
    n = devices.height
    shown = devices if n <= top else devices.sort("_moved", "index",
                                                  descending=[True, False]).head(top)
    w(f"\ndevices ({n}" + ("" if n <= top else f"; the {top} whose times moved most")
      + "; ms, before -> after)\n")
    for r in shown.iter_rows(named=True):
        w(f"  {r['device_before']}  |  {r['device_after']}\n")
        w("    " + ", ".join(f"{cat} {_ms(r[cat + '_before'])} -> {_ms(r[cat + '_after'])}"
                             for cat in cats if r[cat + "_before"] or r[cat + "_after"])
          + "\n")
    if n > top:
        still = devices.filter(pl.col("_moved") == 0).height
        w(f"  ... {n - top} more devices ({still} of all {n} unchanged); every device is in "
          f"--json and --csv\n")


def format_csv(c) -> str:
    """Every number of the comparison, one line each: table, key, metric, before, after
    (tables with one column per side), or table, key, metric, value."""
    out = io.StringIO()
    wr = csv.writer(out, lineterminator="\n")
    wr.writerow(["table", "key", "metric", "before", "after"])
    for name, df in c.tables().items():
        keys = [k for k in ("kernel", "range", "domain", "category", "detail", "index",
                            "metric", "rule", "instance") if k in df.columns]
        for row in df.iter_rows(named=True):
            key = " | ".join(str(row[k]) for k in keys)
            pairs: dict[str, list] = {}
            for col, v in row.items():
                if col in keys or isinstance(v, list):
                    continue
                for side in ("before", "after"):
                    if col == side or col.endswith("_" + side):
                        metric = col[: -len(side) - 1] if col != side else "value"
                        pairs.setdefault(metric, [None, None])[side == "after"] = v
                        break
                else:
                    pairs.setdefault(col, [v, None])
            for metric, (b, a) in pairs.items():
                wr.writerow([name, key, metric, "" if b is None else b,
                             "" if a is None else a])
    v = c.verdict
    wr.writerow(["verdict", "", "verdict", v.verdict, ""])
    wr.writerow(["verdict", "", "change", "" if v.change is None else v.change, ""])
    wr.writerow(["verdict", "", "p", "" if v.p is None else v.p, ""])
    return out.getvalue()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.json and args.csv:
        raise UsageError("give --json or --csv, not both")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    window = window_of(args)
    from ..analysis.diff import gate
    from ..run import compare

    if args.html:
        from ..page.document import check_writable

        check_writable(args.html)
    compared = compare(args.before, args.after, window=window, iterations=args.iterations,
                       models=not args.no_models, rules=not args.no_rules,
                       idle=not args.no_idle, trace=args.trace)
    c = compared.source
    if args.html:
        compared.to_html(args.html)
    if args.json:
        json.dump(c.to_dict(), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    elif args.csv:
        sys.stdout.write(format_csv(c))
    else:
        sys.stdout.write(format_text(c, args.top))
        if args.trace:
            sys.stdout.write(f"\nwrote {args.trace}: application 1 = before, 2 = after\n")
    if args.fail_if_slower is not None:
        fails, why = gate(c, args.fail_if_slower)
        print(f"nsys2prv diff: {'FAIL' if fails else 'pass'}: {why}", file=sys.stderr)
        return 1 if fails else 0
    return 0
