"""quantity.py reads quantities exactly as kubernetes.utils.parse_quantity does (minus infinities)."""
from __future__ import annotations

import pytest
from kubernetes.utils import parse_quantity as client_parse_quantity

from fleet_operator.spec.quantity import parse_quantity

SAME = ["4", "16Gi", "0.5", "500m", "1e3", "1E", "1.5Gi", 2, 0.5, "1k", "1K", "-1", "1u", "12n",
        "1Ki", "1e3Mi", "100M", "2Ti"]
INVALID = ["abc", "", "1.2.3", "1ki", "1mi", "Gi", "m", "nan", "0x10", "inf"]


@pytest.mark.parametrize("text", SAME, ids=[str(t) for t in SAME])
def test_parse_quantity_matches_the_client_library(text):
    assert parse_quantity(text) == client_parse_quantity(text)


@pytest.mark.parametrize("text", INVALID)
def test_parse_quantity_rejects_what_is_not_a_quantity(text):
    # NOTE: "inf" is one the client library lets through (as Infinity): a CPU of inf is no quantity.
    with pytest.raises(ValueError):
        parse_quantity(text)
