"""The expert-system rules of `nsys analyze`, computed from an export without nsys.

    from nsys2prv import rules
    result = rules.run("report.sqlite", "gpu_gaps:gap=100:rows=-1")
    result.rows          # polars DataFrame, columns as nsys names them ("Duration (ns)", ...)
    result.message       # the advice, or why there is nothing to show
    print(rules.format_text(result))   # as `nsys analyze` prints it; format_csv for CSV

Rules and options are those of Nsight Systems 2023.4 (`nsys analyze --help-rules NAME`); the
2022.4 names (`gpu-starv`, `gpu-low-util`, `cuda-sync-api`, `cuda-sync-memcpy`,
`cuda-sync-memset`, `cuda-async-memcpy`) are accepted too. docs/rules.md defines each rule.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from ..errors import UsageError
from ..report.report import Report
from . import (cuda_api_sync, cuda_memcpy_async, cuda_memcpy_sync, cuda_memset_sync, gpu_gaps,
               gpu_time_util)
from .base import Column, Rule, RuleInput, RuleResult, Skip, parse_options, split_spec
from .format import format_csv, format_text
from .window import build_window, check_times

# In the order nsys runs them by default.
RULES: dict[str, Rule] = {r.name: r for r in (
    cuda_memcpy_async.RULE, cuda_memcpy_sync.RULE, cuda_memset_sync.RULE, cuda_api_sync.RULE,
    gpu_gaps.RULE, gpu_time_util.RULE)}
ALIASES = {r.old_name: r.name for r in RULES.values()}
DEFAULT_RULES = tuple(RULES)

__all__ = ["run", "run_all", "resolve", "RuleResult", "Column", "RULES", "ALIASES",
           "DEFAULT_RULES", "format_text", "format_csv"]


def resolve(spec: str) -> tuple[Rule, dict[str, object], tuple[str, ...]]:
    """Parse `NAME[:opt=val...]`: the rule, every option's value, the options given.
    Raises UsageError (one line) for an unknown rule, option or a bad value."""
    name, pairs = split_spec(spec)
    rule = RULES.get(ALIASES.get(name, name))
    if rule is None:
        raise UsageError(f"unknown rule '{name}' (rules: {', '.join(RULES)}; "
                         f"2022.4 names: {', '.join(ALIASES)})")
    values, given = parse_options(rule.name, rule.all_options, pairs)
    check_times(rule.name, values)
    return rule, values, given


def open_export(path: str | os.PathLike[str]) -> Report:
    """An export, or a `.nsys-rep`/`.qdrep` report exported (and cached beside it) with nsys."""
    from ..report.export import export_report, is_report

    path = Path(path)
    if is_report(path):
        path = export_report(path, path.parent)
    return Report(path)


def evaluate(report: Report, rule: Rule, options: dict[str, object],
             given: tuple[str, ...] = (), shared: dict | None = None) -> RuleResult:
    """Run one parsed rule on an opened export (`shared`: what the rules of one run read
    alike, kept between them: `run_all`)."""
    result = RuleResult(rule.name, rule.title, report.path, options, rule.columns,
                        pl.DataFrame(schema={c.name: c.dtype for c in rule.columns}),
                        rule.advice(options), rule.no_result(options), given=given)
    whole = RuleInput(report, None)
    try:
        if rule.check is not None:
            rule.check(whole)
        rows = rule.find(RuleInput(report, build_window(whole, options), shared), options)
    except Skip as skip:
        result.skipped = str(skip)
        return result
    result.rows = rows.select([pl.col(c.name).cast(c.dtype) for c in rule.columns])
    return result


def run(export_path: str | os.PathLike[str], spec: str) -> RuleResult:
    """Run the rule `spec` (nsys' syntax, e.g. "gpu_time_util:threshold=20:chunks=100") on
    one export. A bad spec raises UsageError; an unreadable file InputError; an export
    without the data the rule needs gives a result whose `skipped` says why."""
    return run_all(export_path, [spec])[0]


def run_all(export_path: str | os.PathLike[str], specs: Iterable[str] = DEFAULT_RULES
            ) -> list[RuleResult]:
    """Several rules on one export, opened once (all specs are checked first)."""
    parsed = [resolve(s) for s in specs]
    report = open_export(export_path)
    shared: dict = {}  # gpu_gaps and gpu_time_util read the same GPU operations
    try:
        return [evaluate(report, rule, values, given, shared)
                for rule, values, given in parsed]
    finally:
        report.close()
