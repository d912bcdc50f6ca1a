"""The `.pcf`: default options, states with colours, event types with their value labels.

Paraver reads types and values with 32-bit `stoi`, so every labelled value must fit in
int32; labels are single lines (control characters removed). Each group of types that
shares a value table gets its own EVENT_TYPE section, as Paraver requires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import registry as reg
from .values import clean_label

INT32_MAX = 2**31 - 1


@dataclass
class PcfType:
    """One event type of the .pcf: its label and the labels of its values."""

    type: int
    label: str
    values: dict[int, str] = field(default_factory=dict)
    precision: int = 0
    gradient: int = 0


def render(types: Iterable[PcfType]) -> str:
    out = ["DEFAULT_OPTIONS", "", "LEVEL               THREAD", "UNITS               NANOSEC",
            "LOOK_BACK           100", "SPEED               1", "FLAG_ICONS          ENABLED",
            "NUM_OF_STATE_COLORS 1000", "YMAX_SCALE          37", "", "",
            "DEFAULT_SEMANTIC", "", "THREAD_FUNC          State As Is", "", "", "STATES"]
    out += [f"{s.value:<4} {s.label}" for s in reg.STATES]
    out += ["", "", "STATES_COLOR"]
    out += [f"{s.value:<4} {{{s.color[0]},{s.color[1]},{s.color[2]}}}" for s in reg.STATES]
    out += ["", ""]
    return "\n".join(out) + "\n" + render_types(types)


def render_types(types: Iterable[PcfType]) -> str:
    """The EVENT_TYPE sections of `types` (what `render` writes after the states)."""
    out: list[str] = []
    # Group types that share an identical value table into one section.
    groups: dict[tuple, list[PcfType]] = {}
    for t in sorted(types, key=lambda t: t.type):
        if not 0 < t.type <= INT32_MAX:
            continue
        key = (tuple(sorted(t.values.items())), t.precision)
        groups.setdefault(key, []).append(t)
    for (values, precision), members in sorted(groups.items(), key=lambda kv: kv[1][0].type):
        out.append("EVENT_TYPE")
        for t in members:
            out.append(f"{t.gradient:<4} {t.type:<10} {clean_label(t.label)}")
        if precision:
            out.append(f"PRECISION {precision}")
        if values:
            out.append("VALUES")
            for v, label in values:
                if -2**31 <= v <= INT32_MAX:
                    out.append(f"{v:<10} {clean_label(label)}")
        out += ["", ""]
    return "\n".join(out) + "\n" if out else ""
