"""Errors that reach the user as one line and an exit code.

Everything the user can cause (bad input, missing `nsys`, unwritable output) is raised as a
subclass of :class:`Nsys2PrvError`; the CLI prints ``nsys2prv: error: <message>`` and exits with
:attr:`exit_code`. Anything else is a bug and keeps its traceback under ``--debug``.
"""

from __future__ import annotations


class Nsys2PrvError(Exception):
    """A problem with the input or the environment, explained in one line."""

    exit_code = 1


class UsageError(Nsys2PrvError):
    """The command line itself is wrong (argparse-style errors use exit code 2)."""

    exit_code = 2


class InputError(Nsys2PrvError):
    """An input file cannot be read as an Nsight Systems export."""


class NsysError(Nsys2PrvError):
    """`nsys` is missing, too old, or failed while exporting a report."""


class OutputError(Nsys2PrvError):
    """The output cannot be written (permissions, disk full, same path as an input)."""


class Interrupted(Nsys2PrvError):
    """The run was stopped by SIGINT/SIGTERM/SIGHUP (or its supervising parent was killed);
    partial outputs were removed."""

    exit_code = 130
