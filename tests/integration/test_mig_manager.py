"""The MIG manager in-process, against the real control plane and a simulated node.

The GPU operands are stand-in DaemonSets (pods of an image the simulated kubelet runs
without a process) selected by their `nvidia.com/gpu.deploy.<operand>=true` labels, so
the real DaemonSet controller removes and brings back their pods as the manager pauses
and restores them. `tests/integration/test_mig_manager_pods.py` runs the real thing:
the manager, the device plugin and feature discovery as pods.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod

from kube_objects import meta
from kubegpu.kube.labels import labels_of
from kubegpu.kube.nodes import watch_node
from kubegpu.mig import parted
from kubegpu.mig.parted import read_node
from kubegpu.mig_manager import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PAUSED,
    PAUSED_ANNOTATION,
    MigManager,
    MigManagerSettings,
)
from kubegpu.mig_manager.manager import Failed
from kubegpu.nvml import MigMode
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.node import SimNode

from .fake_plugin import FakePlugin
from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

EXAMPLES = Path(__file__).parents[2] / "examples/mig-configs"
DEPLOY = "nvidia.com/gpu.deploy."
OPERAND_LABELS = {
    DEPLOY + "device-plugin": "true",
    DEPLOY + "gpu-feature-discovery": "true",
    DEPLOY + "dcgm-exporter": "false",  # switched off by the admin: must stay off
    DEPLOY + "mig-manager": "true",  # not an operand the manager pauses
}


class Crash(BaseException):
    """Ends a manager the way SIGKILL would: no cleanup code runs."""


class Recorder:
    """Every value the Node's MIG state label and deploy labels take, from a watch."""

    def __init__(self, akube: AsyncClient, node: str) -> None:
        self.states: list[str] = []
        self.deploy_values: set[str] = set()
        self._task = asyncio.create_task(self._run(akube, node))

    async def _run(self, akube: AsyncClient, node: str) -> None:
        async for n in watch_node(akube, node):
            if n is None:
                continue
            labels = labels_of(n)
            state = labels.get(MIG_STATE_LABEL, "")
            if state and (not self.states or self.states[-1] != state):
                self.states.append(state)
            self.deploy_values |= {v for k, v in labels.items() if k.startswith(DEPLOY)}

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


Env = dict[str, Any]


@pytest.fixture
async def env(
    sim_nodes: SimNodes, akube: AsyncClient, namespace: str
) -> AsyncIterator[Callable[..., Awaitable[Env]]]:
    """Builds a simulated node with stand-in operands and a MIG manager running in-process."""
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def make(
        name: str,
        gpus: str = "h200-nvl:8",
        labels: dict[str, str] | None = None,
        **settings: Any,
    ) -> Env:
        node = await sim_nodes.start(
            name, gpus=gpus, labels={**OPERAND_LABELS, **(labels or {})}, lease_interval_s=1.0
        )
        for operand in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter"):
            await akube.create(_operand(name, operand), namespace=namespace)  # type: ignore[call-overload]
        recorder = Recorder(akube, name)
        cleanups.append(recorder.stop)
        out: Env = {"node": node, "recorder": recorder, "namespace": namespace}
        out["start"] = lambda **more: _start(out, akube, cleanups, {**settings, **more})
        return out

    yield make
    for cleanup in reversed(cleanups):
        await cleanup()


def _operand(node: str, operand: str) -> DaemonSet:
    """A DaemonSet that runs on `node` while nvidia.com/gpu.deploy.<operand>=true."""
    app = f"{operand}-{node}"
    return DaemonSet.from_dict(  # type: ignore[return-value]
        {
            "metadata": {"name": app},
            "spec": {
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "nodeSelector": {
                            DEPLOY + operand: "true",
                            "kubernetes.io/hostname": node,
                        },
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "main", "image": "registry.example/operand:1"}],
                    },
                },
            },
        }
    )


async def _start(
    env: Env,
    akube: AsyncClient,
    cleanups: list[Callable[[], Awaitable[None]]],
    settings: dict[str, Any],
) -> tuple[MigManager, asyncio.Task[None]]:
    node: SimNode = env["node"]
    hooks = {k: settings.pop(k) for k in ("on_step", "reboot") if k in settings}
    s = MigManagerSettings(
        node_name=node.name,
        namespace=env["namespace"],
        pod_resources_socket=node.pod_resources.socket,
        poll_s=0.1,
        cdi_dir=node.root / "var/run/cdi",
        **settings,
    )
    manager = MigManager(s, akube, SimNvml(node.gpu_state), **hooks)
    task = asyncio.create_task(manager.run())

    async def stop() -> None:
        manager.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 10)

    cleanups.append(stop)
    await asyncio.wait_for(manager.ready.wait(), 10)
    return manager, task


async def label(akube: AsyncClient, node: str, value: str | None) -> None:
    await akube.patch(Node, node, {"metadata": {"labels": {MIG_CONFIG_LABEL: value}}})


async def settled(akube: AsyncClient, node: str, timeout: float = 30) -> str:
    """Wait until the state is success or failed; return it."""

    async def done() -> str | None:
        labels = labels_of(await akube.get(Node, node))
        state = labels.get(MIG_STATE_LABEL)
        return state if state in {"success", "failed"} else None

    return cast(str, await eventually(done, timeout=timeout, interval=0.1))


async def deploy_labels(akube: AsyncClient, node: str) -> dict[str, str]:
    n = await akube.get(Node, node)
    return {k: v for k, v in labels_of(n).items() if k.startswith(DEPLOY)}


async def events(akube: AsyncClient, node: str) -> list[tuple[str, str]]:
    return [
        (e.reason or "", e.message or "")
        async for e in akube.list(Event, namespace="default", fields={"involvedObject.name": node})
    ]


async def operand_pods(akube: AsyncClient, namespace: str, node: str) -> list[str]:
    pods = [
        meta(p).name
        async for p in akube.list(Pod, namespace=namespace, fields={"spec.nodeName": node})
        if p.status is not None and p.status.phase == "Running"
    ]
    return sorted(cast(list[str], pods))


def layout(node: SimNode) -> list[Counter[str] | None]:
    """Per GPU: its MIG devices by profile, or None with MIG off."""
    return [(Counter(s.devices) if s.enabled else None) for s in read_node(SimNvml(node.gpu_state))]


# -- the happy path ----------------------------------------------------------------------------


async def test_one_label_change_plans_the_node_once_and_once_more_under_the_lock(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each plan reads the node's GPUs from NVML (`mig.parted.read_gpus`). A change is
    planned once and that plan carried through its steps, and planned once more under the
    node's MIG lock; a value already applied is planned once."""
    e = await env("mm-plans")
    node: SimNode = e["node"]
    await e["start"]()
    reads: list[int] = []
    read_gpus = parted.read_gpus

    def counted(nvml: Any) -> Any:
        reads.append(1)
        return read_gpus(nvml)

    monkeypatch.setattr(parted, "read_gpus", counted)
    await label(akube, node.name, "all-1g.18gb")
    assert await settled(akube, node.name) == "success"
    assert layout(node) == [Counter({"1g.18gb": 7})] * 8
    assert len(reads) == 2
    reads.clear()
    # the same value asked for again (the state label removed): already applied
    await akube.patch(Node, node.name, {"metadata": {"labels": {MIG_STATE_LABEL: None}}})
    assert await settled(akube, node.name) == "success"
    assert len(reads) == 1


async def test_a_layout_is_applied_with_operands_paused_and_restored_exactly(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-apply", cdi_enabled=True)
    node: SimNode = e["node"]
    await eventually(lambda: _count(operand_pods(akube, e["namespace"], node.name), 2))
    manager, _ = await e["start"]()
    before = await deploy_labels(akube, node.name)

    await label(akube, node.name, "all-1g.18gb")
    assert await settled(akube, node.name) == "success"
    assert e["recorder"].states == ["pending", "success"]
    assert PAUSED in e["recorder"].deploy_values  # the operands were paused on the way
    assert await deploy_labels(akube, node.name) == before  # ...and exactly restored
    assert layout(node) == [Counter({"1g.18gb": 7})] * 8
    n = await akube.get(Node, node.name)
    assert PAUSED_ANNOTATION not in (meta(n).annotations or {})
    # the operands' pods come back
    await eventually(lambda: _count(operand_pods(akube, e["namespace"], node.name), 2))
    reasons = [r for r, _ in await events(akube, node.name)]
    assert "MigConfigPending" in reasons
    assert "MigConfigSuccess" in reasons
    # the management CDI spec names the new MIG devices
    spec = yaml.safe_load((manager.settings.cdi_dir / "management.nvidia.com-gpu.yaml").read_text())
    assert spec["kind"] == "management.nvidia.com/gpu"
    assert sum(1 for d in spec["devices"] if ":" in d["name"]) == 56
    # without a configured file or ConfigMap, the layouts are generated and published
    cm = await akube.get(ConfigMap, "mm-apply-mig-config", namespace=e["namespace"])
    assert cast(dict[str, str], meta(cm).labels)["nvidia.com/node-name"] == "mm-apply"
    assert "all-1g.18gb:" in cast(dict[str, str], cm.data)["config.yaml"]
    assert cast(dict[str, str], cm.data)["config.yaml"].startswith("# DO NOT EDIT")

    # all-disabled gives 8 whole GPUs back
    await label(akube, node.name, "all-disabled")
    await eventually(lambda: _state_after(akube, node.name, e["recorder"], 4))
    assert e["recorder"].states == ["pending", "success", "pending", "success"]
    assert layout(node) == [None] * 8
    assert await deploy_labels(akube, node.name) == before


async def _count(pods: Awaitable[list[str]], n: int) -> bool:
    return len(await pods) == n


async def _state_after(akube: AsyncClient, node: str, recorder: Recorder, n: int) -> bool:
    return len(recorder.states) >= n and recorder.states[-1] in {"success", "failed"}


async def test_an_applied_layout_succeeds_without_disturbing_anything(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-noop", labels={MIG_CONFIG_LABEL: "all-disabled"})
    await e["start"]()
    assert await settled(akube, "mm-noop") == "success"
    assert e["recorder"].states == ["success"]
    assert PAUSED not in e["recorder"].deploy_values


# -- refusals: nothing is touched -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ("all-1g.18gbb", "unknown config name 'all-1g.18gbb'"),
        ("too-many", "does not fit one h200-nvl"),
        ("wrong-index", "field devices, value 9: out of range, this node has 8 GPUs"),
    ],
)
async def test_a_layout_with_a_typo_or_that_does_not_fit_fails_and_changes_nothing(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient, config: str, why: str
) -> None:
    custom = """
version: v1
mig-configs:
  all-disabled: [{devices: all, mig-enabled: false}]
  too-many: [{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 8}}]
  wrong-index:
    - {devices: [0, 1, 2, 3, 4, 5, 6, 7], mig-enabled: false}
    - {devices: [9], mig-enabled: true, mig-devices: {"7g.141gb": 1}}
"""
    e = await env(f"mm-refuse-{len(config)}", config_map="custom-mig", unknown_config_wait_s=0)
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="custom-mig"), data={"config.yaml": custom}),
        namespace=e["namespace"],
    )
    node: SimNode = e["node"]
    before_gpus = layout(node)
    before = await deploy_labels(akube, node.name)
    await e["start"]()
    await label(akube, node.name, config)
    assert await settled(akube, node.name) == "failed"
    assert e["recorder"].states == ["failed"]  # never pending
    assert PAUSED not in e["recorder"].deploy_values
    assert await deploy_labels(akube, node.name) == before
    assert layout(node) == before_gpus
    failures = [m for r, m in await events(akube, node.name) if r == "MigConfigFailed"]
    assert len(failures) == 1
    assert why in failures[0]
    assert "GPU 0 (h200-nvl): MIG disabled" in failures[0]  # the GPUs' actual state


async def test_a_gpu_a_workload_pod_holds_is_not_repartitioned(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-busy", config_map="around-the-busy-gpu", labels={"pool": "mm-busy"})
    node: SimNode = e["node"]
    nvml = SimNvml(node.gpu_state)
    uuids = [d.uuid for d in nvml.devices()]
    plugin = FakePlugin(node.devices.plugin_dir, "nvidia.com/gpu", uuids)
    await plugin.start()
    try:
        workload = Pod.from_dict(
            {
                "metadata": {"name": "trainer"},
                "spec": {
                    "nodeSelector": {"pool": "mm-busy"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
        )
        await akube.create(workload, namespace=e["namespace"])  # type: ignore[call-overload]
        await eventually(lambda: _running(akube, "trainer", e["namespace"]))
        (held,) = plugin.allocate_calls[-1]
        busy = uuids.index(held)
        others = [i for i in range(8) if i != busy]
        config = {
            "version": "v1",
            "mig-configs": {
                "all-1g.18gb": [
                    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}
                ],
                "around": [
                    {"devices": [busy], "mig-enabled": False},
                    {"devices": others, "mig-enabled": True, "mig-devices": {"1g.18gb": 7}},
                ],
            },
        }
        await akube.create(  # type: ignore[call-overload]
            ConfigMap(
                metadata=ObjectMeta(name="around-the-busy-gpu"),
                data={"config.yaml": yaml.safe_dump(config)},
            ),
            namespace=e["namespace"],
        )
        await e["start"]()
        await label(akube, node.name, "all-1g.18gb")
        assert await settled(akube, node.name) == "failed"
        assert PAUSED not in e["recorder"].deploy_values  # refused before any disruption
        assert layout(node) == [None] * 8
        (message,) = [m for r, m in await events(akube, node.name) if r == "MigConfigFailed"]
        assert f"GPU {busy}: {e['namespace']}/trainer" in message

        # a layout that leaves that GPU alone goes ahead
        await label(akube, node.name, "around")
        await eventually(lambda: _state_after(akube, node.name, e["recorder"], 3))
        assert e["recorder"].states == ["failed", "pending", "success"]
        expected: list[Counter[str] | None] = [Counter({"1g.18gb": 7})] * 8
        expected[busy] = None
        assert layout(node) == expected
    finally:
        await plugin.stop()


async def _running(akube: AsyncClient, name: str, namespace: str) -> bool:
    pod = await akube.get(Pod, name, namespace=namespace)
    return pod.status is not None and pod.status.phase == "Running"


# -- every wait has a timeout --------------------------------------------------------------------


async def test_operand_pods_that_do_not_go_fail_the_change_and_restore_the_labels(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-stuck", pods_timeout_s=1.0)
    node: SimNode = e["node"]
    # a pod that needs the device-plugin label but that no controller removes
    stuck = Pod.from_dict(
        {
            "metadata": {"name": "stuck-client"},
            "spec": {
                "nodeName": node.name,
                "nodeSelector": {DEPLOY + "device-plugin": "true"},
                "containers": [{"name": "main", "image": "registry.example/client:1"}],
            },
        }
    )
    await akube.create(stuck, namespace=e["namespace"])  # type: ignore[call-overload]
    await eventually(lambda: _running(akube, "stuck-client", e["namespace"]))
    before = await deploy_labels(akube, node.name)
    await e["start"]()
    await label(akube, node.name, "all-1g.18gb")
    assert await settled(akube, node.name) == "failed"
    # the recorder's watch may lag the read that saw "failed"
    await eventually(lambda: _state_after(akube, node.name, e["recorder"], 2))
    assert e["recorder"].states == ["pending", "failed"]
    assert await deploy_labels(akube, node.name) == before
    assert layout(node) == [None] * 8
    (message,) = [m for r, m in await events(akube, node.name) if r == "MigConfigFailed"]
    assert f"operand pods still on the node after 1s: {e['namespace']}/stuck-client" in message


# -- crashes and reboots converge -------------------------------------------------------------------


@pytest.mark.parametrize("step", ["validated", "paused", "operands-gone", "applied", "cdi"])
async def test_a_manager_killed_at_any_step_converges_when_it_starts_again(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient, step: str
) -> None:
    e = await env("mm-crash", cdi_enabled=True)
    node: SimNode = e["node"]
    before = await deploy_labels(akube, node.name)

    async def crash_at(name: str) -> None:
        if name == step:
            raise Crash(step)

    _, task = await e["start"](on_step=crash_at)
    await label(akube, node.name, "all-1g.18gb")
    with pytest.raises(Crash):
        await asyncio.wait_for(task, 30)
    # what a killed manager leaves behind: possibly pending, operands possibly paused
    await e["start"]()
    assert await settled(akube, node.name) == "success"
    assert await deploy_labels(akube, node.name) == before
    assert layout(node) == [Counter({"1g.18gb": 7})] * 8
    n = await akube.get(Node, node.name)
    assert PAUSED_ANNOTATION not in (meta(n).annotations or {})
    assert (e["recorder"].states or ["success"])[-1] == "success"


async def test_with_reboot_a_mode_change_that_needs_a_reset_goes_through_rebooting(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-reboot", gpus="a100-80gb:2", with_reboot=True)
    node: SimNode = e["node"]
    before = await deploy_labels(akube, node.name)
    rebooted = asyncio.Event()

    async def reboot() -> None:
        await node.reboot()
        rebooted.set()

    _, task = await e["start"](reboot=reboot)
    await label(akube, node.name, "all-1g.10gb")
    await asyncio.wait_for(rebooted.wait(), 30)
    # a reboot ends the manager's process; the state says where it was
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert labels_of(await akube.get(Node, node.name))[MIG_STATE_LABEL] == "rebooting"
    assert (await deploy_labels(akube, node.name))[DEPLOY + "device-plugin"] == PAUSED
    # the manager of the next boot carries on
    await e["start"]()
    assert await settled(akube, node.name) == "success"
    assert e["recorder"].states == ["pending", "rebooting", "pending", "success"]
    assert layout(node) == [Counter({"1g.10gb": 7})] * 2
    assert await deploy_labels(akube, node.name) == before


@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        ("command fails", "'reboot' exited with 1: no permission"),
        ("no reboot comes", "the node did not reboot within 1s"),
    ],
)
async def test_a_reboot_that_does_not_happen_fails_and_undoes_the_pending_mode(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient, outcome: str, why: str
) -> None:
    e = await env(f"mm-noboot-{len(outcome)}", gpus="a100-80gb:2", with_reboot=True)
    node: SimNode = e["node"]
    before = await deploy_labels(akube, node.name)

    async def reboot() -> None:
        if outcome == "command fails":
            raise Failed("'reboot' exited with 1: no permission")

    await e["start"](reboot=reboot, reboot_timeout_s=1.0)
    await label(akube, node.name, "all-1g.10gb")
    assert await settled(akube, node.name) == "failed"
    assert e["recorder"].states == ["pending", "rebooting", "failed"]
    assert await deploy_labels(akube, node.name) == before
    nvml = SimNvml(node.gpu_state)
    assert [nvml.mig_mode(i) for i in range(2)] == [MigMode(False, False)] * 2
    (message,) = [m for r, m in await events(akube, node.name) if r == "MigConfigFailed"]
    assert why in message


async def test_without_reboot_a_reset_applies_the_mode_change(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-reset", gpus="a100-80gb:2")
    await e["start"]()
    await label(akube, "mm-reset", "all-1g.10gb")
    assert await settled(akube, "mm-reset") == "success"
    assert e["recorder"].states == ["pending", "success"]
    assert layout(e["node"]) == [Counter({"1g.10gb": 7})] * 2


async def test_the_inference_mix_example_from_a_configmap(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-mix", gpus="h200-nvl:4", config_map="custom-mig-config")
    text = (EXAMPLES / "inference-mix.yaml").read_text()
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="custom-mig-config"), data={"config.yaml": text}),
        namespace=e["namespace"],
    )
    await e["start"]()
    await label(akube, "mm-mix", "inference-mix")
    assert await settled(akube, "mm-mix") == "success"
    assert layout(e["node"]) == [
        Counter({"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        None,
        None,
        None,
    ]
    # no generated ConfigMap when one is configured
    with pytest.raises(ApiError):
        await akube.get(ConfigMap, "mm-mix-mig-config", namespace=e["namespace"])


async def test_removing_the_state_label_retries_the_same_config(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-retry", config_map="later")
    await e["start"]()
    await label(akube, "mm-retry", "all-1g.18gb")
    assert await settled(akube, "mm-retry") == "failed"  # the ConfigMap does not exist yet
    text = (
        (EXAMPLES / "inference-mix.yaml").read_text().replace("[1, 2, 3]", "[1, 2, 3, 4, 5, 6, 7]")
    )
    text += '  all-1g.18gb: [{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]\n'
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="later"), data={"config.yaml": text}),
        namespace=e["namespace"],
    )
    await akube.patch(Node, "mm-retry", {"metadata": {"labels": {MIG_STATE_LABEL: None}}})
    await eventually(lambda: _state_after(akube, "mm-retry", e["recorder"], 3))
    assert e["recorder"].states == ["failed", "pending", "success"]


# -- a config name the layouts do not have yet ------------------------------------------------------

SWITCHING = """
version: v1
mig-configs:
  all-disabled: [{devices: all, mig-enabled: false}]
"""


async def test_a_config_name_that_arrives_while_waiting_is_applied_and_never_failed(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    """Patching the MIG ConfigMap's name and labelling the node at once: the label can name
    a config before the manager reads the ConfigMap that has it (issue 17)."""
    e = await env("mm-switch", gpus="h200-nvl:2", config_map="switching")
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="switching"), data={"config.yaml": SWITCHING}),
        namespace=e["namespace"],
    )
    await e["start"](unknown_config_wait_s=30)
    await label(akube, "mm-switch", "all-1g.18gb")

    async def pending() -> bool:
        labels = labels_of(await akube.get(Node, "mm-switch"))
        return labels.get(MIG_STATE_LABEL) == "pending"

    await eventually(pending, timeout=10, interval=0.1)
    text = (
        SWITCHING
        + '  all-1g.18gb: [{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]\n'
    )
    await akube.patch(
        ConfigMap, "switching", {"data": {"config.yaml": text}}, namespace=e["namespace"]
    )
    assert await settled(akube, "mm-switch") == "success"
    assert "failed" not in e["recorder"].states
    assert e["recorder"].states[-1] == "success"
    assert layout(e["node"]) == [Counter({"1g.18gb": 7})] * 2
    reasons = [r for r, _ in await events(akube, "mm-switch")]
    assert "MigConfigWaiting" in reasons and "MigConfigFailed" not in reasons


async def test_a_config_name_that_never_arrives_fails_after_the_wait_saying_so(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-never", gpus="h200-nvl:1", config_map="switching")
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="switching"), data={"config.yaml": SWITCHING}),
        namespace=e["namespace"],
    )
    before = layout(e["node"])
    await e["start"](unknown_config_wait_s=1)
    await label(akube, "mm-never", "all-1g.18gbb")
    assert await settled(akube, "mm-never") == "failed"
    assert e["recorder"].states == ["pending", "failed"]
    assert PAUSED not in e["recorder"].deploy_values  # nothing was paused for it
    assert layout(e["node"]) == before
    (failure,) = [m for r, m in await events(akube, "mm-never") if r == "MigConfigFailed"]
    assert "unknown config name 'all-1g.18gbb'" in failure
    assert "after waiting 1s (known: all-disabled)" in failure


async def test_a_new_label_ends_the_wait_for_a_missing_name(
    env: Callable[..., Awaitable[Env]], akube: AsyncClient
) -> None:
    e = await env("mm-changed", gpus="h200-nvl:1", config_map="switching")
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="switching"), data={"config.yaml": SWITCHING}),
        namespace=e["namespace"],
    )
    await e["start"](unknown_config_wait_s=60)
    await label(akube, "mm-changed", "not-yet")
    await asyncio.sleep(0.5)
    await label(akube, "mm-changed", "all-disabled")
    assert await settled(akube, "mm-changed", timeout=15) == "success"
    assert "failed" not in e["recorder"].states
