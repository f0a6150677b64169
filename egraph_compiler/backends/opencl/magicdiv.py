"""Invariant integer division by multiplication for the symbolic OpenCL artefact.

A bound (``--bind``) kernel divides its indices by literals, which the OpenCL compiler
turns into a multiply and a shift; the symbolic artefact divides by size ARGUMENTS
(``(gid/s2)%s3``), a real division, which x86 has no vector form of, so PoCL
scalarises every work-item loop that holds one (GPT-2's QKV split ran 7.5 µs against
2.6 µs bound). Here each division or remainder by a size argument becomes a multiply
by that divisor's "magic number" (Granlund & Montgomery, PLDI 1994, Theorem 4.2;
Hacker's Delight §10-8; libdivide): the host computes ``(m, s)`` once per shape next
to the size itself (`dimpoly.evaluate`'s ``magic_m``/``magic_s``, evaluated where the
run time binds the dims) and the kernel computes ``q = (x*m) >> (31 + s)`` as one
64-bit product (the high word of ``mul_hi``), ``r = x - q*d``. PoCL does not inline
OpenCL's ``mul_hi``: with it the BERT mask kernel took 55.7 µs, with the real division
28.7, with the 64-bit product 16.8 (bound: 11.5; benchmarks/dynamic.py --kernels).

The bound: with dividends of N = 31 bits (``|x| < 2^31``, every int index) the
theorem's multiplier ``m = floor(2^(31+l) / d) + 1``, ``l = ceil(log2 d)``, fits 32
bits for every ``1 <= d < 2^31`` (``d > 2^(l-1)`` makes ``2^(31+l)/d < 2^32``), and
``floor(x*m / 2^(31+l)) == floor(x / d)`` for ``0 <= x < 2^31`` because
``2^(31+l) < m*d <= 2^(31+l) + 2^l``; ``|x|*m < 2^63``, so the signed 64-bit product
never overflows. For ``-2^31 < x < 0`` the product overshoots ``x/d`` downwards by
``|x|*(m*d - 2^(31+l)) / (d*2^(31+l)) < 1/d``, less than the gap to the next integer
below, so the floor is exactly ``trunc(x/d) - 1``: adding ``x >> 31``'s one back gives
C's truncating ``/`` (and ``%``) that the rewrite replaces, at every sign. ``d = 0``
gets ``(0, 0)``: the kernel never divides by it (the division it replaces would
trap), the host must not fail.

Most dividends are indices of work-item ids and sizes, never negative: for those
(`nonnegative_names`, `is_nonnegative`: built of ids, sizes, literals, ``+ * / %``
and names every assignment of which is such) the rewrite emits ``DNNR_UDIV`` /
``DNNR_UREM``, the same product with ``x`` zero-extended and no sign correction. The
bound above is unchanged (``x < 2^31``), and the product of two zero-extended 32-bit
values is one unsigned vector multiply (``vpmuludq``) where PoCL vectorises across
work-items; the signed one, a sign-extended by a zero-extended factor, is not
(GPT-2's QKV split at 3×7: 5.4 µs signed, 2.2 unsigned, 2.7 bound).
"""

from __future__ import annotations

import re

# the operand of the theorem: |dividend| < 2^DIVIDEND_BITS
DIVIDEND_BITS = 31

# defined once per program (kernels.cl concatenates every kernel); x is evaluated
# several times, which the compiler merges (the expressions are pure index arithmetic)
PRELUDE = """#ifndef DNNR_MAGIC_DIV
#define DNNR_MAGIC_DIV
// x / d and x % d by d's magic (m, s), |x| < 2^31 (magicdiv.py): a multiply, not a division
#define DNNR_DIV(x, m, s) ((int)(((long)(x) * (long)(uint)(m)) >> (31 + (uint)(s))) - \\
  ((int)(x) >> 31))
#define DNNR_REM(x, d, m, s) ((int)(x) - DNNR_DIV(x, m, s) * (d))
// the same for x known >= 0 (`nonnegative`): both factors zero-extended, the product one
// vector unsigned 32x32->64 multiply where PoCL vectorises work-items
#define DNNR_UDIV(x, m, s) ((int)(((ulong)(uint)(x) * (ulong)(uint)(m)) >> (31 + (uint)(s))))
#define DNNR_UREM(x, d, m, s) ((int)(x) - DNNR_UDIV(x, m, s) * (d))
// x >= 0 by d = 2^s (`rewrite`'s powers_of_two: every shape of the version): a shift, a mask
#define DNNR_P2DIV(x, s) ((int)((uint)(x) >> (uint)(s)))
#define DNNR_P2REM(x, d) ((int)((uint)(x) & (uint)((d) - 1)))
#endif
"""


def magic(divisor: int) -> tuple[int, int]:
    """``(m, s)`` with ``floor(x / d) == (x*m) >> (31 + s)`` for ``0 <= x < 2^31``
    (``m`` an unsigned 32-bit number); ``(0, 0)`` for ``d = 0``."""
    if divisor == 0:
        return 0, 0
    if not 0 < divisor < 2**DIVIDEND_BITS:
        raise ValueError(f"magic division: divisor {divisor} outside 1..2^31-1")
    shift = (divisor - 1).bit_length()  # l = ceil(log2 d)
    multiplier = (1 << (DIVIDEND_BITS + shift)) // divisor + 1
    assert multiplier < 1 << 32  # the theorem's bound (module docstring)
    return multiplier, shift


def magic_argument(divisor: int, part: str) -> int:
    """The kernel argument ``part`` (``"m"`` or ``"s"``) of ``divisor``'s magic, as the
    ``int`` the run time passes (``m`` above 2^31 - 1 reinterpreted as negative: the
    kernel casts it back to ``uint``)."""
    multiplier, shift = magic(divisor)
    if part == "s":
        return shift
    return multiplier - (1 << 32) if multiplier >= 1 << 31 else multiplier


# a division, remainder or ``/=`` by a hoisted size argument ``sK``; not a comment
# (``//``, ``/*``) and not a size followed by more name (``s12`` is not ``s1``)
_BY_SIZE = re.compile(r"(?<![/*])([/%])(=?)[ \t]*(s\d+)(?![\w(\[])")
_PARAMETER = re.compile(r"const int (s\d+)\b")
# what may precede a left operand for it to be the whole operand: a binary operator of
# lower precedence than ``/``, an opening bracket, a separator (``*``, ``/``, ``%`` would
# make the left operand longer; ``!``, ``~`` and a cast bind tighter)
_OPERAND_FOLLOWS = set("([,=+-?:<>;{&|^\n")
# a name the kernel declares with a floating-point type (``float t1``, ``__global const
# float* restrict in0``): its quotient by a size is a float division, not an index's
_FLOAT_NAME = re.compile(r"\b(?:float|half|double)\d*\s*\*?\s*(?:restrict\s+)?(\w+)")
# an operand that may not be an int: a float literal or cast, an array element (its
# type is the buffer's), a call of anything but this rewrite's own macros
_NOT_INDEX = re.compile(r"\[|\d\.|\.\d|\b\d+f\b|\((?:float|half|double)|\b(?!DNNR_)\w+\s*\(")


def _left_operand(text: str, end: int) -> int | None:
    """Where the left operand of the operator at ``end`` starts: an identifier or
    number, a parenthesised group, or a call ``f(...)``; None when the operand is
    anything else or the text before it would bind it differently."""
    k = end
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    if k == 0:
        return None
    if text[k - 1] == ")":
        depth, k = 0, k - 1
        while k >= 0:
            depth += {")": 1, "(": -1}.get(text[k], 0)
            if depth == 0:
                break
            k -= 1
        if k < 0:
            return None
        while k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):  # a call's name
            k -= 1
    elif text[k - 1].isalnum() or text[k - 1] == "_":
        while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_."):
            k -= 1
    else:
        return None
    before = k
    while before > 0 and text[before - 1] in " \t":
        before -= 1
    if before > 0 and text[before - 1] not in _OPERAND_FOLLOWS:
        return None
    if before > 1 and text[before - 2:before] in ("++", "--", "->"):
        return None
    return k


# an assignment to a name: a declaration ``int x = e`` or ``x op= e`` (not ``==``, ``<=``)
_ASSIGNMENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*(<<|>>|[-+*/%&|^])?=(?!=)\s*([^;]*)")
_STEP = re.compile(r"(--|\+\+)\s*([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(--|\+\+)")
# a magic call's extra arguments (which may be negative: ``sK_m`` is a uint passed as int)
_MAGIC_ARGS = re.compile(r",\s*(?:s\d+,\s*)?s\d+_m,\s*s\d+_s\)")
_P2_ARGS = re.compile(r",\s*s\d+(?:_s)?\)")  # a shift's or mask's extra argument
_WORK_ITEM = re.compile(r"\bget_(?:global|local|group)_id\(\d\)")


def nonnegative_names(body: str, sizes: set[str]) -> set[str]:
    """The names every assignment in ``body`` (a kernel's text) gives a value that
    `is_nonnegative` over sizes, work-item ids, literals and names of the set itself:
    the largest such set (a name is dropped once one of its assignments is not, until
    none changes), so a recurrence ``r /= s1`` keeps ``r``. Sound for indices below
    2^31 (every one here), where ``+`` and ``*`` of non-negative values stay so."""
    assignments: dict[str, list[str | None]] = {}
    for name, op, expr in _ASSIGNMENT.findall(body):
        assignments.setdefault(name, []).append(expr if op in ("", "+", "*", "/", "%") else None)
    for before, name_a, name_b, after in _STEP.findall(body):
        if "--" in (before, after):
            assignments.setdefault(name_a or name_b, []).append(None)
    names = {n for n in assignments if n not in sizes}
    while True:
        dropped = {n for n in names
                   if any(e is None or not is_nonnegative(e, names | sizes) for e in assignments[n])}
        if not dropped:
            return names
        names -= dropped


def is_nonnegative(expr: str, names: set[str]) -> bool:
    """``expr`` is built of ``names``, work-item ids, integer literals, ``+``, ``*``,
    ``/``, ``%``, parentheses and magic divisions only: never negative."""
    text = _WORK_ITEM.sub("0", _P2_ARGS.sub(")", _MAGIC_ARGS.sub(")", expr)))
    text = re.sub(r"\bDNNR_(?:U|P2)?(?:DIV|REM)\(", "(", text)
    if not re.fullmatch(r"[\w\s()+*/%]*", text):
        return False
    return all(t.isdigit() or t in names for t in re.findall(r"\w+", text))


def size_parameters(source: str) -> list[str]:
    """The hoisted size parameters (``const int sK``) of a kernel's header."""
    return _PARAMETER.findall(source.partition(") {\n")[0])


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def rewrite(source: str, powers_of_two: frozenset[str] = frozenset()) -> tuple[str, list[str]]:
    """``source`` (a kernel after `build.hoist_sizes`) with every division and remainder
    of an int index by a size argument whose operands it can delimit (and can tell
    are not floating-point) done by magic multiplication, the
    magic of each such size as two more trailing parameters ``const int sK_m, sK_s``;
    and those sizes' names in parameter order (empty: ``source`` unchanged).

    A size of ``powers_of_two`` is one at every shape the kernel runs at (the caller
    checked its version's every shape): a non-negative index is divided by a shift by
    its magic ``s`` (``log2 d`` for ``d = 2^s``) and reduced by a mask, as a bound
    compile's literal divisor is (GPT-2's mask kernel at seq 16: 17.4 µs with magic
    products, 12.2 bound)."""
    header, brace, body = source.partition(") {\n")
    sizes = set(size_parameters(source))
    if not brace or not sizes:
        return source, []
    # float names of the kernel only: a helper defined before it (`spelling.helpers`,
    # dnnr_erf's float ``r``) must not hide the kernel's int ``r`` index
    floats = set(_FLOAT_NAME.findall(source[max(source.rfind("__kernel", 0, len(header)), 0):]))
    nonnegative = nonnegative_names(body, sizes) | sizes
    used: list[str] = []
    position = 0
    # one pass left to right: a rewritten division is a new left operand for the next
    # (``((gid)/s2)%s3``), so the text rebuilt so far is what the scan looks back into
    text = body
    while True:
        match = _BY_SIZE.search(text, position)
        if match is None:
            break
        op, assign, size = match.groups()
        start = _left_operand(text, match.start())
        # ``x /= s`` only for a plain variable ``x``
        plain = re.fullmatch(r"\w+", text[start:match.start()].strip()) if start is not None else None
        operand = text[start:match.start()].rstrip() if start is not None else ""
        if size not in sizes or start is None or (assign and plain is None) or \
                _NOT_INDEX.search(operand) or floats & set(re.findall(r"\b[A-Za-z_]\w*", operand)):
            position = match.end()
            continue
        if size not in used:
            used.append(size)
        magic_args = f"{size}_m, {size}_s"
        # an index of work-item ids and sizes (most are) takes the unsigned product:
        # PoCL vectorises it (GPT-2's QKV split at 3x7: 5.4 us signed, 2.2 unsigned)
        sign = "U" if is_nonnegative(operand, nonnegative) else ""
        if sign and size in powers_of_two:
            call = f"DNNR_P2DIV({operand}, {size}_s)" if op == "/" else \
                f"DNNR_P2REM({operand}, {size})"
        else:
            call = f"DNNR_{sign}DIV({operand}, {magic_args})" if op == "/" else \
                f"DNNR_{sign}REM({operand}, {size}, {magic_args})"
        replacement = f"{operand} = {call}" if assign else call
        text = text[:start] + replacement + text[match.end():]
        position = start + len(replacement)
    if not used:
        return source, []
    params = "".join(f", const int {s}_m, const int {s}_s" for s in used)
    return PRELUDE + header + params + brace + text, used
