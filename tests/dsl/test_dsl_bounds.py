"""Rule files are read only if regular and small; guard arithmetic is bounded (issue 16, item 2)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from egraph_compiler import dsl
from egraph_compiler.dsl.bounds import bounded_pow
from egraph_compiler.dsl.source_io import MAX_RULE_FILE_BYTES

OPERATORS = Path(__file__).resolve().parents[2] / "rules" / "operators.dnnr"


def _messages(path: Path | str) -> str:
    start = time.perf_counter()
    diagnostics = dsl.check([path])
    assert time.perf_counter() - start < 5, "a hostile rule file must not stall the checker"
    return "\n".join(d.message for d in diagnostics)


def test_fifo_rule_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "rules.dnnr"
    os.mkfifo(fifo)
    assert "not a regular file (a FIFO)" in _messages(fifo)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_use_of_a_device_is_refused(tmp_path: Path, device: str) -> None:
    rules = tmp_path / "rules.dnnr"
    rules.write_text(f'use "{device}"\n')
    assert f"cannot read '{device}': not a regular file (a character device)" in _messages(rules)


def test_huge_rule_file_is_refused_before_reading(tmp_path: Path) -> None:
    huge = tmp_path / "huge.dnnr"
    with huge.open("wb") as stream:  # sparse: no disk used
        stream.truncate(MAX_RULE_FILE_BYTES + 1)
    assert "over the 4 MiB limit for a rule file" in _messages(huge)


@pytest.mark.parametrize(("guard", "shown"), [
    ("2 ** 2 ** 2 ** 2 ** 2 ** 2 > 1", "2 ** 65536 overflows 64-bit integers"),
    ("10 ** 10 ** 8 > 1", "10 ** 100000000 overflows 64-bit integers"),
    ("rank(?x) < 9223372036854775807 + 1", "overflows 64-bit integers"),
    ("rank(?x) < 4294967296 * 4294967296", "overflows 64-bit integers"),
])
def test_guard_constants_that_overflow_are_errors(tmp_path: Path, guard: str, shown: str) -> None:
    rules = tmp_path / "rules.dnnr"
    rules.write_text(f'use "{OPERATORS}"\nrule r: Relu(?x) => ?x when {guard}\n')
    message = _messages(rules)
    assert "rule 'r': guard constant out of range" in message and shown in message


def test_guard_constants_in_range_pass(tmp_path: Path) -> None:
    rules = tmp_path / "rules.dnnr"
    rules.write_text(f'use "{OPERATORS}"\nrule r: Relu(?x) => ?x when rank(?x) < 2 ** 62 and -2 ** 62 < 0\n')
    assert _messages(rules) == ""


def test_bounded_pow_refuses_what_would_overflow() -> None:
    assert bounded_pow(2, 62) == 2**62 and bounded_pow(-3, 3) == -27 and bounded_pow(2.0, 0.5) == 2**0.5
    for base, exponent in ((2, 64), (10, 10**8), (2.0, 5000)):
        start = time.perf_counter()
        with pytest.raises(ValueError, match="overflows"):
            bounded_pow(base, exponent)
        assert time.perf_counter() - start < 0.1
