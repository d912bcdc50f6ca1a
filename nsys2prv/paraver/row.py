"""The `.row`: names of CPUs, nodes, the application, tasks and threads, in object order."""

from __future__ import annotations

from ..model.resources import ResourceModel
from .values import clean_label


def render(model: ResourceModel, application: str) -> str:
    """The .row of `model`; `application` names its one application (a trace of several
    names each 'LABEL: what it ran', and its tasks and threads start with 'LABEL: ')."""
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
    apps = [f"{a}: {n}" for a, n in zip(model.applications, model.application_names)] \
        if model.applications else [application]
    out += ["", f"LEVEL APPL SIZE {len(apps)}"]
    out += [clean_label(a) for a in apps]
    out += ["", f"LEVEL TASK SIZE {len(model.tasks)}"]
    out += [clean_label(model.prefix(t.appl) + t.label) for t in model.tasks]
    out += ["", f"LEVEL THREAD SIZE {len(model.rows)}"]
    out += [clean_label(model.prefix(t.appl) + r.label) for t in model.tasks for r in t.rows]
    return "\n".join(out) + "\n"
