"""Text of one `.dnnr` file -> `SourceFile` AST, every node with a `Span`.

The grammar is `grammar/dnnr.lark` (LALR, contextual lexer). A syntax error does not
stop the file: the broken item is reported, blanked out (newlines kept, so later
positions do not move) and parsing resumes at the next line that starts an item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from lark import Lark, Token, Transformer, UnexpectedCharacters, UnexpectedInput, v_args
from lark.exceptions import UnexpectedEOF, UnexpectedToken

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.diagnostics import Diagnostic, DslParseError, SourceLines
from egraph_compiler.dsl.parse_errors import describe_parse_error

GRAMMAR_PATH = Path(__file__).resolve().parents[2] / "grammar" / "dnnr.lark"

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
    return Lark(
        GRAMMAR_PATH.read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=True,
    )


def default_ruleset(file: str) -> str:
    """Ruleset of the rules before any ``ruleset`` line: the file stem as a NAME."""
    name = re.sub(r"\W", "_", Path(file).stem.lower())
    return name if re.match(r"[a-z_]", name) else "_" + name


def parse_file(text: str, file: str, lines: SourceLines) -> ParsedFile:
    """Parse ``text`` (the contents of ``file``); never raises for bad input."""
    result = ParsedFile(ast.SourceFile(file))
    work = text
    tree = None
    while tree is None:
        comments: list[Token] = []
        try:
            tree = _parse(work, comments)
        except UnexpectedInput as error:
            pos = _error_offset(error, work)
            result.errors.append(_syntax_diagnostic(error, work, file, lines))
            start, end = _broken_item(work, pos)
            broken = work[start:end]
            result.broken_ops.update(re.findall(r"\bop\s+([A-Z]\w*)", broken))
            result.broken_rulesets.update(re.findall(r"\bruleset\s+([a-z_]\w*)", broken))
            blanked = work[:start] + re.sub(r"[^\n]", " ", broken) + work[end:]
            if blanked == work or len(result.errors) >= _MAX_PARSE_ERRORS:
                return result
            work = blanked
    try:
        items = _ToAst(file).transform(tree)
    except RecursionError:  # lark's transformer recurses once per nesting level
        span = ast.Span(file, 1, 1, 1, 2)
        result.errors.append(
            lines.diagnostic(DslParseError, "expressions are nested too deeply", span)
        )
        return result
    result.source = ast.SourceFile(file, _attach_comments(items, comments, work, file))
    return result


def _parse(text: str, comments: list[Token]):  # noqa: ANN202 - a lark Tree
    # Comments are ignored by the grammar; lex them separately to keep docs and blocks.
    tree = lark_parser().parse(text)
    comments.extend(_comment_tokens(text))
    return tree


def _comment_tokens(text: str) -> list[Token]:
    """`#` comments outside strings, as tokens with positions."""
    found = []
    for match in re.finditer(r'"[^"\n]*"|#[^\n]*', text):
        if match.group().startswith("#"):
            start = match.start()
            line = text.count("\n", 0, start) + 1
            col = start - (text.rfind("\n", 0, start) + 1) + 1
            tok = Token("COMMENT", match.group().rstrip(), start, line, col)
            found.append(tok)
    return found


def _error_offset(error: UnexpectedInput, text: str) -> int:
    if isinstance(error, UnexpectedCharacters):
        return error.pos_in_stream
    if isinstance(error, UnexpectedToken) and error.token.type != "$END":
        return error.token.start_pos or 0
    if isinstance(error, UnexpectedEOF):
        return len(text)
    return len(text)


def _broken_item(text: str, pos: int) -> tuple[int, int]:
    """The region to blank: from the item start before ``pos`` to the next item start."""
    starts = [m.end() - len(m.group().lstrip()) for m in _ITEM_START.finditer(text)]
    before = [s for s in starts if s < pos]
    after = [s for s in starts if s >= pos and s > (before[-1] if before else -1)]
    start = before[-1] if before else 0
    end = after[0] if after else len(text)
    if end <= start:
        end = len(text)
    return start, end


def _syntax_diagnostic(
    error: UnexpectedInput, text: str, file: str, lines: SourceLines
) -> Diagnostic:
    message, hint = describe_parse_error(error, text, lark_parser())
    line = getattr(error, "line", None)
    col = getattr(error, "column", None)
    if not isinstance(line, int) or line < 1 or not isinstance(col, int) or col < 1:
        line = text.count("\n") + 1
        col = len(text) - (text.rfind("\n") + 1) + 1
    width = 1
    token = getattr(error, "token", None)
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

    def own_line(tok: Token) -> bool:
        return source_lines[tok.line - 1][: tok.column - 1].strip() == ""

    def enclosing(tok: Token) -> ast.Item | None:
        for item in items:
            if item.span.line <= tok.line <= item.span.end_line:
                return item
        return None

    keyed: list[tuple[tuple[int, ...], ast.Item]] = []
    blocks: list[list[Token]] = []
    for tok in comments:
        owner = enclosing(tok)
        if owner is not None or not own_line(tok):
            if owner is None:  # a trailing comment after the last item on its line
                owner = max(
                    (i for i in items if i.span.end_line <= tok.line),
                    key=lambda i: (i.span.end_line, i.span.end_col),
                    default=None,
                )
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


def _replace_rule(rule: ast.Rule, **changes: object) -> ast.Rule:
    from dataclasses import replace

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


@v_args(meta=True)
class _ToAst(Transformer):
    """lark parse tree -> `ast` nodes. Rulesets are assigned in `start` (source order)."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file

    # -- helpers
    def _span(self, meta) -> ast.Span:  # noqa: ANN001 - lark Meta
        if getattr(meta, "empty", True):
            return ast.Span(self.file, 1, 1, 1, 1)
        return ast.Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, tok: Token) -> ast.Span:
        return ast.Span(self.file, tok.line, tok.column, tok.end_line, tok.end_column)

    # -- items
    def start(self, meta, children):  # noqa: ANN001, ANN201
        ruleset = default_ruleset(self.file)
        items = []
        for item in children:
            if isinstance(item, ast.RulesetDecl):
                ruleset = item.name
            elif isinstance(item, ast.Rule):
                item = _replace_rule(item, ruleset=ruleset)
            items.append(item)
        return items

    def use(self, meta, children):  # noqa: ANN001, ANN201
        return ast.UseDecl(str(children[0])[1:-1], self._span(meta))

    def op_decl(self, meta, children):  # noqa: ANN001, ANN201
        name, params, attrs, outputs, mapping, layout, dynamism, semantics, requires = children
        sem_expr = semantics[1] if semantics and semantics[0] == "expr" else None
        builtin = semantics[1] if semantics and semantics[0] == "builtin" else None
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
            outputs=1 if outputs is None else outputs,
            span=self._span(meta),
            name_span=self._tok(name),
            class_spans=(self._tok(mapping), self._tok(layout), self._tok(dynamism)),
        )

    def params(self, meta, children):  # noqa: ANN001, ANN201
        return children

    def param_plain(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Param(str(children[0]), span=self._span(meta))

    def param_optional(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Param(str(children[0]), optional=True, span=self._span(meta))

    def param_variadic(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Param(str(children[0]), variadic=True, span=self._span(meta))

    def attr_decls(self, meta, children):  # noqa: ANN001, ANN201
        return children

    def attr_decl(self, meta, children):  # noqa: ANN001, ANN201
        name, type_name, default = children
        return ast.AttrDecl(
            str(name),
            str(type_name),
            default,
            self._span(meta),
            self._tok(type_name),  # type: ignore[arg-type]
        )

    def outputs(self, meta, children):  # noqa: ANN001, ANN201
        return int(children[0])

    def sem_expr(self, meta, children):  # noqa: ANN001, ANN201
        return ("expr", children[0])

    def sem_builtin(self, meta, children):  # noqa: ANN001, ANN201
        return ("builtin", str(children[0]))

    def requires(self, meta, children):  # noqa: ANN001, ANN201
        return children[0]

    def ruleset_decl(self, meta, children):  # noqa: ANN001, ANN201
        return ast.RulesetDecl(str(children[0]), self._span(meta))

    def rule(self, meta, children):  # noqa: ANN001, ANN201
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

    def flags(self, meta, children):  # noqa: ANN001, ANN201
        return [(str(tok), self._tok(tok)) for tok in children]

    def guard(self, meta, children):  # noqa: ANN001, ANN201
        return children[0]

    def fuse(self, meta, children):  # noqa: ANN001, ANN201
        first, second, result, verdict = children
        return ast.FuseEntry(
            str(first),
            str(second),
            None if result is None else str(result),
            str(verdict),  # type: ignore[arg-type]
            self._span(meta),
            (
                self._tok(first),
                self._tok(second),
                ast.NO_SPAN if result is None else self._tok(result),
                self._tok(verdict),
            ),
        )

    def limits(self, meta, children):  # noqa: ANN001, ANN201
        return ast.LimitsDecl(tuple(c for c in children if c is not None), self._span(meta))

    def limit_item(self, meta, children):  # noqa: ANN001, ANN201
        return ast.LimitItem(str(children[0]), _number(str(children[1])), self._span(meta))

    def schedule(self, meta, children):  # noqa: ANN001, ANN201
        return ast.ScheduleDecl(tuple(c for c in children if c is not None), self._span(meta))

    def name_list(self, meta, children):  # noqa: ANN001, ANN201
        return children

    def saturate(self, meta, children):  # noqa: ANN001, ANN201
        names = children[0]
        return ast.Saturate(
            tuple(str(n) for n in names), self._span(meta), tuple(self._tok(n) for n in names)
        )

    def run_times(self, meta, children):  # noqa: ANN001, ANN201
        names, times = children
        return ast.RunTimes(
            tuple(str(n) for n in names),
            int(times),
            self._span(meta),
            tuple(self._tok(n) for n in names),
        )

    def repeat(self, meta, children):  # noqa: ANN001, ANN201
        times, *body = children
        return ast.Repeat(int(times), tuple(s for s in body if s is not None), self._span(meta))

    # -- patterns
    def pvar(self, meta, children):  # noqa: ANN001, ANN201
        return ast.PVar(str(children[0])[1:], self._span(meta))

    def pop(self, meta, children):  # noqa: ANN001, ANN201
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

    def pargs(self, meta, children):  # noqa: ANN001, ANN201
        return children

    def pattr(self, meta, children):  # noqa: ANN001, ANN201
        name, value = children
        return _AttrArg(str(name), value, self._tok(name))

    def pconst(self, meta, children):  # noqa: ANN001, ANN201
        return ast.PConst(children[0], self._span(meta))

    def signed_number(self, meta, children):  # noqa: ANN001, ANN201
        return _number(str(children[0]))

    def neg_number(self, meta, children):  # noqa: ANN001, ANN201
        return -_number(str(children[0]))

    def pcompute(self, meta, children):  # noqa: ANN001, ANN201
        name, *args = children
        return ast.PCompute(str(name), tuple(a for a in args if a is not None), self._span(meta))

    # -- expressions
    def _fold(self, children: list, op: str | None) -> ast.Expr:  # noqa: ANN001
        """Left-fold ``a op b op c``; ``op`` None means the operator tokens are children."""
        result = children[0]
        rest = children[1:]
        step = 1 if op is not None else 2
        for i in range(0, len(rest), step):
            kind = op if op is not None else str(rest[i])
            rhs = rest[i] if op is not None else rest[i + 1]
            result = ast.BinOp(kind, result, rhs, _join(result.span, rhs.span))  # type: ignore[arg-type]
        return result

    def or_expr(self, meta, children):  # noqa: ANN001, ANN201
        return self._fold(children, "or")

    def and_expr(self, meta, children):  # noqa: ANN001, ANN201
        return self._fold(children, "and")

    def comparison(self, meta, children):  # noqa: ANN001, ANN201
        return self._fold(children, None)

    def sum(self, meta, children):  # noqa: ANN001, ANN201
        return self._fold(children, None)

    def product(self, meta, children):  # noqa: ANN001, ANN201
        return self._fold(children, None)

    def power(self, meta, children):  # noqa: ANN001, ANN201
        return ast.BinOp("**", children[0], children[1], self._span(meta))

    def not_(self, meta, children):  # noqa: ANN001, ANN201
        return ast.UnOp("not", children[0], self._span(meta))

    def neg(self, meta, children):  # noqa: ANN001, ANN201
        operand = children[0]
        # `-3` is the number -3 (so `[-1, 2]` is a list of ints), but `--3` stays nested.
        if isinstance(operand, ast.Num) and not str(operand.value).startswith("-"):
            return ast.Num(-operand.value, self._span(meta))
        return ast.UnOp("-", operand, self._span(meta))

    def index(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Index(children[0], children[1], self._span(meta))

    def var(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Var(str(children[0])[1:], self._span(meta))

    def call(self, meta, children):  # noqa: ANN001, ANN201
        name, *args = children
        return ast.Call(str(name), tuple(a for a in args if a is not None), self._span(meta))

    def name(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Name(str(children[0]), self._span(meta))

    def number(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Num(_number(str(children[0])), self._span(meta))

    def string(self, meta, children):  # noqa: ANN001, ANN201
        return ast.Str(str(children[0])[1:-1], self._span(meta))

    def list(self, meta, children):  # noqa: ANN001, ANN201
        return ast.ListLit(tuple(c for c in children if c is not None), self._span(meta))
