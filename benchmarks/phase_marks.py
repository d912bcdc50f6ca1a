"""Memory of one process by phase, for the raw scripts of `benchmarks/raw/`: RSS sampled
every 20 ms on a thread, with markers where named functions begin and end (`wrap`) or where
the script says (`mark`); `report` prints the largest RSS between each two markers.

    from phase_marks import PhaseMarks
    marks = PhaseMarks()
    marks.wrap(module, "function")
    ...
    marks.report()
"""

from __future__ import annotations

import threading
import time


def rss_mb() -> int:
    """This process' resident set (MB), from /proc."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return -1


class PhaseMarks:
    def __init__(self, every: float = 0.02) -> None:
        self.t0 = time.time()
        self.samples: list[tuple[float, int]] = []
        self.marks: list[tuple[float, str, str, int]] = []
        self._stop = False
        self._every = every
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop:
            self.samples.append((time.time() - self.t0, rss_mb()))
            time.sleep(self._every)

    def mark(self, name: str, where: str) -> None:
        self.marks.append((time.time() - self.t0, name, where, rss_mb()))

    def wrap(self, obj, name: str) -> None:
        """Markers around each call of `obj.name`."""
        f = getattr(obj, name)

        def marked(*a, **k):
            self.mark(name, "begin")
            try:
                return f(*a, **k)
            finally:
                self.mark(name, "end")

        setattr(obj, name, marked)

    def report(self) -> None:
        self._stop = True
        self.mark("report", "end")
        prev, pname = 0.0, "start"
        for t, n, w, r in self.marks:
            seg = [x[1] for x in self.samples if prev <= x[0] <= t]
            print(f"{prev:7.1f}-{t:7.1f} {pname:>24s} -> {n}:{w:5s} max "
                  f"{max(seg) if seg else -1:5d} MB, at mark {r}")
            prev, pname = t, f"{n}:{w}"
        print(f"peak {max(x[1] for x in self.samples)} MB")
