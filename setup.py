"""Build of the compiled engine (nsys2prv/engine/_engine.c); everything else is in
pyproject.toml. Plain C against the CPython API: gcc and the Python headers are all it needs."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nsys2prv.engine._engine", ["nsys2prv/engine/_engine.c",
                                                         "nsys2prv/engine/_scan.c"],
                             extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra",
                                                 "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers",
                                                 "-Wno-cast-function-type"])])
