"""Issue 15 item 3: sizes derived from the symbolic shapes, not fitted (`shapes.symint`)."""

from __future__ import annotations

import math

from egraph_compiler.backends.opencl import dimpoly
from egraph_compiler.backends.opencl.build import hoist_sizes
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.shapes import symint

BATCH, SEQ = DimExpr.symbol("batch"), DimExpr.symbol("seq")


def test_arithmetic_carries_the_derivation() -> None:
    batch, seq = symint.SymInt(3, BATCH), symint.SymInt(5, SEQ)
    rows = math.prod((batch, seq, 4))  # how the generator counts work-items
    tiles = -(-rows // 8) * 8  # ceil-division, as the arena aligns sizes
    stride = (seq - 1) * 2 + 1
    for value, env in (((rows, tiles, stride)), {"batch": 3, "seq": 5}), \
            (((rows, tiles, stride)), {"batch": 2, "seq": 9}):
        exprs = [symint.expr_of(v) for v in value]
        assert all(isinstance(e, DimExpr) for e in exprs)
        b, s = env["batch"], env["seq"]
        want = [b * s * 4, -(-(b * s * 4) // 8) * 8, (s - 1) * 2 + 1]
        assert [dimpoly.evaluate(dimpoly.render(e), env) for e in exprs] == want
    assert int(rows) == 60 and not isinstance(batch * 0, symint.SymInt)


def test_tokens_become_size_arguments_whatever_their_value() -> None:
    one, seq = symint.SymInt(1, BATCH), symint.SymInt(5, SEQ)
    with symint.tracking():
        source = (f"__kernel void KNAME(__global float* out0) {{\n"
                  f"  #define T {seq}\n  float acc[{seq}];\n"
                  f"  if (get_global_id(0) >= {one * seq * 4}) return;\n"
                  f"  out0[{one} * 7] = 0;\n}}\n")
        hoisted, sizes = hoist_sizes(source, 1)
    assert "__dnnr" not in hoisted and "#define T 5" in hoisted and "acc[5]" in hoisted
    # a plain literal is the same at every shape: it stays literal (the compiler folds it)
    assert [symint.expr_of(s) for s in sizes] == [symint.expr_of(one * seq * 4), BATCH]
    assert "out0[s1 * 7] = 0;" in hoisted
    assert str(seq) == "5"  # outside tracking a SymInt prints its value


def test_fusion_equalities_of_symbolic_sizes_need_a_proof() -> None:
    from egraph_compiler.shapes.prover import using_ranges

    batch, seq = symint.SymInt(1, BATCH), symint.SymInt(4, SEQ)
    with using_ranges({"batch": (1, 3), "seq": (1, 16)}):
        assert not symint.proved_equal(batch * seq, seq)  # equal only while batch is 1
        assert symint.proved_equal(batch * seq * 2, seq * batch + batch * seq)
        assert symint.proved_equal(4, 4) and not symint.proved_equal(4, 5)
