"""Resource quantities by the API server's grammar: what it takes is taken, the rest is
refused with the value quoted."""

from __future__ import annotations

import pytest

from kubegpu.kube.quantity import quantity_problem


@pytest.mark.parametrize(
    "text", ["32", "500m", "1.5", ".5", "2.", "256Gi", "1Ei", "1e9", "1E-3", "+4", "100k", "5n"]
)
def test_quantities_the_api_server_takes(text: str) -> None:
    assert quantity_problem(text) is None
    assert quantity_problem(text, positive=True) is None


@pytest.mark.parametrize(
    "text", ["lots", "", "1 Gi", "256GB", "1ki", "Gi", "1.2.3", "1e", "0x10", "1_000", " 4"]
)
def test_what_is_not_a_quantity(text: str) -> None:
    assert quantity_problem(text) == (
        f"{text!r} is not a Kubernetes quantity (like 500m, 4, 256Gi or 1e9)"
    )


@pytest.mark.parametrize("text", ["0", "-1", "0.0Gi", "-2Gi", "0e3"])
def test_a_capacity_must_be_above_zero(text: str) -> None:
    assert quantity_problem(text) is None
    assert quantity_problem(text, positive=True) == f"{text!r} must be above zero"
