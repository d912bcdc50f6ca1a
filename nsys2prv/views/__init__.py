"""Paraver view authoring: the cfgs shipped in cfgs/, their GUI load rule, the wxparaver
workspaces, and paramedir runs of the cfgs."""
