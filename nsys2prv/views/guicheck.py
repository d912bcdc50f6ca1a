"""What wxparaver asks when a cfg is loaded on a trace, decided without the GUI.

paramedir (used by the tests) answers the GUI's load questions itself, so a cfg that works in
paramedir can still stop a GUI user on a dialog. This module applies the GUI's rule
(paraver-kernel 4.11 `api/cfg.cpp`, `CFGLoader::loadCFG` / `pickSymbols`) to a parsed cfg and
the set of event types of a trace body:

* a window whose event-type function is `All` or `None` marks the cfg as having data;
* every type listed in a window's filter marks "some exist" when the trace has it, else "some
  do not exist";
* a `[x,y]` window whose range holds any loaded type marks "exist" and clears "do not exist"
  for everything picked so far (the flags are global to the file, windows are picked in file
  order, derived windows are not picked);
* at the end: nothing exists -> "None of the events specified in the filter appear in the
  trace"; else something missing -> "Some of the events specified in the filter doesn't appear
  in the trace. Continue loading CFG file?".

It also tells whether the Hints menu enables a cfg (`CFGLoader::detectAnyEventTypeInCFG`: any
window's filter matches a loaded type, or the file filters no type at all).

    python -m nsys2prv.views.guicheck TRACE.prv [...] [--cfgs DIR]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .cfg import ParsedCfg, parse_cfg

NONE = "none"  # "None of the events specified in the filter appear in the trace."
SOME = "some"  # "Some of the events specified in the filter doesn't appear in the trace."

MESSAGES = {
    NONE: "None of the events specified in the filter appear in the trace.",
    SOME: "Some of the events specified in the filter doesn't appear in the trace. "
          "Continue loading CFG file?",
}


def _any_in(loaded: set[int], lo: int, hi: int) -> bool:
    return any(lo <= t <= hi for t in loaded)


def question(cfg: ParsedCfg, loaded: set[int]) -> str | None:
    """The question wxparaver asks when `cfg` is loaded on a trace whose body holds the event
    types `loaded`: NONE, SOME, or None when it opens without asking."""
    some_exist = False
    some_missing = False
    for w in cfg.windows:
        if w.composed:
            continue
        if w.type_function in ("All", "None"):
            some_exist = True
        for t in w.types:
            if t in loaded:
                some_exist = True
            else:
                some_missing = True
        if (w.type_function == "[x,y]" and len(w.types) >= 2
                and _any_in(loaded, w.types[0], w.types[1])):
            some_missing = False
            some_exist = True
    if not some_exist:
        return NONE
    if some_missing:
        return SOME
    return None


def hint_enabled(cfg: ParsedCfg, loaded: set[int]) -> bool:
    """Whether the Hints menu offers `cfg` for the trace (else it is greyed out): some window's
    filter matches a loaded type, or no window filters types at all."""
    filtered = False
    for w in cfg.windows:
        if w.composed or not w.types:
            continue
        filtered = True
        if w.type_function == "[x,y]":
            if _any_in(loaded, min(w.types), max(w.types)):
                return True
        elif any(t in loaded for t in w.types):
            return True
    return not filtered


@dataclass(frozen=True)
class Finding:
    trace: str
    cfg: str
    question: str


def check(traces: Iterable[tuple[str, set[int]]], cfg_dir: str | Path,
          asks: Sequence[str] = (SOME,)) -> list[Finding]:
    """Every (trace, cfg) pair whose load asks one of `asks`; traces are (name, event types)."""
    root = Path(cfg_dir)
    cfgs = [(p.relative_to(root).as_posix(), parse_cfg(p)) for p in sorted(root.rglob("*.cfg"))]
    out = []
    for name, loaded in traces:
        for rel, cfg in cfgs:
            q = question(cfg, loaded)
            if q in asks:
                out.append(Finding(name, rel, q))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print the (trace, cfg) pairs on which wxparaver would ask a question."""
    from ..paraver.read import event_types

    ap = argparse.ArgumentParser(prog="python -m nsys2prv.views.guicheck",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help=".prv files")
    ap.add_argument("--cfgs", default=str(Path(__file__).resolve().parents[2] / "cfgs"),
                    help="cfg folder (default: the project's cfgs/)")
    ap.add_argument("--none", action="store_true", help="also list 'None of the events' loads")
    args = ap.parse_args(argv)
    asks = (SOME, NONE) if args.none else (SOME,)
    found = check(((t, event_types(t)) for t in args.traces), args.cfgs, asks)
    for f in found:
        print(f"{f.trace}\t{f.cfg}\t{f.question}")
    asking = {(f.trace, f.cfg) for f in found if f.question == SOME}
    print(f"{len(asking)} (trace, cfg) pairs ask 'Some of the events...' on "
          f"{len(args.traces)} traces", file=sys.stderr)
    return 1 if asking else 0


if __name__ == "__main__":
    sys.exit(main())
