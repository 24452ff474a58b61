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


def too_even(counts: list[int], sizes: list[int], p: float) -> bool:
    """Do per-row counts (row i: ``counts[i]`` of ``sizes[i]`` drawn with probability ``p``)
    vary far less than independent draws would? Their chi-square statistic,
    sum((k - n p)^2 / (n p (1 - p))), has mean ``len(counts)``; below a quarter of it has
    probability under 1e-9 for 64 rows, while an exact count per row gives about 0.03 per row."""
    rows = [(k, n) for k, n in zip(counts, sizes) if n > 0]
    stat = sum((k - n * p) ** 2 / (n * p * (1.0 - p)) for k, n in rows)
    return stat < len(rows) / 4
