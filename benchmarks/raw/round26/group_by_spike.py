"""The memory a polars group_by over the launch statistics' 17 key columns takes while it
runs: N rows of 60k distinct groups (the 30M benchmark trace's launch configurations),
grouped once; RSS sampled every 5 ms.

    PYTHONPATH=benchmarks python benchmarks/raw/round26/group_by_spike.py N
"""
import sys, numpy as np, polars as pl, threading, time
from phase_marks import rss_mb
PEAK=[0]
def s():
    while True: PEAK[0]=max(PEAK[0],rss_mb()); time.sleep(0.005)
threading.Thread(target=s,daemon=True).start()
rng=np.random.default_rng(0)
n=int(sys.argv[1]); distinct=60000
keys=["row","name","full","nccl","blocks","threads","registers","static_smem","dynamic_smem","carveout","cluster_size","sms","blocks_per_sm","limiter","occupancy_pv","resident","warps_ceiling_pv"]
idx=rng.integers(0,distinct,n)
base={k:rng.integers(0,1000,distinct) for k in keys}
df=pl.DataFrame({k:(base[k][idx].astype(np.int32) if k=="row" else (base[k][idx]%2==0 if k=="nccl" else base[k][idx])) for k in keys}).with_columns(pl.lit(1,pl.UInt32).alias("launches"),pl.lit(5,pl.Int64).alias("time"))
import gc; gc.collect(); time.sleep(0.2)
b=rss_mb(); PEAK[0]=0; time.sleep(0.05)
t=time.time()
out=df.group_by(keys).agg(pl.col("launches").sum(),pl.col("time").sum())
time.sleep(0.1)
print(n, "frame MB", round(df.estimated_size()/1e6,1), "out rows", out.height, "rss before", b, "peak", PEAK[0], "delta", PEAK[0]-b, "s", round(time.time()-t,2))
