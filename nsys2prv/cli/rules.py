"""`analyze --rule SPEC ... EXPORT...`: nsys' expert-system rules on exports, without nsys.

Prints each rule's result for each export as `nsys analyze` does, or sends it where nsys'
output options say, with nsys' meanings (checked against nsys 2023.4, tests/test_rules.py):

* `-o/--output OUT` (repeatable, or comma-separated): `-` the console, `@COMMAND` a command
  whose stdin gets the result (split on whitespace, no shell), `.` a file named after the
  export, anything else a file base: the result of rule NAME given as `NAME:a=1` goes to
  `OUT_NAME_a=1.EXT`;
* `-f/--format FMT[:ARGS]` (repeatable, or comma-separated): `column` (the console's default;
  `text` is our old name for it), `table`, `csv` (the default for files and commands),
  `tsv`, `json`, `.` the output's default; ARGS `noconv` (bytes as bytes) and `nohdr`;
* the k-th rule goes to the k-th output in the k-th format, the last of each serving the
  rules after it (extra ones are unused: a warning);
* an existing file is left alone and the rule skipped, with a line on stderr, unless
  `--force-overwrite true`; that is not an error (nsys exits 0 too).

An export that lacks a rule's data gets a one-line note on stderr instead (and an empty
file, as nsys writes). Exit status: 0, 1 when an input could not be read or an output could
not be written, 2 for a bad command line or rule spec.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import Nsys2PrvError, OutputError, UsageError
from ..report.inputs import expand_inputs
from ..rules import DEFAULT_RULES, RULES, evaluate, open_export, resolve
from ..rules.base import split_spec
from ..rules.format import EXTENSIONS, FORMAT_ARGS, format_csv, format_text, render
from .common import Parser

PROG = "nsys2prv analyze"
CONSOLE, DEFAULT_BASE = "-", "."
FORMAT_NAMES = {**{n: n for n in EXTENSIONS}, "text": "column"}


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
    p.add_argument("-f", "--format", action="append", metavar="FMT[:ARGS]",
                   help="column (default on the console; or text), table, csv (default for "
                        "files and commands), tsv, json, or . (the output's default); ARGS: "
                        "noconv (bytes as bytes), nohdr (no header line); repeatable or "
                        "comma-separated: the k-th rule gets the k-th format (the last one "
                        "the rest)")
    p.add_argument("-o", "--output", action="append", metavar="OUT",
                   help="- (the console, default), @COMMAND (piped into it), . (files named "
                        "after the export) or BASE (files BASE_RULE[_OPTION=VALUE...].EXT); "
                        "repeatable or comma-separated: the k-th rule goes to the k-th "
                        "output (the last one the rest)")
    p.add_argument("--force-overwrite", choices=("true", "false"), default="false",
                   help="replace output files that exist (default false: they are left "
                        "alone and that rule skipped, as nsys does)")
    p.add_argument("--noconv", action="store_true",
                   help="show byte counts in bytes rather than MB (nsys' csv:noconv)")
    return p


@dataclass(frozen=True)
class Format:
    name: str  # a key of EXTENSIONS, or "." (the output's default)
    raw: bool = False
    head: bool = True


def _formats(given: list[str] | None, noconv: bool) -> list[Format]:
    """The formats of -f, in order (UsageError for one nsys2prv does not write)."""
    out = []
    for item in (x.strip() for g in given or [] for x in g.split(",") if x.strip()):
        name, *args = item.split(":")
        if name != "." and name not in FORMAT_NAMES:
            raise UsageError(f"unknown or unsupported format '{name}' (formats: "
                             f"{', '.join(EXTENSIONS)}; hdoc and htable are not written)")
        bad = [a for a in args if a not in FORMAT_ARGS]
        if bad:
            raise UsageError(f"format argument '{bad[0]}' of '{item}' is not supported "
                             f"(supported: {', '.join(FORMAT_ARGS)})")
        out.append(Format(FORMAT_NAMES.get(name, name), noconv or "noconv" in args,
                          "nohdr" not in args))
    return out


def _outputs(given: list[str] | None) -> list[str]:
    return [x.strip() for g in given or [] for x in g.split(",") if x.strip()]


def _pick(items: list, k: int, default):
    """The k-th item, the last one for k beyond them, `default` when there is none."""
    return items[min(k, len(items) - 1)] if items else default


def _file_name(base: str, spec: str, rule: str, ext: str) -> Path:
    """BASE_RULE[_OPTION=VALUE...].EXT, the options as given (nsys' naming)."""
    _, pairs = split_spec(spec)
    return Path(base + "_" + "_".join([rule, *(f"{k}={v}" for k, v in pairs)]) + ext)


def _kept(path: Path, force: bool) -> bool:
    """Whether an existing output file stays as it is (and its rule is skipped, with a line
    on stderr, as nsys does): without --force-overwrite true."""
    if force or not path.exists():
        return False
    print(f"{PROG}: SKIPPED: output file {path} exists (--force-overwrite true replaces it)",
          file=sys.stderr)
    return True


def _write_file(path: Path, text: str) -> None:
    """Write `text` to `path` whole (`paraver.output.atomic_text`)."""
    from ..paraver.output import atomic_text

    atomic_text(path, text)


def _pipe(command: str, text: str) -> None:
    """Run COMMAND (split on whitespace) with `text` on its stdin; its output is ours."""
    argv = command.split()
    if not argv:
        raise UsageError("an @COMMAND output names no command")
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, text=True)
    except OSError as e:
        raise OutputError(f"@{command}: cannot run it ({e.strerror})") from None
    try:
        proc.stdin.write(text)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
    except BrokenPipeError:  # `@head -n 3`: the command had what it wanted
        pass
    proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        specs = [s for given in (args.rule or ["all"]) for s in given.split(",") if s.strip()]
        specs = [r for s in specs for r in (DEFAULT_RULES if s.strip() == "all" else [s])]
        parsed = [resolve(s) for s in specs]
        formats = _formats(args.format, args.noconv)
        outputs = _outputs(args.output)
        inputs = expand_inputs(args.inputs)
        bases = [o for o in outputs if o not in (CONSOLE, DEFAULT_BASE) and o[:1] != "@"]
        if bases and len(inputs) > 1:
            raise UsageError(f"-o {bases[0]} names the files of one export, and {len(inputs)} "
                             "are given: use -o . (files named after each export)")
    except Nsys2PrvError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    for what, n in (("outputs (-o)", len(outputs)), ("formats (-f)", len(formats))):
        if n > len(parsed):
            print(f"{PROG}: warning: more {what} than rules: the last {n - len(parsed)} are "
                  "not used", file=sys.stderr)
    force = args.force_overwrite == "true"
    status = 0
    for path in inputs:
        try:
            report = open_export(path)
        except Nsys2PrvError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            status = max(status, e.exit_code)
            continue
        try:
            for k, ((rule, values, given), spec) in enumerate(zip(parsed, specs)):
                out = _pick(outputs, k, CONSOLE)
                fmt = _pick(formats, k, Format("."))
                if out in (CONSOLE, DEFAULT_BASE) or out[:1] == "@":
                    base = None if out != DEFAULT_BASE else str(_default_base(report.path))
                else:
                    base = out
                name = fmt.name if fmt.name != "." else ("column" if out == CONSOLE else "csv")
                if base is not None:
                    target = _file_name(base, spec, rule.name, EXTENSIONS[name])
                    if _kept(target, force):
                        continue
                result = evaluate(report, rule, values, given)
                if result.skipped and out != CONSOLE:  # the file is written all the same
                    print(f"{PROG}: {result.spec} skipped: {result.skipped}", file=sys.stderr)
                if out == CONSOLE:
                    _show(result, name, fmt)
                    continue
                # a file or a command: nothing for a skipped rule (an empty file, as nsys)
                text = "" if result.skipped else render(result, name, fmt.raw, fmt.head)
                if text and name in ("column", "table"):
                    text = "\n" + text  # nsys' files start with an empty line
                if base is not None:
                    _write_file(target, text)
                else:
                    _pipe(out[1:], text)
        except Nsys2PrvError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            status = max(status, e.exit_code)
        finally:
            report.close()
    return status


def _default_base(export: Path) -> Path:
    """The export's path without its extension (nsys' default base, `-o .`)."""
    return export.with_suffix("")


def _show(result, fmt: str, f: Format) -> None:
    """On the console: column as before (a title line, then the text), csv/tsv as the rows
    (a skipped rule: a line on stderr), json and table as nsys prints them."""
    if fmt in ("csv", "tsv"):
        if result.skipped:
            print(f"{PROG}: {result.spec} skipped: {result.skipped}", file=sys.stderr)
            return
        text = format_csv(result, f.raw, f.head) if fmt == "csv" else render(
            result, fmt, f.raw, f.head)
        if text:
            print(text)
        return
    if fmt == "json":
        print(render(result, fmt, f.raw), end="")
        return
    print(f"{result.export} - {result.spec}")
    print()
    print(format_text(result, raw=f.raw, box=fmt == "table"))
