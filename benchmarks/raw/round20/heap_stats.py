"""glibc's heap (`mallinfo2`) and the resident set along the analysis' first pass, every
25 windows (round 20); a second argument K gives the heap back (`malloc_trim`) every K
windows.

    python benchmarks/raw/round20/heap_stats.py EXPORT_OR_TRACE [K]
"""
import sys, ctypes, time
from nsys2prv import _alloc
_alloc.for_analysis()
from nsys2prv.analysis import activities, passes

class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MI2
TRIM_EVERY = int(sys.argv[2]) if len(sys.argv) > 2 else 0
n = [0]
orig = activities.ActivityCollector.add
def add(self, w):
    n[0] += 1
    if TRIM_EVERY and n[0] % TRIM_EVERY == 0:
        libc.malloc_trim(0)
    if n[0] % 25 == 0:
        m = libc.mallinfo2()
        st = {l.split(':')[0]: int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('Rss')}
        rss = (st['RssAnon'] + st['RssFile'] + st['RssShmem']) * 1024
        print('   anon', st['RssAnon']//1024, 'file', st['RssFile']//1024, 'shmem', st['RssShmem']//1024)
        print(f"w{n[0]} rss {rss/1e6:.0f} arena {m.arena/1e6:.0f} inuse {m.uordblks/1e6:.0f} free {m.fordblks/1e6:.0f} mmap {m.hblkhd/1e6:.0f} ({m.hblks})", flush=True)
    return orig(self, w)
activities.ActivityCollector.add = add
t = time.time(); c = time.process_time()
import nsys2prv
with nsys2prv.load(sys.argv[1]) as run:
    run.analysis()
print('done', time.time() - t, time.process_time() - c, 'windows', n[0])
import resource; print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)
