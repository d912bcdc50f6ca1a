"""Arithmetic done the way SQLite does it, where nsys' results depend on it.

`sqlite_round` reproduces SQLite 3.42's `round(x, n)` (which nsys 2023.4 ships): the value
plus a rounder of half a unit in the last place (nudged up by 3e-16 of the value) is cut to
`n` decimals in 80-bit long double arithmetic. This rounds exact halves up (Python's
`round` rounds them to even) and values a hair below a half up too.
"""

from __future__ import annotations

import numpy as np

_LONG = np.longdouble


def sqlite_round(value: float, digits: int) -> float:
    """SQLite's round(value, digits) for 0 < digits < 10."""
    if value != value or abs(value) > 4503599627370496.0:  # NaN, or no fraction to round
        return value
    negative = value < 0
    real = _LONG(-value if negative else value)
    rounder = np.float64(float(f"5e-{digits + 1}"))
    exponent = int(np.frexp(np.float64(real))[1]) - 1  # the double's binary exponent
    if digits + int(exponent / 3) < 15:  # C's division: truncated towards zero
        rounder = np.float64(_LONG(rounder) + real * _LONG(np.float64(3e-16)))
    real = real + _LONG(rounder)
    text = _digits(real, digits)
    return -float(text) if negative else float(text)


def _digits(real: np.longdouble, digits: int) -> str:
    """SQLite's printf("%!.Nf") digit loop on a positive long double."""
    exp = 0
    if real > 0:
        scale = _LONG(1.0)
        while real >= _LONG(1e100) * scale and exp <= 350:
            scale *= _LONG(1e100)
            exp += 100
        while real >= _LONG(1e10) * scale and exp <= 350:
            scale *= _LONG(1e10)
            exp += 10
        while real >= _LONG(10.0) * scale and exp <= 350:
            scale *= _LONG(10.0)
            exp += 1
        real = real / scale
        while real < _LONG(1e-8):
            real *= _LONG(1e8)
            exp -= 8
        while real < _LONG(1.0):
            real *= _LONG(10.0)
            exp -= 1
    significant = 26  # the "!" flag's digit budget

    def next_digit() -> str:
        nonlocal real, significant
        if significant <= 0:
            return "0"
        significant -= 1
        d = int(real)
        real = (real - _LONG(d)) * _LONG(10.0)
        return str(d)

    out = []
    if exp < 0:
        out.append("0")
    else:
        out.extend(next_digit() for _ in range(exp + 1))
    out.append(".")
    e2, left = exp + 1, digits
    while e2 < 0 and left > 0:
        out.append("0")
        e2 += 1
        left -= 1
    out.extend(next_digit() for _ in range(left))
    return "".join(out)


def sequential_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sums of the segments of `values` that begin at `starts`, each added left to right in
    float64 as SQLite's sum() does (numpy's own sums are pairwise and may differ in the
    last bit). Loops over positions within segments, not over segments."""
    lengths = np.diff(np.append(starts, len(values)))
    sums = np.zeros(len(starts), dtype=np.float64)
    for position in range(int(lengths.max(initial=0))):
        live = lengths > position
        sums[live] += values[starts[live] + position]
    return sums
