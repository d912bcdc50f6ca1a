"""The memory of `layers.Projected.names()` (round 24): the peak RSS above what the process
held before it, for a `Projected` saved from an analysis (`save`), and its table written
for comparing two versions of the code (`measure`).

    NSYS2PRV_NO_SUPERVISOR=1 python names_memory.py save PROJECTED.pkl TRACE
    python names_memory.py measure PROJECTED.pkl [TABLE.arrow]
"""
import contextlib
import io
import pickle
import sys
import threading
import time


def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


if sys.argv[1] == "save":  # the layers' Projected of `analyze TRACE`, as it prints them
    import nsys2prv.cli.analyze as CA

    original = CA.format_layers

    def keep(lay, *a, **k):
        with open(sys.argv[2], "wb") as f:
            pickle.dump(lay.projected, f)
        return original(lay, *a, **k)
    CA.format_layers = keep
    with contextlib.redirect_stdout(io.StringIO()):
        CA.main(sys.argv[3:])
    sys.exit()
projected = pickle.load(open(sys.argv[2], "rb"))
peak, stop = [0], [False]


def sampler():
    while not stop[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)


threading.Thread(target=sampler, daemon=True).start()
time.sleep(0.02)
before = peak[0] = rss()
table = projected.names()
time.sleep(0.02)
stop[0] = True
print(f"{projected.projected} instances: names() peak +{peak[0] - before} MB above {before}")
if len(sys.argv) > 3:
    table.write_ipc(sys.argv[3])
