"""The `.row`: names of CPUs, nodes, the application, tasks and threads, in object order."""

from __future__ import annotations

from ..model.resources import ResourceModel
from .values import clean_label


def render(model: ResourceModel, application: str) -> str:
    out = []
    cpus = []
    for node_index, node in enumerate(model.nodes, start=1):
        for t in model.tasks:
            if t.node == node_index:
                cpus += [f"{node}.{r.label}" for r in t.rows]
    out.append(f"LEVEL CPU SIZE {len(cpus)}")
    out += [clean_label(c) for c in cpus]
    out += ["", f"LEVEL NODE SIZE {len(model.nodes)}"]
    out += [clean_label(n) for n in model.nodes]
    out += ["", "LEVEL APPL SIZE 1", clean_label(application)]
    out += ["", f"LEVEL TASK SIZE {len(model.tasks)}"]
    out += [clean_label(t.label) for t in model.tasks]
    rows = model.rows
    out += ["", f"LEVEL THREAD SIZE {len(rows)}"]
    out += [clean_label(r.label) for r in rows]
    return "\n".join(out) + "\n"
