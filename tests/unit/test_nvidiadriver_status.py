"""An NVIDIADriver is accepted but not reconciled, and its status says so (never silently)."""

from __future__ import annotations

from kubegpu.operator.nvidiadriver import NOT_SUPPORTED, unsupported_status

NOW = "2026-12-01T10:00:00Z"


def driver(generation: int = 1, status: dict | None = None) -> dict:
    obj: dict = {"metadata": {"name": "demo-gold", "generation": generation}, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


def test_a_new_nvidiadriver_is_marked_not_supported() -> None:
    status = unsupported_status(driver(), NOW)
    assert status is not None
    assert status["state"] == "ignored"
    ready, error = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", NOT_SUPPORTED)
    assert (error["type"], error["status"]) == ("Error", "True")
    assert "not supported by kubegpu" in ready["message"]
    assert ready["observedGeneration"] == 1


def test_a_driver_that_already_says_so_is_left_alone() -> None:
    status = unsupported_status(driver(), NOW)
    assert unsupported_status(driver(status=status), NOW) is None


def test_a_spec_change_is_acknowledged_keeping_the_transition_time() -> None:
    first = unsupported_status(driver(1), NOW)
    again = unsupported_status(driver(2, first), "2026-12-01T11:00:00Z")
    assert again is not None
    assert again["conditions"][0]["observedGeneration"] == 2
    assert again["conditions"][0]["lastTransitionTime"] == NOW
