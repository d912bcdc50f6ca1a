"""The verdict on a repeated range (`stats.compare_samples`): it reads right when its two
tests disagree, and how often it calls noise a change (false positives) and finds a known
change (power), measured on seeded simulated pairs (the numbers docs/diff.md states)."""

from __future__ import annotations

import numpy as np
import pytest

from nsys2prv.analysis.stats import ALPHA, compare_samples

MS = 1e6


def test_inconclusive_when_the_test_rejects_but_the_interval_holds_zero():
    """Half of the after steps 20 % slower (a bimodal step): Mann-Whitney rejects, the
    median's interval reaches from no change to +19 %: inconclusive, with both numbers."""
    rng = np.random.default_rng(1)
    x = np.round(100 + rng.normal(0, 1, 20), 3) * MS
    y = np.round(np.concatenate([100 + rng.normal(0, 1, 11), 120 + rng.normal(0, 1, 9)]),
                 3) * MS
    s = compare_samples(x, y)
    assert s.verdict == "inconclusive" and s.p < ALPHA
    lo, hi = s.interval
    assert lo < 0 < hi
    text = s.reading()
    assert text == (f"inconclusive: p = {s.p:.3f}, but the 95 % interval of the median change, "
                    f"{lo / MS:+.3f} to {hi / MS:+.3f} ms ({100 * lo / s.median_before:+.1f} % "
                    f"to {100 * hi / s.median_before:+.1f} %), includes 0")
    assert not s.changed


def test_inconclusive_when_the_interval_excludes_zero_but_the_test_cannot_reject():
    """3 steps a side, all after ones slower: the exact test cannot go below p = 0.1, the
    interval excludes 0: inconclusive, not 'no change'."""
    s = compare_samples(np.array([1.0, 2, 3]) * MS, np.array([10.0, 11, 12]) * MS)
    assert s.verdict == "inconclusive" and s.p == pytest.approx(0.1)
    assert s.reading() == ("inconclusive: the 95 % interval of the median change, +7.000 to "
                           "+11.000 ms (+350.0 % to +550.0 %), excludes 0, but p = 0.100")


DISTRIBUTIONS = {
    "normal": lambda rng, n: rng.normal(100, 5, n),
    "log-normal": lambda rng, n: 100 * np.exp(rng.normal(0, 0.05, n)),
    "Student t, 3 dof": lambda rng, n: 100 + 5 / np.sqrt(3) * rng.standard_t(3, n),
}


def _rates(dist: str, n: int, shift_sd: float, pairs: int, seed: int) -> dict[str, float]:
    """Share of each verdict on `pairs` simulated pairs of `n` steps a side, the after
    side moved by `shift_sd` standard deviations (5 ms on 100)."""
    rng = np.random.default_rng(seed)
    draw = DISTRIBUTIONS[dist]
    out: dict[str, int] = {}
    for _ in range(pairs):
        s = compare_samples(draw(rng, n) * MS, (draw(rng, n) + 5 * shift_sd) * MS)
        out[s.verdict] = out.get(s.verdict, 0) + 1
        # never a p below alpha read as no change, never a change without both tests
        assert s.verdict != "no change beyond noise" or s.p >= ALPHA
        assert not s.changed or (s.p < ALPHA and (s.interval[0] > 0 or s.interval[1] < 0))
    return {k: v / pairs for k, v in out.items()}


@pytest.mark.parametrize("dist", list(DISTRIBUTIONS))
def test_false_positive_rate_and_power(dist):
    """Measured (300 pairs a case, seeded; docs/diff.md): without a change the verdict says
    'slower' or 'faster' on 1.7-4.3 % of pairs of 20 steps (inconclusive on 3-3.7 %); it
    finds a change of one standard deviation in 71-96 % of them and of two in all, and never
    says 'faster' for a slower run."""
    null = _rates(dist, 20, 0.0, 300, seed=11)
    false_positive = null.get("slower", 0) + null.get("faster", 0)
    assert false_positive <= ALPHA
    assert null.get("no change beyond noise", 0) >= 0.9
    one = _rates(dist, 20, 1.0, 300, seed=12)
    two = _rates(dist, 20, 2.0, 300, seed=13)
    assert one.get("faster", 0) == two.get("faster", 0) == 0
    assert one.get("slower", 0) >= 0.6
    assert two.get("slower", 0) >= 0.98
