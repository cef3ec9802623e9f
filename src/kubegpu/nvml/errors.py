"""NVML's error kinds, shared by both backends so callers handle one set of exceptions.

The codes are NVML's `nvmlReturn_t` values; the real backend maps pynvml's NVMLError onto
these classes, and the simulator raises them for the same situations the hardware does.
"""

from __future__ import annotations

from typing import ClassVar


class NvmlError(Exception):
    """Base class: `code` is the nvmlReturn_t value."""

    code: ClassVar[int] = 999
    label: ClassVar[str] = "Unknown Error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.label)
        self.message = message or self.label

    def __str__(self) -> str:
        return f"{self.label}: {self.message}" if self.message != self.label else self.label


class Uninitialized(NvmlError):
    code, label = 1, "Uninitialized"


class InvalidArgument(NvmlError):
    code, label = 2, "Invalid Argument"


class NotSupported(NvmlError):
    code, label = 3, "Not Supported"


class NoPermission(NvmlError):
    code, label = 4, "Insufficient Permissions"


class NotFound(NvmlError):
    code, label = 6, "Not Found"


class Timeout(NvmlError):
    code, label = 10, "Timeout"


class GpuIsLost(NvmlError):
    code, label = 15, "GPU is lost"


class ResetRequired(NvmlError):
    code, label = 16, "GPU requires reset"


class InUse(NvmlError):
    code, label = 19, "In use by another client"


class InsufficientResources(NvmlError):
    code, label = 23, "Insufficient Resources"


class UnknownError(NvmlError):
    code, label = 999, "Unknown Error"


ERRORS_BY_CODE: dict[int, type[NvmlError]] = {
    cls.code: cls
    for cls in (
        Uninitialized,
        InvalidArgument,
        NotSupported,
        NoPermission,
        NotFound,
        Timeout,
        GpuIsLost,
        ResetRequired,
        InUse,
        InsufficientResources,
        UnknownError,
    )
}


def error_for_code(code: int, message: str = "") -> NvmlError:
    return ERRORS_BY_CODE.get(code, UnknownError)(message)
