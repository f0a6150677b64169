"""A check shared by the symbolic artefact tests: sizes fixed over a version's shapes
are literals in its kernels (`symbolic._specialised_kernels`)."""

from __future__ import annotations

import itertools
import re

from egraph_compiler.backends.opencl import dimpoly


def fixed_sizes_read(plan: dict, source: str) -> tuple[int, list[tuple[str, int, int]]]:
    """Over every version of ``plan`` and every shape of its boxes (``source``: its
    kernels.cl): the sizes with one value at all of them, and those of them a kernel
    body still reads as an argument (version id, launch, size index)."""
    steps = {n: r[2] if len(r) == 3 else 1 for n, r in plan["dims"].items()}
    fixed, read = 0, []
    for number, version in enumerate(plan["versions"]):
        shapes = [(box, dict(zip(box["box"], point, strict=True)))
                  for box in plan["boxes"] if box["version"] == number
                  for point in itertools.product(*(range(lo, hi + 1, steps[n])
                                                   for n, (lo, hi) in box["box"].items()))]
        for k, launch in enumerate(version["launches"]):
            header, _, body = source[source.index(f"void {launch['kernel']}("):] \
                .split("\n}\n", 1)[0].partition(") {\n")
            for j in map(int, re.findall(r"const int s(\d+)\b", header)):
                if len({dimpoly.evaluate(box["sizes"][k][j], point) for box, point in shapes}) == 1:
                    fixed += 1
                    if re.search(rf"(?<![.\w])s{j}\b", body):  # not ``acc.s3``
                        read.append((version["id"], k, j))
    return fixed, read
