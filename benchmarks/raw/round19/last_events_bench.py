import time, numpy as np, sys
from nsys2prv.engine._engine import last_events
rng = np.random.default_rng(1)
for n in (1_000_000, 4_000_000, 12_000_000):
    rows = rng.integers(0, 200, n).astype(np.int32)
    types = rng.choice(np.array([63000001 + i for i in range(40)] + [2**40 + 5], dtype=np.int64), n)
    t = time.perf_counter(); r = last_events(rows, types); dt = time.perf_counter() - t
    idx = np.frombuffer(r, dtype=np.int64)
    print(n, len(idx), f"{dt*1000:.1f} ms", hash(r.hex()[:200]) if False else int(idx.sum()))
