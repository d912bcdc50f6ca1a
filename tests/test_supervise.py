"""The supervised command line (nsys2prv/supervise.py): a death by out-of-memory ends in one
line and leaves no temporary file behind."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import textwrap

from conftest import ROOT

from nsys2prv.supervise import _Relay


def _relayed(*chunks: bytes) -> bytes:
    out = io.BytesIO()
    relay = _Relay(out)
    for c in chunks:
        relay.feed(c)
    relay.close()
    return out.getvalue()


def test_relay_passes_our_output_and_progress_bars():
    text = b"nsys2prv: wrote x\n\rreports: 10%\rreports: 50%\nplain line\n"
    assert _relayed(text) == text
    assert _relayed(*(text[i:i + 3] for i in range(0, len(text), 3))) == text


def test_relay_drops_rust_messages_until_our_next_line():
    rust = (b"memory allocation of 716177408 bytes failed\nstack backtrace:\n"
            b"   0: std::alloc::rust_oom\nnote: Some details are omitted\n")
    ours = b"nsys2prv: error: out of memory\n"
    assert _relayed(b"\rreports: 3%", rust, ours) == b"\rreports: 3%" + ours
    # split anywhere, also inside the marker
    data = b"ok\n" + rust + ours
    for cut in range(1, len(data)):
        assert _relayed(data[:cut], data[cut:]) == b"ok\n" + ours
    panic = b"thread '<unnamed>' panicked at lib.rs:375:44:\ncalled `unwrap()`\n"
    assert _relayed(panic + b"Traceback (most recent call last):\n") == \
        b"Traceback (most recent call last):\n"


def _supervised(tmp_path, body: str, limit: int | None = None):
    script = tmp_path / "run.py"
    script.write_text(
        "import os, sys\n"
        "from nsys2prv.supervise import register_temp, run_supervised\n"
        "def command():\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
        "sys.exit(run_supervised(command, 'testing', 'try less'))\n")

    def cap():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, preexec_fn=cap, timeout=120,
                          env={**os.environ, "RUST_BACKTRACE": "1",
                               "PYTHONPATH": str(ROOT)})


def test_real_polars_oom_is_one_line_and_temporaries_go(tmp_path):
    body = f"""
        os.mkdir({str(tmp_path / 'work')!r})
        register_temp({str(tmp_path / 'work')!r})
        open({str(tmp_path / 'work' / 'part')!r}, "w").write("x")
        import polars as pl
        pl.select(pl.int_range(0, 10**10).alias("a")).with_columns(pl.col("a") * 2)
        return 0
    """
    proc = _supervised(tmp_path, body, limit=3 << 30)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "nsys2prv: error: out of memory while testing; partial outputs removed (try less)"]
    assert not (tmp_path / "work").exists()


def test_exit_codes_and_output_pass_through(tmp_path):
    proc = _supervised(tmp_path, """
        print("to stdout")
        print("nsys2prv: error: bad input", file=sys.stderr)
        return 3
    """)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        3, "to stdout\n", "nsys2prv: error: bad input\n")


def test_other_crashes_say_so(tmp_path):
    proc = _supervised(tmp_path, """
        import signal
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "nsys2prv: error: crashed with SIGSEGV while testing; partial outputs removed (run "
        "again with --debug and report it)"]


def test_console_script_is_supervised_and_cleans_up(tmp_path):
    """`nsys2prv` as a user runs it, killed from inside by an out-of-memory abort while the
    trace is being written: one line, exit 1, no temporary file left, no trace."""
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export

    export = write_export(tmp_path / "s.sqlite", sample_spec())
    out = tmp_path / "out"
    out.mkdir()
    # abort in the middle of the merge, as the allocator does when memory runs out
    hook = tmp_path / "sitecustomize.py"
    hook.write_text(textwrap.dedent("""
        import os
        from nsys2prv.paraver import output
        _write = output.TraceWriter.write_bytes
        def write_bytes(self, data):
            _write(self, data)
            os.write(2, b"memory allocation of 99 bytes failed\\n")
            os.abort()
        output.TraceWriter.write_bytes = write_bytes
    """))
    proc = subprocess.run([sys.executable, "-m", "nsys2prv", str(export),
                           str(out / "t.prv")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        "nsys2prv: error: out of memory while translating; partial outputs removed (try a "
        "smaller --memory, or -j 1)"]
    assert sorted(os.listdir(out)) == []
