"""The simulated kubelet's side of Dynamic Resource Allocation (DRA).

The real kube-scheduler and resource-claim controller allocate claims against the
ResourceSlices a DRA driver publishes; what is left for the kubelet, and done here:

- the plugin watcher's DRA handler: a plugin the watcher (``pluginwatcher``) finds is
  checked (type, name, endpoint, a version both speak) and kept per driver; a driver with
  no plugin left loses its slices after a delay;
- at kubelet start, the node's ResourceSlices are deleted (drivers republish on registration);
- before a pod's containers start, its claims must be allocated and reserved for it, and are
  prepared with ``NodePrepareResources`` (one call per driver); a failure is retried with
  backoff and reported as the kubelet does (event ``FailedPrepareDynamicResources``);
- the CDI devices a plugin returned become the container's environment, resolved against
  the CDI specs under the node's spec directories by `kubegpu.cdi.registry`, as the
  container runtime would;
- after the last pod on the node using a claim ends, ``NodeUnprepareResources``;
- pod-resources ``dynamic_resources`` for each container;
- extended resources backed by DRA (``DeviceClass.extendedResourceName``, Kubernetes 1.36+):
  the claim the scheduler made for a pod's ``nvidia.com/gpu`` limit is named in
  ``status.extendedResourceClaimStatus`` and prepared like the pod's own; each container gets
  the devices of the requests mapped to it, and those resources need no device plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubegpu.base.tasks import cancel_all, start_kept
from kubegpu.catalog.nvidia import NVIDIA_VISIBLE_DEVICES, VISIBLE_DEVICES_VOID
from kubegpu.cdi.registry import Registry, node_spec_dirs
from kubegpu.kube.kubelet import (
    DRA_PLUGIN_TYPE,
    DRA_PREPARE_TIMEOUT_S,
    DRA_SUPPORTED_VERSIONS,
    DRA_V1_SERVICE,
    DRA_V1_VERSION,
    DRA_V1BETA1_SERVICE,
    DRA_V1BETA1_VERSION,
    PLUGINS_REGISTRY_PATH,
    unix_target,
)
from kubegpu.kube.kubelet import dra_v1_pb2 as dra
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.sim.kubelet.events import pod_event
from kubegpu.sim.kubelet.pluginwatcher import WATCH_INTERVAL_S, PluginWatcher

log = logging.getLogger(__name__)

Json = dict[str, Any]

FAILED_PREPARE = "FailedPrepareDynamicResources"  # the kubelet's event reason
WIPE_DELAY_S = 30.0  # a driver with no plugin left loses its slices after this long
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
# the version a plugin announces -> the gRPC service behind it (the messages are the same)
_SERVICES = {DRA_V1_VERSION: DRA_V1_SERVICE, DRA_V1BETA1_VERSION: DRA_V1BETA1_SERVICE}


class PrepareError(Exception):
    """A pod's claims cannot be prepared (yet); the message is what the kubelet reports."""


# --- pure decisions --------------------------------------------------------------------------


def choose_version(supported: Iterable[str]) -> str | None:
    """The newest DRA service both sides speak, or None."""
    offered = set(supported)
    return next((v for v in DRA_SUPPORTED_VERSIONS if v in offered), None)


def registration_problem(info: reg.PluginInfo) -> str | None:
    """Why a plugin cannot be registered as a DRA driver, or None when it can."""
    if info.type != DRA_PLUGIN_TYPE:
        return f"plugin type {info.type!r} is not supported (only {DRA_PLUGIN_TYPE!r})"
    if not info.name:
        return "PluginInfo.name (the driver) is empty"
    if not info.endpoint:
        return f"driver {info.name}: PluginInfo.endpoint is empty"
    if choose_version(info.supported_versions) is None:
        return (
            f"driver {info.name}: none of the supported versions "
            f"{list(info.supported_versions)} is one of {list(DRA_SUPPORTED_VERSIONS)}"
        )
    return None


def pod_claims(pod: Json) -> dict[str, str | None]:
    """The pod's claims: its name for each claim -> the ResourceClaim's name.

    A claim from a template is named in ``status.resourceClaimStatuses`` once the
    resource-claim controller made it (None until then); an entry without a name means the
    pod needs no claim there, and it is left out.
    """
    statuses = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: dict[str, str | None] = {}
    extended = extended_claim(pod)
    if extended is not None:
        out[EXTENDED_CLAIM] = extended
    for ref in pod["spec"].get("resourceClaims") or []:
        name = ref["name"]
        if ref.get("resourceClaimName"):
            out[name] = ref["resourceClaimName"]
        elif name not in statuses:
            out[name] = None
        elif statuses[name]:
            out[name] = statuses[name]
    return out


#: The key under which a pod's extended-resource claim is kept among its claims (not a DNS
#: label, so never one of the pod's own claim names).
EXTENDED_CLAIM = "<extended-resources>"


def _extended_status(pod: Json) -> Json:
    return (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}


def extended_claim(pod: Json) -> str | None:
    """The ResourceClaim the scheduler made for the pod's DRA-backed extended resources."""
    name = _extended_status(pod).get("resourceClaimName")
    return str(name) if name else None


def dra_backed_resources(pod: Json, container: str) -> set[str]:
    """The extended resources of `container` that the pod's extended-resource claim serves
    (the kubelet admits them without a device plugin)."""
    return {
        str(m.get("resourceName"))
        for m in _extended_status(pod).get("requestMappings") or []
        if m.get("containerName") == container
    }


def extended_requests(pod: Json, container: Json) -> list[tuple[str, str | None]]:
    """The container's (pod claim, request) pairs in the extended-resource claim: one per
    request mapped to a resource the container asks for, as the kubelet does."""
    asked = {
        k
        for part in ("requests", "limits")
        for k, v in ((container.get("resources") or {}).get(part) or {}).items()
        if str(v) not in ("0", "")
    }
    return [
        (EXTENDED_CLAIM, str(m["requestName"]))
        for m in _extended_status(pod).get("requestMappings") or []
        if m.get("containerName") == container["name"] and m.get("resourceName") in asked
    ]


def claim_not_ready(claim: Json, pod_uid: str) -> str | None:
    """Why the kubelet may not prepare the claim for the pod yet, or None."""
    name = f"{claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
    status = claim.get("status") or {}
    if not status.get("allocation"):
        return f"claim {name} is not allocated"
    if pod_uid not in {r.get("uid") for r in status.get("reservedFor") or []}:
        return f"claim {name} is not reserved for pod {pod_uid}"
    return None


def claim_drivers(claim: Json) -> list[str]:
    """The drivers of a claim's allocated devices, in first-seen order."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {})
    return list(dict.fromkeys(r["driver"] for r in results.get("results") or []))


def cdi_env(ids: Sequence[str], registry: Registry) -> dict[str, str]:
    """The environment CDI devices `ids` (``vendor/class=name``) add, as a runtime applies
    it (each spec's edits, then each device's), except that the devices' own
    NVIDIA_VISIBLE_DEVICES are joined: a simulated container has no device nodes, so that
    variable is what says which GPUs a multi-device claim gave it. ValueError: a name no
    spec defines."""
    resolved = registry.resolve(ids)
    error = resolved.error(registry.failure_notes())
    if error is not None:
        raise ValueError(error)
    env = resolved.edits.env_map()
    given = [
        v
        for f in resolved.devices
        for v in [f.device.edits.env_map().get(NVIDIA_VISIBLE_DEVICES, "")]
        if v not in ("", VISIBLE_DEVICES_VOID)
    ]
    if given:
        env[NVIDIA_VISIBLE_DEVICES] = ",".join(dict.fromkeys(given))
    return env


# --- state -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedDevice:
    driver: str
    pool: str
    device: str
    request_names: tuple[str, ...]
    cdi_ids: tuple[str, ...]
    share_id: str | None = None

    def serves(self, request: str | None) -> bool:
        """Whether a container asking for `request` (None: all of the claim) gets it."""
        if request is None or not self.request_names:
            return True
        return any(r == request or r.startswith(request + "/") for r in self.request_names)


@dataclass
class PreparedClaim:
    uid: str
    name: str
    namespace: str
    drivers: tuple[str, ...]
    devices: list[PreparedDevice]
    pods: set[str] = field(default_factory=set)  # pods on the node that use the claim
    prepared: bool = False  # every driver of the claim prepared it


@dataclass
class PodClaims:
    """What a pod uses: its claim names -> claim UIDs, and each container's claim refs."""

    claims: dict[str, str]
    containers: dict[str, list[tuple[str, str | None]]]


@dataclass
class DraPlugin:
    driver: str
    endpoint: Path
    version: str
    registration: Path
    channel: grpc.aio.Channel

    async def call(
        self, method: str, request: Any, response: Any, timeout: float = DRA_PREPARE_TIMEOUT_S
    ) -> Any:
        """One unary call of the announced service (v1 and v1beta1 share their messages)."""
        rpc = self.channel.unary_unary(
            f"/{_SERVICES[self.version]}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        return await rpc(request, timeout=timeout)


class DraManager:
    """The kubelet's DRA manager for one simulated node."""

    def __init__(
        self,
        node_name: str,
        root: Path,
        *,
        wipe_delay_s: float = WIPE_DELAY_S,
        watch_interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.node_name = node_name
        self.root = root
        self.registry = root / PLUGINS_REGISTRY_PATH.strip("/")
        self.cdi_dirs = node_spec_dirs(root)  # static, then dynamic (which wins)
        self.wipe_delay_s = wipe_delay_s
        self.plugins: dict[str, list[DraPlugin]] = {}  # driver -> plugins, newest last
        self.claims: dict[str, PreparedClaim] = {}  # claim uid -> prepared claim
        self.pods: dict[str, PodClaims] = {}  # pod uid -> its claims
        self._client: AsyncClient | None = None
        self.watcher = PluginWatcher(node_name, self.registry, self, watch_interval_s)
        self._wipes: dict[str, asyncio.Task[None]] = {}
        self._unprepares: list[asyncio.Task[None]] = []
        # one lock per claim: two pods sharing a claim prepare it once, while pods with
        # claims of their own prepare side by side, as the real kubelet's pod workers do
        self._claim_locks: dict[str, asyncio.Lock] = {}

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self, client: AsyncClient) -> None:
        """Kubelet start: wipe the node's slices, then register the plugins found."""
        self._client = client
        self.registry.mkdir(parents=True, exist_ok=True)
        await self.delete_slices()
        self.watcher.start()
        unused = [c for c in self.claims.values() if not c.pods]  # left by a restart
        if unused:
            self._unprepare_later(unused)

    async def stop(self) -> None:
        await self.watcher.stop()
        await cancel_all([*self._wipes.values(), *self._unprepares])
        self._wipes.clear()
        self._unprepares.clear()
        for plugins in self.plugins.values():
            for p in plugins:
                await p.channel.close()
        self.plugins.clear()

    async def restart(self) -> None:
        """Kubelet restart: registrations are forgotten and done again, slices wiped;
        prepared claims are kept (the real kubelet checkpoints them)."""
        client = self._client
        await self.stop()
        if client is not None:
            await self.start(client)

    def _api(self) -> AsyncClient:
        if self._client is None:
            raise RuntimeError(f"node {self.node_name}: the DRA manager is not started")
        return self._client

    # -- slices ---------------------------------------------------------------------------
    async def delete_slices(self, driver: str | None = None) -> int:
        """Delete the node's ResourceSlices (of one driver, or all); returns how many."""
        fields: dict[str, Any] = {"spec.nodeName": self.node_name}
        if driver is not None:
            fields["spec.driver"] = driver
        deleted = 0
        async for s in self._api().list(ResourceSlice, fields=fields):
            assert s.metadata is not None and s.metadata.name is not None
            with contextlib.suppress(ApiError):
                await self._api().delete(ResourceSlice, s.metadata.name)
                deleted += 1
        return deleted

    # -- the plugin watcher's DRA handler ------------------------------------------------
    def validate(self, info: reg.PluginInfo) -> str | None:
        """Why the plugin cannot be a DRA driver here, or None when it can."""
        problem = registration_problem(info)
        if problem is None and not self._endpoint(info.endpoint).exists():
            problem = f"driver {info.name}: endpoint {info.endpoint} does not exist"
        return problem

    async def register(self, info: reg.PluginInfo, socket: Path) -> None:
        version = choose_version(info.supported_versions)
        assert version is not None
        endpoint = self._endpoint(info.endpoint)
        plugin = DraPlugin(
            info.name, endpoint, version, socket, grpc.aio.insecure_channel(unix_target(endpoint))
        )
        self.plugins.setdefault(info.name, []).append(plugin)
        wipe = self._wipes.pop(info.name, None)
        if wipe is not None:
            wipe.cancel()
        log.info(
            "node %s: DRA driver %s registered (%s at %s)",
            self.node_name,
            info.name,
            version,
            endpoint,
        )

    def _endpoint(self, announced: str) -> Path:
        """A plugin names its endpoint as a host path; on a simulated node the host's
        /var/lib/kubelet is the node root's, unless the path exists as given."""
        inside = self.root / announced.lstrip("/")
        if inside.exists() or not Path(announced).exists():
            return inside
        return Path(announced)

    async def deregister(self, socket: Path) -> None:
        for driver, plugins in list(self.plugins.items()):
            for p in [p for p in plugins if p.registration == socket]:
                plugins.remove(p)
                await p.channel.close()
                log.info("node %s: DRA driver %s deregistered", self.node_name, driver)
            if not plugins:
                del self.plugins[driver]
                self._wipes[driver] = asyncio.create_task(self._wipe_later(driver))

    async def _wipe_later(self, driver: str) -> None:
        await asyncio.sleep(self.wipe_delay_s)
        self._wipes.pop(driver, None)
        if driver not in self.plugins:
            with contextlib.suppress(ApiError):
                await self.delete_slices(driver)

    def plugin(self, driver: str) -> DraPlugin:
        plugins = self.plugins.get(driver)
        if not plugins:
            raise PrepareError(f"DRA driver {driver} is not registered")
        return plugins[-1]

    @contextlib.asynccontextmanager
    async def _locked(self, claim_uids: Iterable[str]) -> AsyncIterator[None]:
        """Hold the lock of every claim named, taken in UID order so that two callers
        never wait on each other crosswise."""
        async with contextlib.AsyncExitStack() as stack:
            for uid in sorted(set(claim_uids)):
                lock = self._claim_locks.setdefault(uid, asyncio.Lock())
                await stack.enter_async_context(lock)
            yield

    # -- prepare --------------------------------------------------------------------------
    async def prepare_pod(
        self, pod: Json, waiting: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Return once the pod's claims are prepared, retrying with backoff; on each
        failure, the kubelet's event and `waiting` (e.g. push the pod's status)."""
        if not pod["spec"].get("resourceClaims") and extended_claim(pod) is None:
            return
        delay = BACKOFF_START_S
        while True:
            try:
                await self._prepare(pod)
                return
            except PrepareError as exc:
                message = str(exc)
            except Exception as exc:  # the API server or a socket failed mid-way:
                # retried like the kubelet's pod sync, never left to end the pod's task (a pod
                # would then stay Pending for good)
                log.warning("node %s: preparing claims: %r", self.node_name, exc)
                message = f"{type(exc).__name__}: {exc}"
            meta = pod["metadata"]
            log.info(
                "node %s: pod %s/%s: %s",
                self.node_name,
                meta.get("namespace"),
                meta["name"],
                message,
            )
            await self._event(
                pod, FAILED_PREPARE, f"Failed to prepare dynamic resources: {message}"
            )
            if waiting is not None:
                await waiting()
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)

    async def _prepare(self, pod: Json) -> None:
        meta = pod["metadata"]
        uid, namespace = meta["uid"], meta.get("namespace", "default")
        names = pod_claims(pod)
        if any(n is None for n in names.values()):
            # the status names template claims: read the pod as it is now (a pod bound by
            # the scheduler names them all already, so this is the rare path)
            try:
                pod = (await self._api().get(Pod, meta["name"], namespace=namespace)).to_dict()
            except ApiError as exc:
                raise PrepareError(f"cannot read pod: {exc.status.message}") from None
            if pod["metadata"]["uid"] != uid:
                raise PrepareError(f"pod {namespace}/{meta['name']} was replaced")
            names = pod_claims(pod)
        claims: dict[str, Json] = {}
        for pod_name, claim_name in names.items():
            if claim_name is None:
                raise PrepareError(f"waiting for the ResourceClaim of pod claim {pod_name!r}")
            try:
                obj = await self._api().get(ResourceClaim, claim_name, namespace=namespace)
            except ApiError as exc:
                raise PrepareError(
                    f"cannot get ResourceClaim {namespace}/{claim_name}: {exc.status.message}"
                ) from None
            claim = obj.to_dict()
            problem = claim_not_ready(claim, uid)
            if problem is not None:
                raise PrepareError(problem)
            claims[pod_name] = claim
        # Known before any plugin call, so a pod that goes away mid-way still has its
        # claims unprepared (unpreparing a claim a driver never prepared is harmless).
        self.pods[uid] = PodClaims(
            {n: c["metadata"]["uid"] for n, c in claims.items()},
            {
                c["name"]: [
                    *((r["name"], r.get("request")) for r in _claim_refs(c)),
                    *extended_requests(pod, c),
                ]
                for c in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
            },
        )
        for claim in claims.values():
            m = claim["metadata"]
            known = self.claims.setdefault(
                m["uid"],
                PreparedClaim(m["uid"], m["name"], namespace, tuple(claim_drivers(claim)), []),
            )
            known.pods.add(uid)
        async with self._locked(c["metadata"]["uid"] for c in claims.values()):
            todo = [c for c in claims.values() if not self.claims[c["metadata"]["uid"]].prepared]
            by_driver: dict[str, list[Json]] = {}
            for claim in todo:
                for driver in claim_drivers(claim):
                    by_driver.setdefault(driver, []).append(claim)
            devices: dict[str, list[PreparedDevice]] = {}
            for driver, group in by_driver.items():
                for claim_uid, got in (await self._prepare_with(driver, group)).items():
                    devices.setdefault(claim_uid, []).extend(got)
            for claim in todo:
                known = self.claims[claim["metadata"]["uid"]]
                known.devices, known.prepared = devices.get(known.uid, []), True

    async def _prepare_with(
        self, driver: str, claims: list[Json]
    ) -> dict[str, list[PreparedDevice]]:
        request = dra.NodePrepareResourcesRequest(claims=[_claim_message(c) for c in claims])
        plugin = self.plugin(driver)
        try:
            response: dra.NodePrepareResourcesResponse = await plugin.call(
                "NodePrepareResources", request, dra.NodePrepareResourcesResponse
            )
        except grpc.aio.AioRpcError as exc:
            raise PrepareError(
                f"NodePrepareResources of driver {driver} failed: {exc.code().name}: "
                f"{exc.details()}"
            ) from None
        out: dict[str, list[PreparedDevice]] = {}
        for claim in claims:
            m = claim["metadata"]
            result = response.claims.get(m["uid"])
            if result is None:
                raise PrepareError(
                    f"driver {driver} returned no result for claim {m['namespace']}/{m['name']}"
                )
            if result.error:
                raise PrepareError(
                    f"driver {driver}: claim {m['namespace']}/{m['name']}: {result.error}"
                )
            out[m["uid"]] = [
                PreparedDevice(
                    driver,
                    d.pool_name,
                    d.device_name,
                    tuple(d.request_names),
                    tuple(d.cdi_device_ids),
                    d.share_id if d.HasField("share_id") else None,
                )
                for d in result.devices
            ]
        return out

    # -- unprepare ------------------------------------------------------------------------
    def release(self, pod_uid: str) -> None:
        """The pod ended or is gone: unprepare (in the background) each claim no other pod
        on the node uses any more."""
        used = self.pods.pop(pod_uid, None)
        if used is None:
            return
        done = []
        for claim_uid in used.claims.values():
            claim = self.claims.get(claim_uid)
            if claim is None:
                continue
            claim.pods.discard(pod_uid)
            if not claim.pods:
                done.append(claim)
        if done:
            self._unprepare_later(done)

    def _unprepare_later(self, claims: list[PreparedClaim]) -> None:
        start_kept(self._unprepares, self._unprepare(claims))

    async def _unprepare(self, claims: list[PreparedClaim]) -> None:
        delay = BACKOFF_START_S
        pending = list(claims)
        while pending:
            async with self._locked(c.uid for c in pending):
                pending = [c for c in pending if not c.pods]  # a new pod may use it again
                for claim in pending:  # a pod that takes the claim later prepares it again
                    claim.prepared = False
                failed: list[PreparedClaim] = []
                for driver in dict.fromkeys(d for c in pending for d in c.drivers):
                    group = [c for c in pending if driver in c.drivers]
                    refused = await self._unprepare_with(driver, group)
                    failed += [c for c in refused if all(c is not f for f in failed)]
                for claim in pending:
                    if all(claim is not f for f in failed) and not claim.pods:
                        self.claims.pop(claim.uid, None)
            pending = failed
            if pending:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)

    async def _unprepare_with(
        self, driver: str, claims: list[PreparedClaim]
    ) -> list[PreparedClaim]:
        """Unprepare `claims` with one driver; returns those that failed."""
        request = dra.NodeUnprepareResourcesRequest(
            claims=[dra.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        try:
            response: dra.NodeUnprepareResourcesResponse = await self.plugin(driver).call(
                "NodeUnprepareResources", request, dra.NodeUnprepareResourcesResponse
            )
        except (PrepareError, grpc.aio.AioRpcError) as exc:
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            log.warning("node %s: NodeUnprepareResources (%s): %s", self.node_name, driver, detail)
            return claims
        failed = []
        for c in claims:
            result = response.claims.get(c.uid)
            if result is None or result.error:
                why = result.error if result is not None else "no result"
                log.warning(
                    "node %s: unprepare claim %s/%s (%s): %s",
                    self.node_name,
                    c.namespace,
                    c.name,
                    driver,
                    why,
                )
                failed.append(c)
        return failed

    # -- what containers see --------------------------------------------------------------
    def _container_devices(
        self, pod_uid: str, container: str
    ) -> list[tuple[PreparedClaim, list[PreparedDevice]]]:
        used = self.pods.get(pod_uid)
        if used is None:
            return []
        out = []
        for pod_claim, request in used.containers.get(container, []):
            claim = self.claims.get(used.claims.get(pod_claim, ""))
            if claim is not None:
                out.append((claim, [d for d in claim.devices if d.serves(request)]))
        return out

    def cdi_devices(self, pod_uid: str, container: str) -> list[str]:
        ids = (
            i
            for _, ds in self._container_devices(pod_uid, container)
            for d in ds
            for i in d.cdi_ids
        )
        return list(dict.fromkeys(ids))

    def container_env(self, pod_uid: str, container: str) -> dict[str, str]:
        """The environment the container's CDI devices add (ValueError: unresolvable)."""
        ids = self.cdi_devices(pod_uid, container)
        return cdi_env(ids, Registry.scan(self.cdi_dirs)) if ids else {}

    def dynamic_resources(self, pod_uid: str, container: str) -> list[pr.DynamicResource]:
        """The container's claims as pod-resources reports them."""
        return [
            pr.DynamicResource(
                claim_name=claim.name,
                claim_namespace=claim.namespace,
                claim_resources=[
                    pr.ClaimResource(
                        cdi_devices=[pr.CDIDevice(name=i) for i in d.cdi_ids],
                        driver_name=d.driver,
                        pool_name=d.pool,
                        device_name=d.device,
                        share_id=d.share_id,
                    )
                    for d in devices
                ],
            )
            for claim, devices in self._container_devices(pod_uid, container)
        ]

    # -- events ---------------------------------------------------------------------------
    async def _event(self, pod: Json, reason: str, message: str) -> None:
        await pod_event(self._api(), self.node_name, pod, reason, message)


def _claim_refs(container: Json) -> list[Json]:
    refs: list[Json] = (container.get("resources") or {}).get("claims") or []
    return refs


def _claim_message(claim: Json) -> dra.Claim:
    m = claim["metadata"]
    return dra.Claim(namespace=m["namespace"], uid=m["uid"], name=m["name"])
