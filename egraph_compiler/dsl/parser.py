"""Text of one `.dnnr` file -> `SourceFile` AST, every node with a `Span`.

The grammar is `grammar/dnnr.lark` (LALR, contextual lexer). A syntax error does not
stop the file: each item (from a line starting with an item keyword to the next) is
then parsed on its own, so every broken item is reported and the others are kept.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from functools import cache, partialmethod
from pathlib import Path
from typing import Any

import lark
from lark import Lark, Token, Tree, UnexpectedInput
from lark.exceptions import UnexpectedEOF
from lark.tree import Meta

from egraph_compiler.dsl import ast, load_budget
from egraph_compiler.dsl.diagnostics import Diagnostic, DslParseError, SourceLines
from egraph_compiler.dsl.parse_errors import KeywordBoundary, describe_parse_error
from egraph_compiler.dsl.shipped import grammar_path

ITEM_KEYWORDS = ("use", "op", "ruleset", "rule", "fuse", "limits", "schedule")
_ITEM_START = re.compile(r"^[ \t]*(?:" + "|".join(ITEM_KEYWORDS) + r")\b", re.MULTILINE)
_MAX_PARSE_ERRORS = 50


@dataclass
class ParsedFile:
    """One file's AST, its syntax errors, and names declared inside items that failed to
    parse (so the checker does not also call them unknown)."""

    source: ast.SourceFile
    errors: list[Diagnostic] = field(default_factory=list)
    broken_ops: set[str] = field(default_factory=set)
    broken_rulesets: set[str] = field(default_factory=set)


@cache
def lark_parser() -> Lark:
    grammar = grammar_path().read_text(encoding="utf-8")
    keywords = set(re.findall(r'"([a-z]+)"', grammar))
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=True,
        postlex=KeywordBoundary({keyword.upper() for keyword in keywords}),
        # the LALR tables, from a file keyed by the grammar's hash (lark rebuilds a
        # missing or damaged one): ~0.5 s off every process that parses rules
        cache=_tables_cache(grammar),
    )


def _tables_cache(grammar: str) -> str | bool:
    """Where lark keeps the LALR tables: the user's cache folder (a pickle in the shared
    /tmp, lark's default, could be planted by another user), named by the grammar's
    hash so checkouts with different grammars do not overwrite each other; no cache
    when that folder cannot be made."""
    env = os.environ.get("DNNR_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    key = hashlib.sha256(f"{grammar}\n{lark.__version__}\n{sys.version_info[:2]}".encode()).hexdigest()[:32]
    try:
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
        folder = (Path(env) if env else base / "dnnr") / "parser"
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home folder, or a read-only one
        return False
    return str(folder / f"dnnr-{key}.lark")


def default_ruleset(file: str) -> str:
    """Ruleset of the rules before any ``ruleset`` line: the file stem as a NAME."""
    name = re.sub(r"\W", "_", Path(file).stem.lower())
    return name if re.match(r"[a-z_]", name) else "_" + name


# Parses are pure functions of (file, text): a file `use`d by many loads in one
# process (ops files, the test suite) is parsed once. Diagnostics quote their
# source line themselves, so a cached result does not depend on `lines`.
_CACHE: dict[tuple[str, str], ParsedFile] = {}
_CACHE_SIZE = 64


def parse_file(text: str, file: str, lines: SourceLines) -> ParsedFile:
    """Parse ``text`` (the contents of ``file``); never raises for bad input."""
    key = (file, text)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _parse_file(text, file, lines)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = cached
    return cached


def _parse_file(text: str, file: str, lines: SourceLines) -> ParsedFile:
    result = ParsedFile(ast.SourceFile(file))
    try:
        trees = [lark_parser().parse(text)]
    except UnexpectedInput as whole_file_error:
        # Recover: parse each item (a chunk from one item-start line to the next) on its
        # own, padded with newlines so positions stay those of the file. Two parses in
        # all, however many items are broken.
        trees = []
        for start, end in _item_chunks(text):
            padded = "\n" * text.count("\n", 0, start) + text[start:end]
            try:
                trees.append(lark_parser().parse(padded))
            except UnexpectedInput as error:
                result.errors.append(_syntax_diagnostic(error, padded, file, lines))
                broken = text[start:end]
                result.broken_ops.update(re.findall(r"\bop\s+([A-Z]\w*)", broken))
                result.broken_rulesets.update(re.findall(r"\bruleset\s+([a-z_]\w*)", broken))
                if len(result.errors) >= _MAX_PARSE_ERRORS:
                    break
        if not result.errors:  # an item split by a keyword line; report the real error
            result.errors.append(_syntax_diagnostic(whole_file_error, text, file, lines))
            return result
    items: list[ast.Item] = []
    to_ast = _ToAst(file)
    try:
        for tree in trees:
            for child in tree.children:  # item by item, so a compile's deadline binds here too
                load_budget.check()
                items.append(to_ast.transform(child))
    except RecursionError:  # lark's transformer recurses once per nesting level
        span = ast.Span(file, 1, 1, 1, 2)
        result.errors.append(
            lines.diagnostic(DslParseError, "expressions are nested too deeply", span)
        )
        return result
    items = _assign_rulesets(items, file)
    comments = _comment_tokens(text)
    result.source = ast.SourceFile(file, _attach_comments(items, comments, text, file))
    return result


def limits_blocks(text: str, file: str) -> list[ast.LimitsDecl]:
    """The ``limits`` blocks of ``text``, each parsed on its own before the whole file
    (`load_budget`: a compile's time limit must bind on the parse of the rules that
    set it). A block that does not parse is skipped here; the full parse reports it."""
    blocks = []
    for start, end in _item_chunks(text):
        chunk = text[start:end]
        if not re.match(r"\s*limits\b", chunk):
            continue
        padded = "\n" * text.count("\n", 0, start) + chunk  # positions stay the file's
        try:
            tree = lark_parser().parse(padded)
        except UnexpectedInput:
            continue
        blocks += [item for item in _ToAst(file).transform(tree) if isinstance(item, ast.LimitsDecl)]
    return blocks


def _item_chunks(text: str) -> list[tuple[int, int]]:
    """[start, end) of the text before the first item line and of each item line onwards."""
    starts = [m.start() for m in _ITEM_START.finditer(text)]
    bounds = [0, *[s for s in starts if s > 0], len(text)]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip()]


def _assign_rulesets(items: list[ast.Item], file: str) -> list[ast.Item]:
    """A rule belongs to the ruleset of the last ``ruleset`` line above it (else the stem)."""
    ruleset = default_ruleset(file)
    assigned: list[ast.Item] = []
    for item in items:
        if isinstance(item, ast.RulesetDecl):
            ruleset = item.name
        elif isinstance(item, ast.Rule):
            item = _replace_rule(item, ruleset=ruleset)
        assigned.append(item)
    return assigned


def _comment_tokens(text: str) -> list[Token]:
    """`#` comments outside strings, as tokens with positions."""
    found = []
    line, counted = 1, 0  # lines counted up to `counted`: counting from 0 each time was quadratic
    for match in re.finditer(r'"[^"\n]*"|#[^\n]*', text):
        if match.group().startswith("#"):
            start = match.start()
            line += text.count("\n", counted, start)
            counted = start
            col = start - (text.rfind("\n", 0, start) + 1) + 1
            tok = Token("COMMENT", match.group().rstrip(), start, line, col)
            found.append(tok)
    return found


def _syntax_diagnostic(
    error: UnexpectedInput, text: str, file: str, lines: SourceLines
) -> Diagnostic:
    message, hint = describe_parse_error(error, text, lark_parser())
    line = getattr(error, "line", None)
    col = getattr(error, "column", None)
    token = getattr(error, "token", None)
    at_end = isinstance(error, UnexpectedEOF) or getattr(token, "type", None) == "$END"
    if at_end and isinstance(getattr(token, "end_line", None), int) and token.end_line >= 1:
        # lark's end token borrows the last real token's position: point just after it.
        line, col = token.end_line, token.end_column
    elif at_end or not isinstance(line, int) or line < 1 or not isinstance(col, int) or col < 1:
        body = re.sub(r"#[^\n]*", "", text).rstrip()  # not at trailing comments or blanks
        line = body.count("\n") + 1
        col = len(body) - (body.rfind("\n") + 1) + 1
    width = 1
    if isinstance(token, Token) and token.type != "$END" and token.value:
        width = len(str(token.value).split("\n")[0]) or 1
    span = ast.Span(file, line, col, line, col + width)
    return lines.diagnostic(DslParseError, message, span, hint)


# ---------------------------------------------------------------- comments and docs


def _comment_text(token: Token) -> str:
    body = str(token.value)[1:]
    return (body[1:] if body.startswith(" ") else body).rstrip()


def _attach_comments(
    items: list[ast.Item], comments: list[Token], text: str, file: str
) -> tuple[ast.Item, ...]:
    """Turn comments into rule docs (own-line block directly above a rule) or Comment items."""
    source_lines = text.splitlines()
    # items are in source order and do not overlap, so their start and end lines
    # are sorted: each comment finds its item by bisection (a scan per comment was
    # quadratic: 10,000 documented rules took 30 s here)
    starts = [item.span.line for item in items]
    ends = [(item.span.end_line, item.span.end_col) for item in items]

    def own_line(tok: Token) -> bool:
        return source_lines[tok.line - 1][: tok.column - 1].strip() == ""

    def enclosing(tok: Token) -> ast.Item | None:
        """The first item whose lines include the comment's line."""
        first = bisect_left(ends, (tok.line, 0))  # the first item ending on or after it
        if first < len(items) and starts[first] <= tok.line:
            return items[first]
        return None

    def before(tok: Token) -> ast.Item | None:
        """The item that ends last on or above the comment's line."""
        last = bisect_right(ends, (tok.line, float("inf"))) - 1
        return items[last] if last >= 0 else None

    keyed: list[tuple[tuple[int, ...], ast.Item]] = []
    blocks: list[list[Token]] = []
    for tok in comments:
        owner = enclosing(tok)
        if owner is not None or not own_line(tok):
            if owner is None:  # a trailing comment after the last item on its line
                owner = before(tok)
            span = ast.Span(file, tok.line, tok.column, tok.line, tok.column + len(tok.value))
            anchor = owner.span if owner is not None else span
            key = (anchor.line, anchor.col, 1, tok.line, tok.column)
            keyed.append((key, ast.Comment((_comment_text(tok),), span)))
        elif blocks and blocks[-1][-1].line == tok.line - 1:
            blocks[-1].append(tok)
        else:
            blocks.append([tok])

    rule_by_line = {i.span.line: i for i in items if isinstance(i, ast.Rule)}
    docs: dict[int, str] = {}
    for block in blocks:
        first, last = block[0], block[-1]
        texts = tuple(_comment_text(t) for t in block)
        rule = rule_by_line.get(last.line + 1)
        if rule is not None:
            docs[rule.span.line] = "\n".join(texts)
            continue
        span = ast.Span(file, first.line, first.column, last.line, last.column + len(last.value))
        keyed.append(((first.line, first.column, 0), ast.Comment(texts, span)))

    for item in items:
        if isinstance(item, ast.Rule) and item.span.line in docs:
            item = _replace_rule(item, doc=docs[item.span.line])
        keyed.append(((item.span.line, item.span.col, 0), item))
    keyed.sort(key=lambda pair: pair[0])
    return tuple(item for _, item in keyed)


def _replace_rule(rule: ast.Rule, **changes: Any) -> ast.Rule:
    return replace(rule, **changes)


# ---------------------------------------------------------------- tree -> AST


@dataclass(frozen=True, slots=True)
class _AttrArg:
    name: str
    value: ast.Expr
    name_span: ast.Span


def _number(text: str) -> int | float:
    if text == "inf":
        return float("inf")
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)


def _join(a: ast.Span, b: ast.Span) -> ast.Span:
    return ast.Span(a.file, a.line, a.col, b.end_line, b.end_col)


class _ToAst:
    """lark parse tree -> `ast` nodes (rulesets are assigned afterwards, in source order).

    Each method takes the node's ``meta`` (positions) and its converted children. A
    walk of our own rather than a ``lark.Transformer`` with ``v_args(meta=True)``:
    that one builds a wrapper (``functools.update_wrapper``) on every node visited,
    a quarter of the time of a large parse."""

    def __init__(self, file: str) -> None:
        self.file = file
        self._methods: dict[str, Any] = {}

    def transform(self, tree: Tree) -> Any:
        children = [self.transform(c) if isinstance(c, Tree) else c for c in tree.children]
        method = self._methods.get(tree.data)
        if method is None:
            method = self._methods[tree.data] = getattr(self, str(tree.data), None) or self._keep
        return method(tree.meta, children)

    @staticmethod
    def _keep(meta: Meta, children: list[Any]) -> Any:
        raise AssertionError(f"no AST conversion for {children!r}")  # every grammar rule has one

    # -- helpers
    def _span(self, meta: Meta) -> ast.Span:
        if getattr(meta, "empty", True):
            return ast.Span(self.file, 1, 1, 1, 1)
        return ast.Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, tok: Token) -> ast.Span:
        return ast.Span(self.file, tok.line, tok.column, tok.end_line, tok.end_column)

    def _children(self, meta: Meta, children: list[Any]) -> Any:
        return children

    def _first(self, meta: Meta, children: list[Any]) -> Any:
        return children[0]

    # -- items (a list of children, or the one child, stands for itself)
    start = params = attr_decls = name_list = pargs = _children
    outputs_dtype = requires = guard = _first

    def use(self, meta: Meta, children: list[Any]) -> Any:
        return ast.UseDecl(str(children[0])[1:-1], self._span(meta))

    def op_decl(self, meta: Meta, children: list[Any]) -> Any:
        name, params, attrs, outputs, mapping, layout, dynamism, semantics, requires, *clauses = children
        facts: dict[str, Any] = dict(clauses)
        dtype = outputs if isinstance(outputs, tuple) else None
        sem_expr = semantics[1] if semantics and semantics[0] == "expr" else None
        builtin = semantics[1] if semantics and semantics[0] == "builtin" else None
        shape, shape_span = facts.get("shape"), self._span(meta)
        if isinstance(shape, tuple):  # `shape builtin NAME`, with the span of NAME
            shape, shape_span = shape
        return ast.OpDecl(
            name=str(name),
            params=tuple(params or ()),
            attrs=tuple(attrs or ()),
            mapping=str(mapping),
            layout=str(layout),
            dynamism=str(dynamism),
            semantics=sem_expr,
            builtin=builtin,
            requires=requires,
            outputs=outputs if isinstance(outputs, int) else 1,
            span=self._span(meta),
            name_span=self._tok(name),
            class_spans=(self._tok(mapping), self._tok(layout), self._tok(dynamism)),
            dtype=dtype,
            facts=facts.get("facts", ()),
            shape=shape,
            cost=facts.get("cost"),
            anchor=facts.get("anchor"),
            shape_span=shape_span,
        )

    def param_plain(self, meta: Meta, children: list[Any], **kind: bool) -> Any:
        return ast.Param(str(children[0]), span=self._span(meta), **kind)

    param_optional = partialmethod(param_plain, optional=True)
    param_variadic = partialmethod(param_plain, variadic=True)

    def attr_decl(self, meta: Meta, children: list[Any]) -> Any:
        name, type_name, default = children
        return ast.AttrDecl(
            str(name),
            str(type_name),
            default,
            self._span(meta),
            self._tok(type_name),
        )

    def outputs_count(self, meta: Meta, children: list[Any]) -> Any:
        return int(children[0])

    def dtype_spec(self, meta: Meta, children: list[Any]) -> Any:
        head, *args = [str(c) for c in children if c is not None]
        if not args:
            return ("fixed", head)
        return (head, *args)  # dtype(to) -> ("dtype", "to"); like(x, uint8) -> ("like", "x", "uint8")

    def clause_facts(self, meta: Meta, children: list[Any]) -> Any:
        return ("facts", tuple(str(c) for c in children))

    def clause_shape(self, meta: Meta, children: list[Any]) -> Any:
        return ("shape", str(children[0]))

    def clause_shape_builtin(self, meta: Meta, children: list[Any]) -> Any:
        return ("shape", (f"builtin {children[0]}", self._tok(children[0])))

    def clause_cost(self, meta: Meta, children: list[Any]) -> Any:
        kind, amount = children
        return ("cost", (str(kind), float(amount) if amount is not None else 0.0))

    def clause_anchor(self, meta: Meta, children: list[Any]) -> Any:
        return ("anchor", str(children[0]))

    def sem_expr(self, meta: Meta, children: list[Any]) -> Any:
        return ("expr", children[0])

    def sem_builtin(self, meta: Meta, children: list[Any]) -> Any:
        return ("builtin", str(children[0]))

    def ruleset_decl(self, meta: Meta, children: list[Any]) -> Any:
        return ast.RulesetDecl(str(children[0]), self._span(meta))

    def rule(self, meta: Meta, children: list[Any]) -> Any:
        name, flags, lhs, arrow, rhs, guard = children
        flag_spans = tuple(flags or ())
        return ast.Rule(
            name=str(name),
            lhs=lhs,
            rhs=rhs,
            guard=guard,
            bidirectional=str(arrow) == "<=>",
            flags=frozenset(f for f, _ in flag_spans),
            span=self._span(meta),
            name_span=self._tok(name),
            flag_spans=flag_spans,
        )

    def flags(self, meta: Meta, children: list[Any]) -> Any:
        return [(str(tok), self._tok(tok)) for tok in children]

    def fuse(self, meta: Meta, children: list[Any]) -> Any:
        first, second, result, verdict = children
        return ast.FuseEntry(
            str(first),
            str(second),
            None if result is None else str(result),
            str(verdict),
            self._span(meta),
            (
                self._tok(first),
                self._tok(second),
                ast.NO_SPAN if result is None else self._tok(result),
                self._tok(verdict),
            ),
        )

    def limits(self, meta: Meta, children: list[Any]) -> Any:
        return ast.LimitsDecl(tuple(c for c in children if c is not None), self._span(meta))

    def limit_item(self, meta: Meta, children: list[Any]) -> Any:
        return ast.LimitItem(str(children[0]), _number(str(children[1])), self._span(meta))

    def schedule(self, meta: Meta, children: list[Any]) -> Any:
        return ast.ScheduleDecl(tuple(c for c in children if c is not None), self._span(meta))

    def saturate(self, meta: Meta, children: list[Any]) -> Any:
        names = children[0]
        return ast.Saturate(
            tuple(str(n) for n in names), self._span(meta), tuple(self._tok(n) for n in names)
        )

    def run_times(self, meta: Meta, children: list[Any]) -> Any:
        names, times = children
        return ast.RunTimes(
            tuple(str(n) for n in names),
            int(times),
            self._span(meta),
            tuple(self._tok(n) for n in names),
        )

    def repeat(self, meta: Meta, children: list[Any]) -> Any:
        times, *body = children
        return ast.Repeat(int(times), tuple(s for s in body if s is not None), self._span(meta))

    # -- patterns
    def pvar(self, meta: Meta, children: list[Any]) -> Any:
        return ast.PVar(str(children[0])[1:], self._span(meta))

    def pop(self, meta: Meta, children: list[Any]) -> Any:
        name, args = children
        inputs = tuple(a for a in args or () if not isinstance(a, _AttrArg))
        attrs = [a for a in args or () if isinstance(a, _AttrArg)]
        return ast.POp(
            str(name),
            inputs,
            tuple((a.name, a.value) for a in attrs),
            self._span(meta),
            tuple(a.name_span for a in attrs),
        )

    def pattr(self, meta: Meta, children: list[Any]) -> Any:
        name, value = children
        return _AttrArg(str(name), value, self._tok(name))

    def pconst(self, meta: Meta, children: list[Any]) -> Any:
        return ast.PConst(children[0], self._span(meta))

    def signed_number(self, meta: Meta, children: list[Any]) -> Any:
        return _number(str(children[0]))

    def neg_number(self, meta: Meta, children: list[Any]) -> Any:
        return -_number(str(children[0]))

    def pcompute(self, meta: Meta, children: list[Any]) -> Any:
        name, *args = children
        return ast.PCompute(str(name), tuple(a for a in args if a is not None), self._span(meta))

    # -- expressions
    def comparison(self, meta: Meta, children: list[Any], op: str | None = None) -> ast.Expr:
        """Left-fold ``a op b op c``; ``op`` None means the operator tokens are children."""
        result = children[0]
        rest = children[1:]
        step = 1 if op is not None else 2
        for i in range(0, len(rest), step):
            kind = op if op is not None else str(rest[i])
            rhs = rest[i] if op is not None else rest[i + 1]
            result = ast.BinOp(kind, result, rhs, _join(result.span, rhs.span))
        return result

    sum = product = comparison
    or_expr, and_expr = partialmethod(comparison, op="or"), partialmethod(comparison, op="and")

    def power(self, meta: Meta, children: list[Any]) -> Any:
        return ast.BinOp("**", children[0], children[1], self._span(meta))

    def not_(self, meta: Meta, children: list[Any]) -> Any:
        return ast.UnOp("not", children[0], self._span(meta))

    def neg(self, meta: Meta, children: list[Any]) -> Any:
        operand = children[0]
        # `-3` is the number -3 (so `[-1, 2]` is a list of ints), but `--3` stays nested.
        if isinstance(operand, ast.Num) and not str(operand.value).startswith("-"):
            return ast.Num(-operand.value, self._span(meta))
        return ast.UnOp("-", operand, self._span(meta))

    def index(self, meta: Meta, children: list[Any]) -> Any:
        return ast.Index(children[0], children[1], self._span(meta))

    def var(self, meta: Meta, children: list[Any]) -> Any:
        return ast.Var(str(children[0])[1:], self._span(meta))

    def call(self, meta: Meta, children: list[Any]) -> Any:
        name, *args = children
        return ast.Call(str(name), tuple(a for a in args if a is not None), self._span(meta))

    def name(self, meta: Meta, children: list[Any]) -> Any:
        return ast.Name(str(children[0]), self._span(meta))

    def number(self, meta: Meta, children: list[Any]) -> Any:
        return ast.Num(_number(str(children[0])), self._span(meta))

    def string(self, meta: Meta, children: list[Any]) -> Any:
        return ast.Str(str(children[0])[1:-1], self._span(meta))

    def list(self, meta: Meta, children: list[Any]) -> Any:
        return ast.ListLit(tuple(c for c in children if c is not None), self._span(meta))
