"""The MIG manager node component: applies the layout named by `nvidia.com/mig.config`."""

from kubegpu.mig_manager.manager import MigManager, Outcome
from kubegpu.mig_manager.settings import (
    DEFAULT_OPERANDS,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PAUSED,
    PAUSED_ANNOTATION,
    MigManagerSettings,
    State,
)

__all__ = [
    "DEFAULT_OPERANDS",
    "MIG_CONFIG_LABEL",
    "MIG_STATE_LABEL",
    "PAUSED",
    "PAUSED_ANNOTATION",
    "MigManager",
    "MigManagerSettings",
    "Outcome",
    "State",
]
