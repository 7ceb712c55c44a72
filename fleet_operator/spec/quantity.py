"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact Decimals. Pure.

Here rather than kubernetes.utils so that spec parsing and drift comparison import no client
library. The grammar of kubernetes.utils.parse_quantity: a finite decimal number, then an optional
SI suffix (k or K, M, ... E, and n, u, m) or binary one (Ki ... Ei).
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "K": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """The quantity's value; ValueError when it is not a quantity."""
    if isinstance(quantity, (int, float, Decimal)) and not isinstance(quantity, bool):
        return Decimal(quantity)
    text = str(quantity)
    number, scale = _split(text)
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"invalid quantity {text!r}") from None
    if not value.is_finite():
        raise ValueError(f"invalid quantity {text!r}")
    return value * scale


def _split(text: str) -> tuple[str, Decimal]:
    """(number part, multiplier) of a quantity's text."""
    if text[-2:] in _BINARY:
        return text[:-2], Decimal(2) ** _BINARY[text[-2:]]
    # NOTE: "1E" is exa, but "1e3" / "1E3" is an exponent: only a trailing letter is a suffix.
    if text[-1:] in _DECIMAL and text[-1:]:
        return text[:-1], Decimal(10) ** _DECIMAL[text[-1:]]
    return text, Decimal(1)
