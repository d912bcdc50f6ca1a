"""Round 22: the fixed cost of one eager polars call on a 20-row frame (what the
translation of a small report makes hundreds of), in microseconds a call; run with and
without POLARS_MAX_THREADS=1 (a call hands its work to polars' thread pool and waits)."""

import time

import polars as pl

df = pl.DataFrame({"a": list(range(20)), "b": list(range(20))})


def per_call(f, n: int = 2000) -> float:
    for _ in range(50):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


CALLS = {
    "select": lambda: df.select(pl.col("a") + 1, "b"),
    "with_columns": lambda: df.with_columns((pl.col("a") * 2).alias("c")),
    "filter": lambda: df.filter(pl.col("a") > 3),
    "join": lambda: df.join(df, on="a", how="left"),
    "sort": lambda: df.sort("b"),
    "sum().item()": lambda: df.select(pl.col("a").sum()).item(),
    "expression only": lambda: (pl.col("a") + 1).alias("x"),
}
for name, f in CALLS.items():
    print(f"{name:16s} {per_call(f):7.0f} us")
