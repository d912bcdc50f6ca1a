"""`analyze --rule SPEC ... EXPORT...`: nsys' expert-system rules on exports, without nsys.

Prints each rule's result for each export as `nsys analyze` does (text, or CSV with
`--format csv`); an export that lacks a rule's data gets a one-line note on stderr instead.
Exit status: 0, 1 when an input could not be read, 2 for a bad command line or rule spec.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import Nsys2PrvError, UsageError
from ..report.inputs import expand_inputs
from ..rules import DEFAULT_RULES, RULES, evaluate, open_export, resolve
from ..rules.format import format_csv, format_text
from .common import Parser

PROG = "nsys2prv analyze"


def _rule_list() -> str:
    """Each rule, its 2022.4 name, what it finds and its own options."""
    lines = []
    for r in RULES.values():
        own = "".join(f"; {o.name}=N: {o.help}" for o in r.options)
        lines.append(f"{r.name} ({r.old_name}): {r.summary}{own}")
    return ". ".join(lines)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Run Nsight Systems' expert-system rules (as `nsys "
                "analyze` 2023.4 does) on SQLite exports or reports, without nsys.",
                epilog="Rules: " + _rule_list() + ". Options of every rule: rows=N (default "
                "50, -1: all), start=NS, end=NS, nvtx=RANGE[@DOMAIN][/N]. See docs/rules.md.")
    p.add_argument("inputs", nargs="+", metavar="EXPORT",
                   help="an export (.sqlite) or a report (.nsys-rep, exported with nsys); a "
                        "directory, a quoted glob or @LIST (one path a line) names many")
    p.add_argument("-r", "--rule", action="append", metavar="SPEC",
                   help="NAME[:option=value...]; repeatable, or several separated by commas; "
                        "`all`: the six rules in nsys' order")
    p.add_argument("-f", "--format", choices=("text", "csv"), default="text",
                   help="text tables (default) or CSV")
    p.add_argument("--noconv", action="store_true",
                   help="show byte counts in bytes rather than MB (nsys' csv:noconv)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        specs = [s for given in (args.rule or ["all"]) for s in given.split(",") if s.strip()]
        specs = [r for s in specs for r in (DEFAULT_RULES if s.strip() == "all" else [s])]
        parsed = [resolve(s) for s in specs]
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    status = 0
    try:
        inputs = expand_inputs(args.inputs)
    except Nsys2PrvError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    for path in inputs:
        try:
            report = open_export(path)
        except Nsys2PrvError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            status = max(status, e.exit_code)
            continue
        try:
            for rule, values, given in parsed:
                result = evaluate(report, rule, values, given)
                _show(result, args.format, args.noconv)
        except Nsys2PrvError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            status = max(status, e.exit_code)
        finally:
            report.close()
    return status


def _show(result, fmt: str, raw: bool) -> None:
    if fmt == "csv":
        if result.skipped:
            print(f"{PROG}: {result.spec} skipped: {result.skipped}", file=sys.stderr)
            return
        text = format_csv(result, raw=raw)
        if text:
            print(text)
        return
    print(f"{result.export} - {result.spec}")
    print()
    print(format_text(result, raw=raw))
