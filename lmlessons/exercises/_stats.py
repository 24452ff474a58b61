"""Binomial tolerances for the statistical checks.

A correct function may draw its random numbers in any order, so checks compare *rates* with
what the probabilities imply, allowing ``Z`` standard deviations (plus one count for
discreteness). At Z = 5 a correct function fails a given rate test with probability below
1e-6, while the mistakes the checks look for move the rate by 10 or more standard deviations.
"""

from __future__ import annotations

import math

Z = 5.0


def within(count: int, n: int, p: float, z: float = Z) -> bool:
    """Is ``count`` out of ``n`` consistent with probability ``p``?"""
    sd = math.sqrt(n * p * (1.0 - p))
    return abs(count - n * p) <= z * sd + 1.0


def pct(count: int, n: int) -> str:
    return f"{100.0 * count / n:.1f}%" if n else "n/a"
