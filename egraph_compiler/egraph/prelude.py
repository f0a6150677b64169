"""The fixed part of every egglog program: sorts, leaves, fact tables, loader rows.

Leaves of sort ``T``: ``(Input "x")`` graph inputs, ``(Const h)`` constants held
in a Python table, ``(ScalarConst v dtype)`` / ``(VecConst l)`` constants built by
rules, ``(Absent)`` a missing optional input, ``(Out t k)`` output ``k >= 1`` of
the multi-output op whose output 0 is ``t``. ``(V id)`` / ``(LV id)`` are loader
handles for graph values and variadic input lists; extraction ignores them.

Facts (conservative: an absent row means "unknown", never "false"):
``shape`` (IVec; symbolic dims are negative ids), ``dtype``, ``splat`` (the one
value of an all-equal constant), ``ivalue`` (value of a small int constant),
relations ``is_const``, ``nonneg``, ``positive``, ``nonzero``. ``Prov`` records
which rule built a term; ``Fired`` each e-class a rule rewrote (its distinct
applications, however often egglog re-matches them).
"""

from __future__ import annotations

SORTS = """
(sort IVec (Vec i64))
(sort FVec (Vec f64))
(sort SVec (Vec String))
(sort IFn (UnstableFn (i64) i64))
(sort T)
(sort TList)
(constructor TNil () TList)
(constructor TCons (T TList) TList)
(constructor V (i64) T)
(constructor LV (i64) TList)
(constructor Input (String) T)
(constructor Const (i64) T)
(constructor Absent () T)
(constructor ScalarConst (f64 String) T)
(constructor VecConst (IVec) T)
(constructor Out (T i64) T)
(function IV (i64) IVec :no-merge)
(function FV (i64) FVec :no-merge)
(function SV (i64) SVec :no-merge)
(function STR (i64) String :no-merge)
(function OnnxDtype (i64) String :no-merge)
(function shape (T) IVec :merge old)
(function dtype (T) String :merge old)
(function splat (T) f64 :merge old)
(function ivalue (T) IVec :merge old)
(function lshape (TList) IVec :merge old)
(relation is_const (T))
(relation nonneg (T))
(relation positive (T))
(relation nonzero (T))
(relation Prov (T String))
(relation Fired (String T))
(relation Fresh (T))
(relation InputRow (i64 i64))
(relation ConstRow (i64 i64))
(relation ListRow (i64 i64 i64))
(relation OutRow (i64 i64 i64))
(relation ShapeRow (i64 i64))
(relation DtypeRow (i64 i64))
(relation SplatRow (i64 f64))
(relation IValueRow (i64 i64))
(relation FactRow (i64 i64))
(ruleset load)
(ruleset analysis)
"""

LOAD_RULES = """
(union (V -1) (Absent))
(union (LV -1) (TNil))
(rule ((InputRow v s) (= n (STR s))) ((union (V v) (Input n))) :ruleset load)
(rule ((ConstRow v c)) ((union (V v) (Const c))) :ruleset load)
(rule ((ListRow l h t)) ((union (LV l) (TCons (V h) (LV t)))) :ruleset load)
(rule ((OutRow v n k)) ((union (V v) (Out (V n) k))) :ruleset load)
(rule ((ShapeRow v s) (= x (IV s))) ((set (shape (V v)) x)) :ruleset load)
(rule ((DtypeRow v s) (= x (STR s))) ((set (dtype (V v)) x)) :ruleset load)
(rule ((SplatRow v x)) ((set (splat (V v)) x)) :ruleset load)
(rule ((IValueRow v s) (= x (IV s))) ((set (ivalue (V v)) x)) :ruleset load)
(rule ((FactRow v 0)) ((is_const (V v))) :ruleset load)
(rule ((FactRow v 1)) ((nonneg (V v))) :ruleset load)
(rule ((FactRow v 2)) ((positive (V v))) :ruleset load)
(rule ((FactRow v 3)) ((nonzero (V v))) :ruleset load)
"""

# Facts of the leaves that rules build, and sign facts that follow from others.
LEAF_FACTS = """
(is_const (Absent))
(rule ((= c (Const h))) ((is_const c)) :ruleset analysis)
(rule ((= c (ScalarConst v d)))
      ((set (shape c) (vec-empty)) (set (dtype c) d) (set (splat c) v) (is_const c))
      :ruleset analysis)
(rule ((= c (VecConst l)))
      ((set (shape c) (vec-of (vec-length l))) (set (dtype c) "int64") (set (ivalue c) l)
       (is_const c))
      :ruleset analysis)
(rule ((= v (splat c)) (> v 0.0)) ((positive c)) :ruleset analysis)
(rule ((= v (splat c)) (>= v 0.0)) ((nonneg c)) :ruleset analysis)
(rule ((= v (splat c)) (!= v 0.0)) ((nonzero c)) :ruleset analysis)
(rule ((positive c)) ((nonneg c) (nonzero c)) :ruleset analysis)
(rule ((= l (TNil))) ((set (lshape l) (vec-empty))) :ruleset analysis)
(rule ((= l (TCons h t)) (= sh (shape h)) (= st (lshape t)))
      ((set (lshape l) (vec-append (vec-of (vec-length sh)) sh st))) :ruleset analysis)
"""
