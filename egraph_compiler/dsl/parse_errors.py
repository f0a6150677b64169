"""Plain-English syntax errors: lark's UnexpectedInput -> (message, hint).

Common mistakes are recognised by example, as lark's `match_examples` does
(`examples/advanced/error_reporting_lalr.py`), but keyed on the LALR state alone,
not the whole stack depth, so an unclosed paren is recognised at any nesting.
Anything else reads "unexpected X; expected Y or Z" with terminals named in words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

from lark import Lark, Token, UnexpectedCharacters, UnexpectedInput
from lark.exceptions import UnexpectedEOF, UnexpectedToken
from lark.lexer import PatternStr

from egraph_compiler.dsl import load_budget

# label -> (hint, malformed examples). The first example whose parser state (and,
# preferably, offending token kind) matches the error names it.
EXAMPLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "missing '=>' between the two sides of the rule": (
        "a rule reads: rule NAME: lhs => rhs  (or <=> for both directions)",
        (
            "rule r: Neg(?x) ?x",
            "rule r: Neg(?x) Neg(?y)",
            "rule r: Neg(?x) -> ?x",
            "rule r: Neg(?x) = ?x",
            "rule r: Neg(?x) 0",
            "rule r: Neg(?x)\nrule q: Neg(?x) => ?x",
        ),
    ),
    "unclosed '(': expected ')' or ','": (
        "every '(' needs a matching ')'",
        (
            "rule r: Neg(?x => ?x",
            "rule r: Neg(Neg(?x) => ?x",
            "rule r: Neg(?x, 1 => ?x",
            "rule r: Neg(?x, p=?p => ?x",
            "rule r: Neg(?x) => Neg(?x",
            "rule r: Neg(?x) => Neg(?x\nrule q: Neg(?x) => ?x",
            "rule r: Neg(?x) => ?x when f(?x",
            "rule r: Neg(?x) => ?x when f(?x\nrule q: Neg(?x) => ?x",
            "rule r: Neg(?x) => ?x when (rank(?x) > 1",
            "rule r: Neg(?x) => ?x when f(?x, 1\nrule q: Neg(?x) => ?x",
            "op A(a, b : one_to_one ili_variable shape_determined",
        ),
    ),
    "unclosed '[': expected ']' or ','": (
        "every '[' needs a matching ']'",
        (
            "rule r: Neg(?x) => ?x when ?p == [1, 2",
            "rule r: Neg(?x) => ?x when ?p == [1, 2\nrule q: Neg(?x) => ?x",
            "rule r [exact: Neg(?x) => ?x",
        ),
    ),
    "missing ',' between arguments": (
        "arguments are separated by ','",
        (
            "rule r: Neg(?x ?y) => ?x",
            "rule r: Neg(?x, ?y ?z) => ?x",
            "rule r: Neg(?x) => ?x when f(?x ?y)",
            "rule r: Neg(?x) => ?x when f(?x 1)",
            "rule r: Neg(?x) => ?x when [1 2]",
            "rule r: Neg(?x 1) => ?x",
        ),
    ),
    "expected ':' after the rule name": (
        "a rule reads: rule NAME [flags]: lhs => rhs",
        (
            "rule r Neg(?x) => ?x",
            "rule Neg(?x) => ?x",
            "rule r [exact] Neg(?x) => ?x",
            "rule r-1 => ?x",
        ),
    ),
    "a rule needs a name": (
        "a rule reads: rule NAME: lhs => rhs",
        ("rule : Neg(?x) => ?x", "rule [exact]: Neg(?x) => ?x"),
    ),
    "pattern variables start with '?'": (
        "write ?x for a variable; operator names start with a capital letter",
        (
            "rule r: Neg(x) => ?x",
            "rule r: Neg(x, ?y) => ?x",
            "rule r: Neg(?y, x) => ?x",
            "rule r: Neg(?x) => x",
            "rule r: Neg(?x) => x\nrule q: Neg(?x) => ?x",
            "rule r: x => ?x",
        ),
    ),
    "'=' is not a comparison; use '=='": (
        "guards compare with == != < <= > >=",
        ("rule r: Neg(?x) => ?x when rank(?x) = 2", "rule r: Neg(?x) => ?x when ?x = 2"),
    ),
    "unclosed '{': expected '}'": (
        "a schedule or limits block ends with '}'",
        ("schedule { saturate a", "schedule { repeat 2 { saturate a }", "limits { nodes = 1"),
    ),
    "expected an item: use, op, ruleset, rule, fuse, limits or schedule": (
        "every item starts with one of these keywords; a rule's guard starts with 'when'",
        (
            "foo",
            "transpose-id: Neg(?x) => ?x",
            "Neg(?x) => ?x",
            "rule r: Neg(?x) => ?x\nfoo",
            "rule r: Neg(?x) => ?x rank(?x) > 1",
            'use "a.dnnr"\nfoo',
            "ruleset a\nfoo",
            "fuse a then b : fuse\nfoo",
            "limits { nodes = 1 }\nfoo",
            "schedule { saturate a }\nfoo",
            "rule r: Neg(?x) => ?x when rank(?x) > 1\nfoo",
        ),
    ),
    "an op lists its operands in parentheses": (
        "e.g. op Neg(a) : one_to_one ili_variable shape_determined = -a",
        ("op Neg : one_to_one ili_variable shape_determined", "op Neg = a"),
    ),
    "expected ':' and the mapping, layout and dynamism classes": (
        "an op reads: op Name(a, b) [attr: type] : mapping layout dynamism [= semantics]",
        (
            "op A(a) = a",
            "op A(a)\nop B(b) : one_to_one ili_variable shape_determined",
            "op A(a) one_to_one ili_variable shape_determined",
            "op A(a) [p: int] = a",
        ),
    ),
    "an op needs three classes: mapping, layout and dynamism": (
        "e.g. op Add(a, b) : one_to_one ili_variable shape_determined = a + b",
        (
            "op A(a) : one_to_one = a",
            "op A(a) : one_to_one ili_variable = a",
            "op A(a) : one_to_one\nop B(b) : one_to_one ili_variable shape_determined",
            "op A(a) : one_to_one ili_variable\nop B(b) : one_to_one ili_variable shape_determined",
        ),
    ),
    "an operator name must start with a capital letter": (
        "e.g. op Add(a, b) : one_to_one ili_variable shape_determined",
        ("op add(a, b) : one_to_one ili_variable shape_determined",),
    ),
    "expected '{' after 'schedule' or 'limits'": (
        "schedule { saturate a; run b 2 }   limits { nodes = 50000; iterations = 30 }",
        ("schedule saturate a", "limits nodes = 1", "schedule: saturate a"),
    ),
    "schedule steps are separated by ';'": (
        "schedule { saturate a; run b 2; repeat 3 { run c 1 } }",
        (
            "schedule { saturate a run b 1 }",
            "schedule { run a 1 run b 1 }",
            "schedule { saturate a saturate b }",
        ),
    ),
    "'run' needs a ruleset and an iteration count": (
        "write: run NAME N   (or: saturate NAME)",
        ("schedule { run a }", "schedule { run a; saturate b }", "schedule { run }"),
    ),
    "a fusion entry reads: fuse FIRST then SECOND [-> RESULT] : VERDICT": (
        "e.g. fuse one_to_one then many_to_many -> many_to_many : fuse",
        (
            "fuse a b : fuse",
            "fuse a then b",
            "fuse a then b -> c",
            "fuse a then b\nfuse c then d : fuse",
            "fuse a then b -> c\nfuse c then d : fuse",
        ),
    ),
    "'use' takes a file name in double quotes": (
        'e.g. use "operators.dnnr"',
        ("use operators", "use 'operators.dnnr'"),
    ),
}

_ITEM_TERMINALS = {"USE", "OP", "RULESET", "RULE", "FUSE", "LIMITS", "SCHEDULE"}
_EXPRESSION_START = {"VAR", "NUMBER", "NAME", "LPAR"}
_OPERATOR_TERMINALS = {"MUL_OP", "ADD_OP", "COMP_OP", "AND", "OR", "__ANON_2"}
_FRIENDLY = {
    "ARROW": "'=>' or '<=>'",
    "VAR": "a variable (?x)",
    "OPNAME": "an operator name",
    "NAME": "a name",
    "RULENAME": "a rule name",
    "INT": "an integer",
    "NUMBER": "a number",
    "STRING": "a string in double quotes",
    "COMP_OP": "a comparison",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/', '//' or '%'",
    "$END": "end of file",
}


def _signature(error: UnexpectedInput) -> tuple[object, str]:
    state = getattr(error, "state", None)
    position = getattr(state, "position", None)
    if isinstance(error, UnexpectedCharacters):
        return position, "CHAR:" + error.char
    token = getattr(error, "token", None)
    return position, getattr(token, "type", "$END")


@cache
def _example_table(parser: Lark) -> tuple[tuple[tuple[object, str], str], ...]:
    table = []
    for label, (_, examples) in EXAMPLES.items():
        for text in examples:
            try:
                parser.parse(text)
            except UnexpectedInput as error:
                table.append((_signature(error), label))
    return tuple(table)


def _match(error: UnexpectedInput, parser: Lark) -> str | None:
    position, token = _signature(error)
    if position is None:
        return None
    table = _example_table(parser)
    for (pos, tok), label in table:
        if pos == position and tok == token:
            return label
    for (pos, _), label in table:
        if pos == position:
            return label
    return None


def _terminal_words(name: str, parser: Lark) -> str:
    if name in _FRIENDLY:
        return _FRIENDLY[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return name
    if isinstance(pattern, PatternStr):
        return f"'{pattern.value}'"
    return name.lower()


def expected_words(names: set[str], parser: Lark) -> str:
    names = set(names)
    words: list[str] = []
    if _EXPRESSION_START <= names:
        names -= _EXPRESSION_START | {"OPNAME", "STRING", "LSQB", "MINUS", "NOT"}
        words.append("an expression")
    if _ITEM_TERMINALS <= names:
        names -= _ITEM_TERMINALS
        words.append("the next item (rule, op, ...)")
    if len(names & _OPERATOR_TERMINALS) >= 3:
        names -= _OPERATOR_TERMINALS | {"LSQB"}
        words.append("an operator")
    words = sorted(_terminal_words(n, parser) for n in names) + words
    if not words:
        return "nothing more"
    if len(words) > 8:
        words = words[:8] + ["..."]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _found(error: UnexpectedInput) -> str:
    if isinstance(error, UnexpectedCharacters):
        return f"character {error.char!r}"
    token = getattr(error, "token", None)
    if token is None or token.type == "$END":
        return "end of the item"
    value = str(token.value).split("\n")[0]
    return f"'{value[:30]}'"


class JoinedKeyword(UnexpectedToken):
    """A keyword glued to a word, e.g. ``whenn`` read as ``when`` + ``n``.

    lark's contextual lexer matches a keyword as a prefix wherever a name is not
    expected, so ``?x whenis_const(?x)`` would otherwise parse; `KeywordBoundary`
    raises this instead."""

    def __init__(self, keyword: Token, word: Token) -> None:
        joined = Token(
            "JOINED", f"{keyword}{word}", keyword.start_pos, keyword.line, keyword.column
        )
        super().__init__(joined, set())
        self.keyword = str(keyword)
        self.word = str(word)


class KeywordBoundary:
    """lark post-lexer: a keyword must not touch a name or number on either side."""

    always_accept: tuple[str, ...] = ()

    def __init__(self, keyword_types: set[str]) -> None:
        self.keyword_types = keyword_types

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        previous: Token | None = None
        for count, token in enumerate(stream):
            if count % load_budget.CHECK_EVERY == 0:
                load_budget.check()  # a compile's seconds limit binds inside one parse
            if previous is not None and previous.end_pos == token.start_pos:
                keyword_first = previous.type in self.keyword_types and _wordy(token.value[:1])
                keyword_second = token.type in self.keyword_types and _wordy(previous.value[-1:])
                if keyword_first or keyword_second:
                    raise JoinedKeyword(previous, token)
            yield token
            previous = token


def _wordy(char: str) -> bool:
    return char.isalnum() or char == "_"


def describe_parse_error(error: UnexpectedInput, text: str, parser: Lark) -> tuple[str, str]:
    """(message, hint) for a syntax error in ``text``."""
    if isinstance(error, JoinedKeyword):
        return (
            f"'{error.keyword}{error.word}' reads as '{error.keyword}' followed by '{error.word}'",
            f"separate them with a space, or fix the spelling of '{error.keyword}{error.word}'",
        )
    if isinstance(error, UnexpectedCharacters) and error.char == '"':
        return "unterminated string", "a string ends with '\"' on the same line"
    if isinstance(error, UnexpectedCharacters):
        expected: set[str] = set(error.allowed or ())
    elif isinstance(error, UnexpectedToken):
        expected = set(error.accepts or error.expected)
    elif isinstance(error, UnexpectedEOF):
        expected = set(error.expected)
    else:
        expected = set()
    label = _match(error, parser)
    if label is not None and label.startswith("unclosed"):
        label = _unclosed_label(text[: _offset(error, text)])
    if label is not None:
        hint = EXAMPLES[label][0]
        if len(expected) <= 3:  # a short list adds something; a long one is noise
            hint += f"; found {_found(error)}, expected {expected_words(expected, parser)}"
        return label, hint
    return f"unexpected {_found(error)}; expected {expected_words(expected, parser)}", ""


def _offset(error: UnexpectedInput, text: str) -> int:
    if isinstance(error, UnexpectedCharacters):
        return error.pos_in_stream
    token = getattr(error, "token", None)
    if token is not None and token.type != "$END" and token.start_pos is not None:
        return token.start_pos
    return len(text)


def _unclosed_label(text: str) -> str | None:
    """Name the innermost bracket still open at the end of ``text`` (strings and
    comments skipped), or None when every bracket is closed."""
    stack: list[str] = []
    for match in re.finditer(r'"[^"\n]*"|#[^\n]*|[()\[\]{}]', text):
        char = match.group()
        if char in "([{":
            stack.append(char)
        elif char in ")]}" and stack:
            stack.pop()
    if not stack:
        return None
    return {
        "(": "unclosed '(': expected ')' or ','",
        "[": "unclosed '[': expected ']' or ','",
        "{": "unclosed '{': expected '}'",
    }[stack[-1]]
