"""Issue 15 item 4: the symbolic build cuts the dim ranges into boxes of one version
(same code) on which every quantity is one expression, exactly (`symbolic._Partition`)."""

from __future__ import annotations

import itertools

from egraph_compiler.backends.opencl import dimpoly, symbolic
from egraph_compiler.backends.opencl.build import Assembled

DIMS = ["rows", "cols"]
GRID = list(itertools.product(range(1, 5), range(1, 7)))


def _probe(signature: str, numbers: dict[str, int], arena_bytes: int) -> symbolic._Probe:
    doc = {"tensors": {"t": {"kind": "arena", "dtype": "float32", "nbytes": arena_bytes}}}
    return symbolic._Probe(signature, Assembled(doc, {}, {}, {}, []), numbers)


def _leaves(probes: dict) -> list[symbolic._Leaf]:
    box = ((1, 4), (1, 6))
    return symbolic._Partition(DIMS, probes).leaves(box)


def _check_cover(leaves: list[symbolic._Leaf], probes: dict) -> None:
    seen = []
    for leaf in leaves:
        points = list(itertools.product(*(range(lo, hi + 1) for lo, hi in leaf.box)))
        seen += points
        for p in points:
            assert probes[p].signature == leaf.signature
            for name, value in probes[p].numbers.items():
                assert dimpoly.evaluate(leaf.expressions[name], dict(zip(DIMS, p, strict=True))) == value
    assert sorted(seen) == sorted(GRID)  # every shape in exactly one box


def test_versions_split_where_the_code_changes() -> None:
    # a row-serial kernel once there are 8 rows*cols or more (KernelParams.row_serial_min_rows)
    probes = {(r, c): _probe("serial" if r * c >= 8 else "group",
                             {"items": 64 * r * c, "tiles": 16 * r * -(-c // 4)}, 4 * r * c)
              for r, c in GRID}
    leaves = _leaves(probes)
    _check_cover(leaves, probes)
    assert {leaf.signature for leaf in leaves} == {"serial", "group"}
    assert len(leaves) < len(GRID) // 2  # boxes, not one per shape


def test_a_quantity_no_expression_fits_is_kept_exact_per_box() -> None:
    probes = {(r, c): _probe("one", {"odd": (r * 7919 + c ** 3 * 104729) % 97}, 4)
              for r, c in GRID}
    leaves = _leaves(probes)
    _check_cover(leaves, probes)


def test_a_box_uses_offsets_only_where_no_tensor_outgrows_its_corner() -> None:
    # the tensor shrinks as cols grows: the upper corner's plan is too small elsewhere
    probes = {(r, c): _probe("one", {"n": r * c}, 4 * (7 - c)) for r, c in GRID}
    leaves = _leaves(probes)
    _check_cover(leaves, probes)
    for leaf in leaves:
        corner = tuple(hi for _, hi in leaf.box)
        for p in itertools.product(*(range(lo, hi + 1) for lo, hi in leaf.box)):
            assert (probes[p].built.doc["tensors"]["t"]["nbytes"]
                    <= probes[corner].built.doc["tensors"]["t"]["nbytes"])


def test_dim_steps_parse_and_bad_steps_are_clear_errors() -> None:
    import pytest

    from egraph_compiler.cli import _parse_dim_ranges, _parse_dim_steps
    from egraph_compiler.ir.errors import DnnrError

    specs = ["batch=1..3", "height=32..64:8,width=32..64:16"]
    assert _parse_dim_ranges(specs) == {"batch": (1, 3), "height": (32, 64), "width": (32, 64)}
    assert _parse_dim_steps(specs) == {"height": 8, "width": 16}
    for bad in ("height=32..64:0", "height=32..64:", "height=32..64:x"):
        with pytest.raises(DnnrError, match="NAME=LO..HI:STEP"):
            _parse_dim_ranges([bad])
