"""egglog text spellings of primitive values, and parsing of `print-function` CSV.

Python values cross into egglog as program text (small tables) or TSV rows
(bulk), and come back from `(print-function F N :mode csv)`. Both directions live
here so the two spellings cannot drift apart.
"""

from __future__ import annotations

import csv
import io
import math

Prim = int | float | str | tuple


def i64(value: int) -> str:
    return str(int(value))


def f64(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        raise ValueError("NaN cannot be an egglog f64 literal")
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(value)
    return text if any(c in text for c in ".en") else text + ".0"


def string(value: str) -> str:
    # egglog string literals have no escapes we rely on; keep them printable.
    return '"' + value.replace('"', "'").replace("\n", " ") + '"'


def vec(items: tuple, elem: str) -> str:
    """A `(vec-of ...)` literal; ``elem`` is "i64", "f64" or "String"."""
    spell = {"i64": i64, "f64": f64, "String": string}[elem]
    if not items:
        return "(vec-empty)"
    return "(vec-of " + " ".join(spell(x) for x in items) + ")"


def tsv_f64(value: float) -> str:
    return f64(value)


# ---------------------------------------------------------------- reading back


def parse_value(text: str) -> Prim:
    """One CSV field of `print-function`: an int, float, string or vec literal."""
    text = text.strip()
    if text.startswith("(vec-empty"):
        return ()
    if text.startswith("(vec-of"):
        return tuple(parse_value(tok) for tok in _split_vec(text[len("(vec-of"):-1]))
    if text.startswith('"'):
        return text[1:-1]
    if text in ("inf", "-inf", "NaN"):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)


def _split_vec(body: str) -> list[str]:
    tokens: list[str] = []
    current = ""
    in_string = False
    for ch in body:
        if ch == '"':
            in_string = not in_string
        if ch == " " and not in_string:
            if current:
                tokens.append(current)
            current = ""
        else:
            current += ch
    if current:
        tokens.append(current)
    return tokens


def parse_rows(output: str) -> list[tuple[str, ...]]:
    """Rows of a `print-function R N :mode csv` output of a relation, as egglog
    literal texts (decode a field with `parse_value`).

    Each CSV line is ``name, col..., term``; we keep the columns in between.
    """
    rows: list[tuple[str, ...]] = []
    for record in csv.reader(io.StringIO(output)):
        if record:
            rows.append(tuple(record[1:-1]))
    return rows
