"""`analyze_memory.py phases` with each kind of the translation, the tiling and the merge
named too (round 20):

    python benchmarks/raw/round20/phases_kinds.py phases OUT.json EXPORT
"""
import dataclasses
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import analyze_memory as am  # noqa: E402

am.PHASES = am.PHASES + (
    ("nsys2prv.pipeline.prepare", "tile"),
    ("nsys2prv.pipeline.merge", "stream"),
    ("nsys2prv.analysis.model", "analyze_path"),
)
_phases = am.phases


def phases(out, source, options):
    """The kinds' translate functions as attributes of a module `analyze_memory` wraps, and
    the preparation's registry calling through them."""
    import nsys2prv.pipeline.prepare as prep
    from nsys2prv.paraver import kinds

    mod = types.ModuleType("kindsphase")
    sys.modules["kindsphase"] = mod
    wrapped = {}
    for name in kinds.TRANSLATORS:
        t = kinds.TRANSLATORS[name]
        setattr(mod, name, t.translate)
        wrapped[name] = dataclasses.replace(
            t, translate=(lambda n: (lambda r, c: getattr(mod, n)(r, c)))(name))
    prep.TRANSLATORS = wrapped
    am.PHASES = am.PHASES + tuple(("kindsphase", n) for n in kinds.TRANSLATORS)
    return _phases(out, source, options)


am.phases = phases
sys.exit(am.main())
