"""Readers, one module per kind of nsys data, each returning normalised tables.

Nothing here knows about Paraver; `nsys2prv.paraver.kinds` turns these tables into records
and `nsys2prv.tables` offers them, with names resolved, to library users.
"""
