"""Read a live cluster into a `Snapshot`: list calls only, nothing is written.

What is read: every Node; the ClusterPolicies and GPUClusters (absent CRDs read as none);
the operator namespace's ConfigMaps, DaemonSets and pods; pods anywhere that ask for an
NVIDIA resource or hold resource claims; ResourceSlices (none where the API is not served);
Events about Nodes (namespace `default`, where node agents record them) and the operator
namespace's Events, the most recent `max_events` kept.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubegpu.catalog import nvidia
from kubegpu.doctor.snapshot import (
    ClaimRequestInfo,
    Condition,
    ConfigMapInfo,
    ContainerInfo,
    ContainerState,
    CustomObject,
    DaemonSetInfo,
    DeviceInfo,
    EventInfo,
    NodeInfo,
    PodInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
    Snapshot,
    Taint,
    Toleration,
    sorted_by_name,
)
from kubegpu.kube.nodes import EVENT_NAMESPACE
from kubegpu.kube.policy import ClusterPolicyResource, GPUClusterResource

DEFAULT_NAMESPACE = "gpu-operator"
MAX_EVENTS = 500
MESSAGE_CHARS = 2000  # a container's last message is cut here
LOG_LINES = 10  # of a failed operand container without a termination message


async def capture(
    client: AsyncClient,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    source: str = "",
    max_events: int = MAX_EVENTS,
    now: Callable[[], dt.datetime] | None = None,
) -> Snapshot:
    """The cluster behind `client` as a Snapshot (operator namespace `namespace`)."""
    taken = (now or (lambda: dt.datetime.now(dt.UTC)))()
    nodes = [_node(n) async for n in client.list(Node)]
    policies = await _optional(client, ClusterPolicyResource, "ClusterPolicy")
    clusters = await _optional(client, GPUClusterResource, "GPUCluster")
    config_maps = [_config_map(c) async for c in client.list(ConfigMap, namespace=namespace)]
    daemon_sets = [_daemon_set(d) async for d in client.list(DaemonSet, namespace=namespace)]
    pods: dict[str, PodInfo] = {}
    async for pod in client.list(Pod, namespace="*"):
        info = _pod(pod)
        if info.namespace == namespace or info.gpu_resources or info.claims:
            pods[info.key] = info
    for key, info in list(pods.items()):
        if info.namespace == namespace:
            pods[key] = await _with_last_logs(client, info)
    slices = await _slices(client)
    claims = await _claims(client)
    events = [_event(e) async for e in client.list(Event, namespace=namespace)]
    if namespace != EVENT_NAMESPACE:
        events += [
            _event(e)
            async for e in client.list(Event, namespace=EVENT_NAMESPACE)
            if e.involvedObject.kind == "Node"
        ]
    events = sorted(events, key=lambda e: e.time)[-max_events:] if max_events else []
    return Snapshot(
        taken_at=taken.strftime("%Y-%m-%dT%H:%M:%SZ"),
        source=source,
        operator_namespace=namespace,
        nodes=sorted_by_name(nodes),
        cluster_policies=sorted_by_name(policies),
        gpu_clusters=sorted_by_name(clusters),
        config_maps=sorted_by_name(config_maps),
        daemon_sets=sorted_by_name(daemon_sets),
        pods=sorted_by_name(pods.values()),
        resource_slices=sorted_by_name(slices),
        resource_claims=sorted_by_name(claims),
        events=tuple(events),
    )


async def capture_config(config: KubeConfig, namespace: str | None = None) -> Snapshot:
    """The cluster of a kubeconfig (its current context) as a Snapshot: what `kubegpu
    doctor`, `why` and `plan --kubeconfig` read."""
    client = AsyncClient(config)
    try:
        context = config.current_context or ""
        return await capture(
            client, namespace=namespace or DEFAULT_NAMESPACE, source=f"kubeconfig {context}".strip()
        )
    finally:
        await client.close()


# --- optional APIs ----------------------------------------------------------------------------


def _absent(exc: ApiError | httpx2.HTTPStatusError) -> bool:
    """The API (a CRD, resource.k8s.io) is not served. lightkube raises ApiError for a
    404 with a Status body, and httpx's own error when the answer has none (an API group
    the server does not know at all)."""
    if isinstance(exc, ApiError):
        return exc.status.code in (404, 405)
    return exc.response.status_code in (404, 405)


async def _optional(client: AsyncClient, resource: Any, kind: str) -> list[CustomObject]:
    """Objects of a CRD that may not be installed (then: none)."""
    try:
        return [
            CustomObject(
                kind=kind,
                name=_meta(obj).name or "",
                spec=dict(obj.get("spec") or {}),
                status=dict(obj.get("status") or {}),
            )
            async for obj in client.list(resource)
        ]
    except (ApiError, httpx2.HTTPStatusError) as exc:
        if _absent(exc):
            return []
        raise


async def _slices(client: AsyncClient) -> list[ResourceSliceInfo]:
    try:
        return [_slice(s) async for s in client.list(ResourceSlice)]
    except (ApiError, httpx2.HTTPStatusError) as exc:
        if _absent(exc):
            return []
        raise


async def _claims(client: AsyncClient) -> list[ResourceClaimInfo]:
    try:
        return [_claim(c) async for c in client.list(ResourceClaim, namespace="*")]
    except (ApiError, httpx2.HTTPStatusError) as exc:
        if _absent(exc):
            return []
        raise


def _claim(c: ResourceClaim) -> ResourceClaimInfo:
    requests = []
    for r in (c.spec.devices.requests or []) if c.spec and c.spec.devices else []:
        # firstAvailable: the first alternative speaks for the request
        subs = r.firstAvailable or []
        exact: Any = r.exactly if r.exactly is not None else (subs[0] if subs else None)
        requests.append(
            ClaimRequestInfo(
                name=r.name,
                device_class=(exact.deviceClassName or "") if exact else "",
                selectors=tuple(s.cel.expression for s in (exact.selectors or []) if s.cel)
                if exact
                else (),
                count=(exact.count or 1) if exact else 1,
            )
        )
    return ResourceClaimInfo(
        namespace=_meta(c).namespace or "",
        name=_meta(c).name or "",
        requests=tuple(requests),
        allocated=bool(c.status and c.status.allocation),
    )


async def _with_last_logs(client: AsyncClient, pod: PodInfo) -> PodInfo:
    """An operand pod whose failed containers left no termination message gets the tail of
    their log instead (what `kubectl logs` shows while the container waits to restart)."""
    containers = []
    for c in pod.containers:
        failed = c.state == "terminated" or (c.state == "waiting" and c.restart_count > 0)
        if failed and not c.last_message and c.last_exit_code not in (None, 0):
            try:
                lines = [
                    line
                    async for line in client.log(
                        pod.name, namespace=pod.namespace, container=c.name, tail_lines=LOG_LINES
                    )
                ]
            except ApiError:
                lines = []
            text = _plain(lines)
            if text:
                containers.append(c.model_copy(update={"last_message": text[-MESSAGE_CHARS:]}))
                continue
        containers.append(c)
    return pod.model_copy(update={"containers": tuple(containers)})


_BOX = re.compile(r"[\u2500-\u257f]+")
_SPACES = re.compile(r"[ \t]+")


def _plain(lines: list[str]) -> str:
    """Log lines as text: box-drawing characters (rich's error panels) and runs of blanks
    removed, empty lines dropped."""
    kept = (_SPACES.sub(" ", _BOX.sub(" ", line)).strip() for line in lines)
    return "\n".join(line for line in kept if line)


# --- conversions ------------------------------------------------------------------------------


def _str_map(m: Mapping[str, Any] | None) -> dict[str, str]:
    return {k: str(v) for k, v in (m or {}).items()}


def _meta(obj: Any) -> ObjectMeta:
    meta = obj.metadata
    return meta if meta is not None else ObjectMeta()


def _node(node: Node) -> NodeInfo:
    meta, spec, status = _meta(node), node.spec, node.status
    return NodeInfo(
        name=meta.name or "",
        labels=_str_map(meta.labels),
        annotations=_str_map(meta.annotations),
        capacity=_str_map(status.capacity if status else None),
        allocatable=_str_map(status.allocatable if status else None),
        conditions=tuple(
            Condition(type=c.type, status=c.status, reason=c.reason or "", message=c.message or "")
            for c in (status.conditions if status and status.conditions else [])
        ),
        taints=tuple(
            Taint(key=t.key, value=t.value or "", effect=t.effect)
            for t in (spec.taints if spec and spec.taints else [])
        ),
        unschedulable=bool(spec and spec.unschedulable),
    )


def _config_map(cm: ConfigMap) -> ConfigMapInfo:
    return ConfigMapInfo(
        namespace=_meta(cm).namespace or "",
        name=_meta(cm).name or "",
        labels=_str_map(_meta(cm).labels),
        data=dict(cm.data or {}),
    )


def _daemon_set(ds: DaemonSet) -> DaemonSetInfo:
    template = ds.spec.template.spec if ds.spec and ds.spec.template else None
    first = template.containers[0] if template and template.containers else None
    status = ds.status
    return DaemonSetInfo(
        namespace=_meta(ds).namespace or "",
        name=_meta(ds).name or "",
        labels=_str_map(_meta(ds).labels),
        node_selector=_str_map(template.nodeSelector if template else None),
        image=(first.image or "") if first else "",
        args=tuple((first.command or []) + (first.args or [])) if first else (),
        env={e.name: e.value for e in (first.env or []) if e.value is not None} if first else {},
        desired=status.desiredNumberScheduled if status else 0,
        ready=status.numberReady if status else 0,
        available=(status.numberAvailable or 0) if status else 0,
    )


def _quantities(containers: Iterable[Any], field: str) -> dict[str, str]:
    """NVIDIA resources summed over containers (integer quantities; others kept as given)."""
    out: dict[str, str] = {}
    for c in containers:
        resources = getattr(c.resources, field, None) if c.resources else None
        for key, value in (resources or {}).items():
            if not key.startswith(nvidia.PREFIX):
                continue
            text = str(value)
            if key in out and out[key].isdigit() and text.isdigit():
                text = str(int(out[key]) + int(text))
            out[key] = text
    return out


def _pod(pod: Pod) -> PodInfo:
    meta, spec, status = _meta(pod), pod.spec, pod.status
    containers = spec.containers if spec else []
    owner = next(iter(meta.ownerReferences or []), None)
    unscheduled = next(
        (
            c
            for c in ((status.conditions or []) if status else [])
            if c.type == "PodScheduled" and c.status == "False"
        ),
        None,
    )
    claim_names = {
        s.name: s.resourceClaimName
        for s in ((status.resourceClaimStatuses or []) if status else [])
        if s.resourceClaimName
    }
    claim_objects = [
        c.resourceClaimName or claim_names.get(c.name, "")
        for c in ((spec.resourceClaims or []) if spec else [])
    ]
    return PodInfo(
        namespace=meta.namespace or "",
        name=meta.name or "",
        node=(spec.nodeName or "") if spec else "",
        phase=(status.phase or "") if status else "",
        reason=(status.reason or "") if status else "",
        message=((status.message or "") if status else "")[:MESSAGE_CHARS],
        unscheduled_reason=(unscheduled.reason or "") if unscheduled else "",
        unscheduled_message=((unscheduled.message or "") if unscheduled else "")[:MESSAGE_CHARS],
        node_selector=_str_map(spec.nodeSelector if spec else None),
        tolerations=tuple(
            Toleration(
                key=t.key or "",
                operator=t.operator or "Equal",
                value=t.value or "",
                effect=t.effect or "",
            )
            for t in ((spec.tolerations or []) if spec else [])
        ),
        claim_objects=tuple(n for n in claim_objects if n),
        labels=_str_map(meta.labels),
        annotations=_str_map(meta.annotations),
        owner_kind=owner.kind if owner else "",
        owner_name=owner.name if owner else "",
        requests=_quantities(containers, "requests"),
        limits=_quantities(containers, "limits"),
        claims=tuple(c.name for c in (spec.resourceClaims or [])) if spec else (),
        containers=tuple(_container(c) for c in (status.containerStatuses or [] if status else [])),
    )


def _container(c: Any) -> ContainerInfo:
    state: ContainerState = "unknown"
    reason, message, started = "", "", ""
    if c.state is not None:
        if c.state.running is not None:
            state = "running"
            started = _rfc3339(c.state.running.startedAt)
        elif c.state.waiting is not None:
            state = "waiting"
            reason, message = c.state.waiting.reason or "", c.state.waiting.message or ""
        elif c.state.terminated is not None:
            state = "terminated"
            t = c.state.terminated
            reason, message = t.reason or "", t.message or ""
    last = c.lastState.terminated if c.lastState is not None else None
    return ContainerInfo(
        name=c.name,
        ready=bool(c.ready),
        restart_count=c.restartCount or 0,
        state=state,
        reason=reason,
        message=message[:MESSAGE_CHARS],
        started_at=started,
        last_exit_code=last.exitCode if last is not None else None,
        last_reason=(last.reason or "") if last is not None else "",
        last_message=((last.message or "") if last is not None else "")[:MESSAGE_CHARS],
    )


def _slice(s: ResourceSlice) -> ResourceSliceInfo:
    spec = s.spec
    devices = []
    for d in spec.devices or []:
        attrs: dict[str, str] = {}
        for key, attr in (d.attributes or {}).items():
            for field in ("string", "int", "bool", "version"):
                # lightkube leaves a map of attributes as plain dicts
                value = attr.get(field) if isinstance(attr, dict) else getattr(attr, field, None)
                if value is not None:
                    attrs[key] = str(value).lower() if field == "bool" else str(value)
                    break
        devices.append(DeviceInfo(name=d.name, attributes=attrs))
    return ResourceSliceInfo(
        name=_meta(s).name or "",
        driver=spec.driver,
        node=spec.nodeName or "",
        pool=spec.pool.name if spec.pool else "",
        devices=tuple(devices),
    )


def _event(e: Event) -> EventInfo:
    when = e.lastTimestamp or e.eventTime or e.firstTimestamp or _meta(e).creationTimestamp
    return EventInfo(
        namespace=_meta(e).namespace or "",
        kind=e.involvedObject.kind or "",
        name=e.involvedObject.name or "",
        type=e.type or "",
        reason=e.reason or "",
        message=(e.message or "")[:MESSAGE_CHARS],
        component=(e.source.component or "") if e.source else (e.reportingComponent or ""),
        count=e.count or 1,
        time=_rfc3339(when),
    )


def _rfc3339(when: Any) -> str:
    if when is None:
        return ""
    if isinstance(when, dt.datetime):
        moment: dt.datetime = when.astimezone(dt.UTC) if when.tzinfo is not None else when
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{when}"
