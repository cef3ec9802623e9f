"""`kubegpu node-labeller`: NFD's NVIDIA PCI labels from the node's PCI bus, for clusters
without Node Feature Discovery (the chart runs it on every node with `nfd.enabled=false`)."""

from __future__ import annotations

from pathlib import Path

import typer

from kubegpu.cli.options import KUBECONFIG_PATH_OPTION, fail, kubeconfig_text
from kubegpu.node.runtime import Component, OneShot, run


def node_labeller(
    node_name: str = typer.Option(
        "", "--node-name", envvar="NODE_NAME", help="The Node to label (the pod's node)."
    ),
    sysfs: Path = typer.Option(
        Path("/sys"), "--sysfs", envvar="SYSFS_ROOT", help="Where the node's /sys is mounted."
    ),
    interval: float = typer.Option(
        60.0, "--interval", envvar="SLEEP_INTERVAL", help="Seconds between PCI bus reads."
    ),
    os_release: Path | None = typer.Option(
        None,
        "--os-release",
        envvar="OS_RELEASE_FILE",
        help="The host's /etc/os-release (NFD's os-release labels; none when unset).",
    ),
    oneshot: bool = typer.Option(False, "--oneshot", help="Label once and exit."),
    kubeconfig: Path | None = KUBECONFIG_PATH_OPTION,
) -> None:
    """Set feature.node.kubernetes.io/pci-10de.present (and by class) from /sys/bus/pci."""
    if not node_name:
        fail("--node-name (NODE_NAME) is required: the Node whose labels this keeps")
    if interval <= 0:
        fail(f"--interval {interval}: must be more than 0 seconds")

    def program() -> Component:
        from kubegpu.feature_discovery.pci import NodeLabeller
        from kubegpu.node.api import api_client

        client = api_client("kubegpu-node-labeller", kubeconfig_text(kubeconfig))
        labeller = NodeLabeller(client, node_name, sysfs, interval, os_release)
        if oneshot:

            async def once() -> None:
                try:
                    await labeller.once()
                finally:
                    await client.close()

            return OneShot(once)
        return labeller

    raise typer.Exit(run(program))
