"""The Kubernetes API client of a node agent: the pod's service account in a cluster, else
`--kubeconfig`, $KUBECONFIG or ~/.kube/config."""

from __future__ import annotations

import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ConfigError

from kubegpu.kube.nodes import client_from_env
from kubegpu.node.runtime import ComponentError

log = logging.getLogger(__name__)


def api_client(field_manager: str, kubeconfig: str | None = None) -> AsyncClient:
    """A client, or ComponentError when there are no credentials."""
    try:
        return client_from_env(field_manager, kubeconfig or None)
    except (ConfigError, OSError) as exc:
        raise ComponentError(f"no Kubernetes credentials: {exc}") from None


def optional_api_client(field_manager: str, kubeconfig: str | None = None) -> AsyncClient | None:
    """A client, or None (with a warning) for a component that can run on its files alone."""
    try:
        return client_from_env(field_manager, kubeconfig or None)
    except Exception as exc:
        log.warning("no Kubernetes API access (%s): using the config files only", exc)
        return None
