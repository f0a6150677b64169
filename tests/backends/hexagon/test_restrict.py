"""`program.restrict_functions`: which generated kernels the packer may treat as
``restrict`` (loads never alias stores). A kernel that writes a static scratch array and
reads it back is not: the packer once hoisted such loads above their stores (GAP and
AveragePool gave wrong sums; tests/backends/hexagon/test_quant_rules.py runs them)."""

from __future__ import annotations

from egraph_compiler.backends.hexagon.program import restrict_functions

ASM = """\
\t.text
op0_pool:
\tr1 = add(pc,##op0_pool_sums@PCREL)
\tmemw(r1+#0) = r2
\tr3 = memw(r1+#0)
\tjumpr r31
\t.size\top0_pool, .Lfunc_end0-op0_pool
op1_gemm:
\tr3 = memw(r0+#0)
\tmemw(r1+#0) = r3
\tjumpr r31
\t.size\top1_gemm, .Lfunc_end1-op1_gemm
op2_copy:
\tr1 = add(pc,##op2_table@PCREL)
\tr3 = memw(r1+#0)
\tjumpr r31
\t.size\top2_copy, .Lfunc_end2-op2_copy
main:
\tjumpr r31
\t.size\tmain, .Lfunc_end3-main
\t.section\t.rodata,"a",@progbits
op2_table:
\t.word\t1
\t.section\t.bss,"aw",@nobits
op9_state:
\t.word\t0
\t.lcomm\top0_pool_sums,512,128
"""


def test_a_kernel_addressing_writable_globals_is_not_restrict() -> None:
    assert restrict_functions(ASM) == frozenset({"op1_gemm", "op2_copy"})


def test_a_bss_label_counts_as_writable() -> None:
    text = ASM.replace("##op2_table@PCREL", "##op9_state@PCREL")
    assert restrict_functions(text) == frozenset({"op1_gemm"})
