"""analyze_memory phases with the translation's kinds, tiling and merge named too."""
import dataclasses, sys
sys.path.insert(0, "/work/main/benchmarks")
import analyze_memory as am
from pathlib import Path
extra = (
    ("nsys2prv.pipeline.prepare", "tile"),
    ("nsys2prv.pipeline.merge", "stream"),
    ("nsys2prv.analysis.model", "analyze_path"),
    ("nsys2prv.analysis.idle", "explain"),
)
am.PHASES = am.PHASES + extra
from nsys2prv.paraver import kinds
import nsys2prv.analysis.idle, nsys2prv.pipeline.prepare  # noqa
# each kind's translate as a phase: replace the registry's entries with wrapped copies
def install(stack_wrap):
    pass
orig_phases = am.phases
def phases(out, source, options):
    # wrap kinds via a fake module attribute so am.wrap applies
    import types
    holder = types.SimpleNamespace()
    mod = types.ModuleType("kindsphase")
    sys.modules["kindsphase"] = mod
    am.PHASES = am.PHASES + tuple(("kindsphase", n) for n in kinds.TRANSLATORS)
    # after am wraps mod's attributes, the registry calls through them
    class Late(dict):
        pass
    res = None
    import nsys2prv.pipeline.prepare as prep
    wrapped = {}
    for name in kinds.TRANSLATORS:
        t = kinds.TRANSLATORS[name]
        setattr(mod, name, t.translate)
        wrapped[name] = dataclasses.replace(t, translate=(lambda n: (lambda r, c: getattr(mod, n)(r, c)))(name))
    prep.TRANSLATORS = wrapped
    return orig_phases(out, source, options)
am.phases = phases
sys.exit(am.main())
