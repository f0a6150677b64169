"""Fresh value names that never collide with the names a graph already uses."""

from __future__ import annotations


def fresh_name(base: str, used: set[str]) -> str:
    """The first ``base_<n>`` not in ``used``; it is added to ``used``."""
    index = 0
    while f"{base}_{index}" in used:
        index += 1
    name = f"{base}_{index}"
    used.add(name)
    return name
