"""Scalar arithmetic of one verification tier, and DSL scalar expressions in Z3.

A `Domain` says how the elements of every tensor are modelled: ``real`` (exact
reals), ``int`` (unbounded non-negative integers, the exact tier of integer
rules), ``bf16``/``fp16``/``fp32`` (IEEE, round-to-nearest-even) or ``bv8`` ...
``bv32`` (wrapping unsigned integers). Transcendental functions have no exact Z3
theory: they are uninterpreted functions whose axioms are instantiated on the
terms that actually occur (DESIGN §4: quantified axioms made Z3 say unknown).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import z3

FLOAT_FORMATS = {"bf16": (8, 8), "fp16": (5, 11), "fp32": (8, 24)}
NUMPY_DTYPE = {"real": "float64", "int": "int64", "bf16": "float32", "fp16": "float16",
               "fp32": "float32", "bv8": "uint8", "bv16": "uint16", "bv32": "uint32"}


class Unsupported(Exception):
    """The encoding cannot express this rule (the verdict is `unknown`)."""


@dataclass
class Domain:
    """The element model of one tier plus the function terms created so far."""

    name: str
    terms: list[tuple[str, tuple[z3.ExprRef, ...], z3.ExprRef]] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set)

    # ---------------------------------------------------------------- sorts
    @property
    def is_float(self) -> bool:
        return self.name in FLOAT_FORMATS

    @property
    def is_bv(self) -> bool:
        return self.name.startswith("bv")

    @property
    def is_integer(self) -> bool:
        return self.name == "int" or self.is_bv

    @property
    def width(self) -> int:
        return int(self.name[2:]) if self.is_bv else 64

    @property
    def sort(self) -> z3.SortRef:
        if self.name == "real":
            return z3.RealSort()
        if self.name == "int":
            return z3.IntSort()
        if self.is_float:
            return z3.FPSort(*FLOAT_FORMATS[self.name])
        return z3.BitVecSort(self.width)

    @property
    def dtype(self) -> str:
        return NUMPY_DTYPE[self.name]

    def const(self, value: float | int) -> z3.ExprRef:
        if not self.is_float and isinstance(value, float) and not math.isfinite(value):
            raise Unsupported(f"{value} has no exact value in the {self.name} tier")
        if self.name == "real":
            return z3.RealVal(value)
        if self.name == "int":
            return z3.IntVal(int(value))
        if self.is_float:
            return z3.FPVal(float(value), self.sort)
        return z3.BitVecVal(int(value) % (1 << self.width), self.width)

    def fresh(self, name: str) -> z3.ExprRef:
        return z3.Const(name, self.sort)

    def element_facts(self, term: z3.ExprRef) -> list[z3.BoolRef]:
        """What every element satisfies: integer tensors are unsigned."""
        return [term >= 0] if self.name == "int" else []

    def equal(self, lhs: z3.ExprRef, rhs: z3.ExprRef) -> z3.BoolRef:
        """Bit-exact equality in IEEE tiers (all NaNs alike, -0 != +0)."""
        if self.is_float:
            return z3.Or(z3.And(z3.fpIsNaN(lhs), z3.fpIsNaN(rhs)), lhs == rhs)
        return lhs == rhs

    # ---------------------------------------------------------------- arithmetic
    def binop(self, op: str, a: z3.ExprRef | bool, b: z3.ExprRef | bool) -> z3.ExprRef:
        if op == "and":
            return z3.And(a, b)
        if op == "or":
            return z3.Or(a, b)
        if self.is_float:
            return self._fp_binop(op, a, b)
        if self.is_bv:
            table = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                     "/": lambda: z3.UDiv(a, b), "//": lambda: z3.UDiv(a, b),
                     "%": lambda: z3.URem(a, b), "<": lambda: z3.ULT(a, b),
                     "<=": lambda: z3.ULE(a, b), ">": lambda: z3.UGT(a, b),
                     ">=": lambda: z3.UGE(a, b)}
        else:
            div = (lambda: self._real_divide(a, b)) if self.name == "real" else (lambda: a / b)
            table = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                     "/": div, "//": lambda: self._floordiv(a, b), "%": lambda: a % b,
                     "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b,
                     ">=": lambda: a >= b}
        table["=="] = lambda: a == b
        table["!="] = lambda: a != b
        if op == "**":
            return self._power(a, b)
        return table[op]()

    def _real_divide(self, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
        """``a * inv(b)``, with ``b * inv(b) = 1`` where ``b != 0`` (see `_instances`):
        Z3's own division made an induction through a division by sqrt succeed or
        time out depending on its search order; as a product the step is linear in
        the inverse and proves in seconds. A literal divisor stays a division (linear)."""
        if z3.is_rational_value(z3.simplify(b)):
            return a / b
        return a * self.apply("inv", (b,))

    def _floordiv(self, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
        if self.name == "int":
            return a / b
        return z3.ToReal(z3.ToInt(a / b))

    def _fp_binop(self, op: str, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
        rne = z3.RNE()
        table = {"+": lambda: z3.fpAdd(rne, a, b), "-": lambda: z3.fpSub(rne, a, b),
                 "*": lambda: z3.fpMul(rne, a, b), "/": lambda: z3.fpDiv(rne, a, b),
                 "==": lambda: z3.fpEQ(a, b), "!=": lambda: z3.Not(z3.fpEQ(a, b)),
                 "<": lambda: z3.fpLT(a, b), "<=": lambda: z3.fpLEQ(a, b),
                 ">": lambda: z3.fpGT(a, b), ">=": lambda: z3.fpGEQ(a, b)}
        if op == "**":
            return self._power(a, b)
        if op not in table:
            return self.apply(op, (a, b))
        return table[op]()

    def _power(self, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
        exponent = _literal_int(b)
        if exponent == 0:
            return self.const(1)
        if exponent is not None and 0 < exponent <= 8:
            result = a  # a * a * ..., never 1 * a (a needless rounding step for IEEE)
            for _ in range(exponent - 1):
                result = self.binop("*", result, a)
            return result
        return self.apply("pow", (a, b))

    def neg(self, a: z3.ExprRef) -> z3.ExprRef:
        return z3.fpNeg(a) if self.is_float else -a

    # ---------------------------------------------------------------- functions
    def call(self, func: str, args: tuple[z3.ExprRef, ...]) -> z3.ExprRef:
        if func == "abs":
            (x,) = args
            return z3.fpAbs(x) if self.is_float else z3.If(self.binop("<", x, self.const(0)),
                                                            self.neg(x), x)
        if func in ("max", "min"):
            a, b = args
            if self.is_float:  # as NumPy: NaN propagates, ties (+-0) give b
                pick = z3.fpGT(a, b) if func == "max" else z3.fpLT(a, b)
                return z3.If(z3.fpIsNaN(a), a, z3.If(z3.fpIsNaN(b), b, z3.If(pick, a, b)))
            pick_a = self.binop(">=" if func == "max" else "<=", a, b)
            return z3.If(pick_a, a, b)
        if func in ("where", "select"):
            cond, a, b = args
            return z3.If(cond, a, b)
        if func == "sign":
            (x,) = args
            zero = self.const(0)
            return z3.If(self.binop(">", x, zero), self.const(1),
                         z3.If(self.binop("<", x, zero), self.const(-1), zero))
        if func == "sqrt" and self.is_float:
            return z3.fpSqrt(z3.RNE(), args[0])
        if func in ("floor", "ceil") and self.name == "real":
            # exact over the reals: floor is Z3's to_int (the largest integer <= x)
            x = args[0]
            return (z3.ToReal(z3.ToInt(x)) if func == "floor"
                    else -z3.ToReal(z3.ToInt(-x)))
        if func in ("floor", "ceil") and self.name == "int":
            return args[0]
        return self.apply(func, args)

    def apply(self, func: str, args: tuple[z3.ExprRef, ...]) -> z3.ExprRef:
        """An uninterpreted function application, remembered for axiom instantiation."""
        fn = z3.Function(f"{func}_{self.name}", *([self.sort] * len(args)), self.sort)
        term = fn(*args)
        if term.get_id() not in self._seen:
            self._seen.add(term.get_id())
            self.terms.append((func, args, term))
        return term

    def axioms(self) -> list[z3.BoolRef]:
        """Facts about the transcendental terms that occur, instantiated on them (a few
        rounds, since an instance such as exp(a+b) = exp(a)*exp(b) creates terms)."""
        if self.is_float or self.is_bv:
            return []
        facts: list[z3.BoolRef] = []
        done = 0
        for _round in range(4):
            todo = self.terms[done:]
            done = len(self.terms)
            if not todo:
                break
            for func, args, term in todo:
                facts.extend(self._instances(func, args, term))
        # exp(a) * exp(-a) = 1 for each pair of exponentials whose arguments cancel
        # (sigmoid through tanh, exp(-x) * exp(x)). Every pair's exp(a + b) made the
        # shift invariance of Softmax run out of budget: only the cancelling ones.
        exps = [(args[0], term) for f, args, term in self.terms if f == "exp"]
        for (a, ea), (b, eb) in itertools.combinations(exps, 2):
            if z3.is_rational_value(total := z3.simplify(a + b)) and total.as_fraction() == 0:
                facts.append(ea * eb == self.const(1))
        # one more round of instances for the terms the last round created (the fold of
        # a BatchNorm into a Conv needs the facts of its innermost inverse)
        for func, args, term in self.terms[done:]:
            facts.extend(self._instances(func, args, term))
        # exp and log are injective (log on positives): instantiated on each pair met,
        # so that log(S) = log(T) for two sums of exponentials gives S = T
        for func in ("exp", "log"):
            terms = [(args[0], term) for f, args, term in self.terms if f == func]
            for (a, fa), (b, fb) in itertools.combinations(terms, 2):
                domain = z3.And(a > 0, b > 0) if func == "log" else z3.BoolVal(True)
                facts.append(z3.Implies(z3.And(domain, fa == fb), a == b))
        return facts

    def _instances(self, func: str, args: tuple[z3.ExprRef, ...],
                   term: z3.ExprRef) -> list[z3.BoolRef]:
        facts: list[z3.BoolRef] = []
        zero, one = self.const(0), self.const(1)
        x = args[0]
        if len(args) == 1 and z3.is_app_of(x, z3.Z3_OP_ITE):
            # f(if c then a else b) = if c then f(a) else f(b): reductions unroll to Ifs
            return [term == z3.If(x.arg(0), self.apply(func, (x.arg(1),)),
                                  self.apply(func, (x.arg(2),)))]
        if func == "exp":
            facts.append(term > 0)
            facts.append(z3.Implies(x == 0, term == one))
            if z3.is_add(x):
                rest = x.arg(1) if x.num_args() == 2 else z3.Sum(*x.children()[1:])
                facts.append(term == self.apply("exp", (x.arg(0),)) * self.apply("exp", (rest,)))
            if z3.is_app(x) and x.decl().name() == f"log_{self.name}":
                facts.append(z3.Implies(x.arg(0) > 0, term == x.arg(0)))
        elif func == "log":
            facts.append(z3.Implies(x == 1, term == zero))
            if z3.is_app(x) and x.decl().name() == f"exp_{self.name}":
                facts.append(term == x.arg(0))
            if z3.is_mul(x) and x.num_args() == 2:
                a, b = x.arg(0), x.arg(1)
                facts.append(z3.Implies(z3.And(a > 0, b > 0), term == self.apply(
                    "log", (a,)) + self.apply("log", (b,))))
            if z3.is_app(x) and x.decl().name() == f"inv_{self.name}":  # log(1/b) = -log(b)
                b = x.arg(0)
                facts.append(z3.Implies(b > 0, term == -self.apply("log", (b,))))
        elif func == "sqrt":
            facts.append(z3.Implies(x >= 0, z3.And(term >= 0, term * term == x)))
        elif func == "inv":  # the inverse of a real division (`_real_divide`)
            facts.append(z3.Implies(x != 0, x * term == one))
            facts.append(z3.Implies(x > 0, term > 0))
        elif func in ("tanh", "erf"):
            facts.append(z3.And(term > -1, term < 1))
            facts.append(z3.Implies(x == 0, term == zero))
            if func == "tanh":  # tanh(x) = (exp(2x) - 1) / (exp(2x) + 1)
                e2 = self.apply("exp", (2 * x,))
                facts.append(term * (e2 + one) == e2 - one)
        return facts


def _literal_int(term: z3.ExprRef) -> int | None:
    if isinstance(term, int):
        return term
    simplified = z3.simplify(term)
    if z3.is_int_value(simplified):
        return simplified.as_long()
    if z3.is_rational_value(simplified) and simplified.denominator_as_long() == 1:
        return simplified.numerator_as_long()
    return None


_UF_PREDICATES = ("==", "!=", "<", "<=", ">", ">=")


class AbstractDomain(Domain):
    """The IEEE tier ``concrete`` with every scalar operation uninterpreted: elements
    of an uninterpreted sort, ``+ - * /``, functions and comparisons free functions,
    constants free constants named by their IEEE value. It only ever *proves*: a
    rule whose two sides are equal here are equal for every interpretation of the
    operations, so in particular for IEEE arithmetic (both sides are built with the
    same term structure as in the ``concrete`` tier: `+0.0 + x` for sums included).
    Index maps (Reshape, broadcasting, Transpose) stay exact integers, so a rule that
    moves an operator to a permuted index is proved by congruence alone, without
    bit-blasting. A failure here means nothing; the caller falls back to ``concrete``."""

    def __init__(self, concrete: str) -> None:
        super().__init__(f"uf_{concrete}")
        self.concrete = concrete
        self._sort = z3.DeclareSort("Elem")

    @property
    def is_float(self) -> bool:
        return False

    @property
    def mirrors_float(self) -> bool:
        return True

    @property
    def sort(self) -> z3.SortRef:
        return self._sort

    @property
    def dtype(self) -> str:
        return NUMPY_DTYPE[self.concrete]

    def const(self, value: float | int) -> z3.ExprRef:
        return z3.Const(f"const_{float(value)!r}", self._sort)

    def of_real(self, value: z3.ExprRef) -> z3.ExprRef:
        real = value if value.sort() == z3.RealSort() else z3.ToReal(value)
        return z3.Function("elem_of_real", z3.RealSort(), self._sort)(real)

    def equal(self, lhs: z3.ExprRef, rhs: z3.ExprRef) -> z3.BoolRef:
        return lhs == rhs

    def binop(self, op: str, a: z3.ExprRef | bool, b: z3.ExprRef | bool) -> z3.ExprRef:
        if op in ("and", "or"):
            return super().binop(op, a, b)
        if op == "**":
            return self._power(a, b)
        if op == "!=":
            return z3.Not(self.binop("==", a, b))
        if op in _UF_PREDICATES:
            pred = z3.Function(f"pred{op}", self._sort, self._sort, z3.BoolSort())
            return pred(a, b)
        return self.apply(f"op{op}", (a, b))

    def _power(self, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
        exponent = _literal_int(b)
        if exponent is not None and not (0 <= exponent <= 8):
            raise Unsupported("power with a large literal exponent")
        if exponent is None and b.sort() != self._sort:
            raise Unsupported("power with a symbolic integer exponent")
        return super()._power(a, b)

    def neg(self, a: z3.ExprRef) -> z3.ExprRef:
        return self.apply("neg", (a,))

    def call(self, func: str, args: tuple[z3.ExprRef, ...]) -> z3.ExprRef:
        if func in ("where", "select"):
            cond, a, b = args
            return z3.If(cond, a, b)
        return self.apply(func, args)

    def axioms(self) -> list[z3.BoolRef]:
        return []
