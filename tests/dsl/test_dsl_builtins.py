"""The built-in registry: int-list implementations against numpy, and the reference text."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest

from egraph_compiler.dsl.builtins import (
    BUILTINS,
    DYNAMISM_CLASSES,
    LAYOUT_CLASSES,
    MAPPING_CLASSES,
    builtins_reference,
    compose,
    concat,
    int_range,
    invert,
    is_identity,
    length,
    normalize_axes,
    permute,
)

RNG = np.random.default_rng(7)
# Distinct sizes per axis, so a wrong axis order changes the shape and the values.
X3 = RNG.standard_normal((2, 3, 5))
X4 = RNG.standard_normal((2, 3, 4, 5))


@pytest.mark.parametrize(
    "p, q", list(itertools.product(itertools.permutations(range(3)), repeat=2))
)
def test_compose_is_transpose_of_transpose_at_rank_3(
    p: tuple[int, ...], q: tuple[int, ...]
) -> None:
    expected = np.transpose(np.transpose(X3, p), q)
    np.testing.assert_array_equal(np.transpose(X3, compose(p, q)), expected)


def test_compose_at_rank_4_random_perms() -> None:
    for _ in range(50):
        p, q = tuple(RNG.permutation(4)), tuple(RNG.permutation(4))
        expected = np.transpose(np.transpose(X4, p), q)
        np.testing.assert_array_equal(np.transpose(X4, compose(p, q)), expected)


def test_compose_is_not_symmetric_at_rank_3() -> None:
    # The rank >= 3 check of DESIGN §4: the wrong order must give a different perm.
    p, q = (1, 2, 0), (0, 2, 1)
    assert compose(p, q) != compose(q, p)


@pytest.mark.parametrize("p", list(itertools.permutations(range(4))))
def test_invert_undoes_a_transpose(p: tuple[int, ...]) -> None:
    np.testing.assert_array_equal(np.transpose(np.transpose(X4, p), invert(p)), X4)
    assert is_identity(compose(p, invert(p)))
    assert is_identity(p) == (p == (0, 1, 2, 3))


def test_permute_reorders_like_a_transposed_shape() -> None:
    for p in itertools.permutations(range(3)):
        assert permute(X3.shape, p) == np.transpose(X3, p).shape


def test_normalize_axes_matches_numpy() -> None:
    assert normalize_axes((-1, 0), 3) == (0, 2)
    for axes in ((-1,), (0, -2), (2, -2), (-3, -1)):
        normalized = normalize_axes(axes, 3)
        assert list(normalized) == sorted(normalized) and all(0 <= a < 3 for a in normalized)
        # Reducing over either spelling of the axes gives the same tensor.
        np.testing.assert_array_equal(np.sum(X3, axis=axes), np.sum(X3, axis=normalized))
    with pytest.raises(ValueError):
        normalize_axes((3,), 3)


def test_list_helpers() -> None:
    assert concat((1, 2), (3,)) == (1, 2, 3)
    assert length((4, 5, 6)) == 3
    assert int_range(4) == (0, 1, 2, 3) and int_range(0) == ()
    with pytest.raises(ValueError):
        compose((0, 0, 1), (0, 1, 2))
    with pytest.raises(ValueError):
        compose((0, 1), (0, 1, 2))
    with pytest.raises(ValueError):
        int_range(-1)


def test_registry_contains_the_helpers_contract() -> None:
    contract = (
        "rank shape dim numel dtype is_const same_shape broadcastable nonzero positive nonneg "
        "compose invert is_identity len permute normalize_axes concat range scalar vector"
    ).split()
    assert set(contract) <= set(BUILTINS)
    for name in "compose invert is_identity len permute normalize_axes concat range".split():
        builtin = BUILTINS[name]
        assert builtin.category == "int_list" and builtin.impl is not None
        assert len(inspect.signature(builtin.impl).parameters) == builtin.arity


def test_class_sets_follow_the_seed_tables() -> None:
    assert set(MAPPING_CLASSES) == {
        "one_to_one",
        "one_to_many",
        "many_to_many",
        "reorganize",
        "shuffle",
    }
    assert set(LAYOUT_CLASSES) == {"ild_variable", "ild_fixed", "ili_variable", "ili_fixed"}
    assert len(DYNAMISM_CLASSES) == 4 and "execution_determined" in DYNAMISM_CLASSES


def test_reference_documents_every_builtin_and_class() -> None:
    text = builtins_reference()
    for builtin in BUILTINS.values():
        assert f"`{builtin.name}(" in text and builtin.doc in text
    for name in (*MAPPING_CLASSES, *LAYOUT_CLASSES, *DYNAMISM_CLASSES):
        assert f"`{name}`" in text
