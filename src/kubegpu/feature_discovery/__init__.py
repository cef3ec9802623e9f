"""GPU feature discovery: the `nvidia.com/` GPU labels, kept on the node's own Node object."""

from kubegpu.feature_discovery.discovery import (
    FIELD_MANAGER,
    DiscoveryError,
    FeatureDiscovery,
    GfdOptions,
    features_text,
)

__all__ = ["FIELD_MANAGER", "DiscoveryError", "FeatureDiscovery", "GfdOptions", "features_text"]
