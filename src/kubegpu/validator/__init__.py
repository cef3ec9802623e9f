"""`kubegpu validator`: checks driver, toolkit/CDI, CUDA and device-plugin readiness on a node
and writes the ready files under /run/nvidia/validations that the other operands wait on."""

from kubegpu.validator.checks import CheckFailed, CheckResult
from kubegpu.validator.files import DEFAULT_OUTPUT_DIR, READY_FILES, ReadyFiles
from kubegpu.validator.runner import COMPONENTS, Validator, ValidatorSettings

__all__ = [
    "COMPONENTS",
    "DEFAULT_OUTPUT_DIR",
    "READY_FILES",
    "CheckFailed",
    "CheckResult",
    "ReadyFiles",
    "Validator",
    "ValidatorSettings",
]
