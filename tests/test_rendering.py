"""The one byte formatter and the one JSON coercion that runner and analysis share (`genrun.schemas.rendering`)."""

from fractions import Fraction

import numpy as np
import torch

from genrun.schemas.rendering import array_or, human_bytes, jsonable


def test_human_bytes_units() -> None:
    assert [human_bytes(n) for n in (0, 17, 1023, 1024, 812 * 2**10, int(12.3 * 2**20), 3 * 2**29, 5 * 2**40)] == [
        "0 B", "17 B", "1,023 B", "1.0 KiB", "812.0 KiB", "12.3 MiB", "1.50 GiB", "5.00 TiB",
    ]


def test_jsonable_recurses_containers_and_describes_the_rest() -> None:
    value = {1: (True, None, 2.5), "s": {"x"}, "odd": Fraction(1, 3)}
    assert jsonable(value) == {"1": [True, None, 2.5], "s": ["x"], "odd": "1/3"}
    assert jsonable(Fraction(1, 3), repr) == "Fraction(1, 3)"


def test_array_or_lists_tensors_and_arrays() -> None:
    leaf = array_or(repr)
    assert jsonable({"t": torch.tensor([[1, 2]]), "a": np.arange(2), "f": Fraction(1, 2)}, leaf) == {
        "t": [[1, 2]], "a": [0, 1], "f": "Fraction(1, 2)",
    }
