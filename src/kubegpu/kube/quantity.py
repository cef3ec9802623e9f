"""Kubernetes resource quantities (`500m`, `2`, `256Gi`, `1e3`) checked by the API
server's grammar (pure), so a value it would refuse is refused where it is read, not when
the object is written halfway through a start."""

from __future__ import annotations

import re

# <signedNumber><suffix>: a binary-SI suffix (Ki..Ei), a decimal-SI one (n u m "" k M G T P E)
# or a decimal exponent (e3, E-2), as k8s.io/apimachinery's resource.ParseQuantity reads it.
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
QUANTITY = re.compile(rf"^([+-]?)({_NUMBER})(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?{_NUMBER})?$")


def quantity_problem(text: str, *, positive: bool = False) -> str | None:
    """Why `text` is not a quantity (or, with `positive`, not one above zero); None if it is."""
    m = QUANTITY.fullmatch(text)
    if m is None:
        return f"{text!r:.60} is not a Kubernetes quantity (like 500m, 4, 256Gi or 1e9)"
    sign, number = m.group(1), m.group(2)
    if positive and (sign == "-" or not any(c in "123456789" for c in number)):
        return f"{text!r:.60} must be above zero"
    return None
