"""The real Kubernetes control plane, run as local processes for tests and the simulator.

:class:`ControlPlane` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(built by ``scripts/build-kubernetes``) on free loopback ports, with certificates made on the
spot, and writes an admin kubeconfig that kubectl and lightkube accept::

    with ControlPlane(Path("/tmp/cp")) as cp:
        client = lightkube.Client(lightkube.KubeConfig.from_file(cp.kubeconfig_path))

Layout of the work directory:

``pki/``
    CA, serving and client certificates, the service-account signing key pair.
``logs/<component>.log``
    each process's stdout and stderr.
``etcd/``
    etcd's data (wiped at start unless ``keep_data``).
``admin.kubeconfig``, ``kube-controller-manager.kubeconfig``, ``kube-scheduler.kubeconfig``
    kubeconfigs with the credentials embedded.
``pids``
    one line per running process, ``<name> <pid> <start-ticks>``; a later start (or
    :meth:`ControlPlane.cleanup_stale`) kills what a killed run left behind.
``lock``
    held (flock) while a control plane runs there, so a live one is never taken for stale.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import yaml

from kubegpu.kube.versions import UnsupportedVersion
from kubegpu.sim.controlplane import apiserver, controllermanager, etcd, kube, scheduler
from kubegpu.sim.controlplane.addr import LOOPBACK, free_port
from kubegpu.sim.controlplane.binaries import (
    APISERVER,
    COMPONENTS,
    CONTROLLER_MANAGER,
    ETCD,
    SCHEDULER,
    check_binaries,
    find_bin_dir,
)
from kubegpu.sim.controlplane.certs import (
    CertificateAuthority,
    IssuedCert,
    generate_signing_key,
    write_private,
    write_public,
)
from kubegpu.sim.controlplane.k8s_version import version_gates
from kubegpu.sim.controlplane.kube import CLUSTER_NAME, SERVICE_IP
from kubegpu.sim.controlplane.pids import (
    PidRecord,
    read_pid_file,
    terminate_in_reverse,
    write_pid_file,
)
from kubegpu.sim.controlplane.process import ControlPlaneError, Proc, Stage, probe_get

__all__ = [
    "SIZE_PROFILES",
    "ControlPlane",
    "ControlPlaneSize",
]


_ETCD_QUOTA_BYTES: Final = 512 * 1024 * 1024
_PORT_ATTEMPTS: Final = 5  # launches of one component when its port was taken meanwhile
_POLL_S: Final = 0.1
_BIND_RACE = re.compile(r"address already in use", re.IGNORECASE)

_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
_METRIC_LABEL = re.compile(r'(\w+)="([^"]*)"')


# --- the control plane -------------------------------------------------------------------


@dataclass(frozen=True)
class ControlPlaneSize:
    """The flags a cluster of a given size sets on its control plane. None leaves the
    component's own default (what a small cluster, and every test, runs with).

    - `kube_api_qps` / `kube_api_burst`: the client rate of kube-controller-manager and
      kube-scheduler (defaults 20/30 and 50/100). At hundreds of nodes the DaemonSet
      controller creates one pod per node per operand and the scheduler binds each one:
      at 20 QPS, 8 operands x 1,000 nodes take 400 s of the controller's budget alone.
    - `max_requests_inflight` / `max_mutating_requests_inflight`: the API server's
      concurrency (defaults 400/200; their sum is API Priority and Fairness's budget).
      1,000 kubelets renewing leases and patching pod status share it.
    - `etcd_quota_bytes`: etcd's backend size limit (the sim's default 512 MiB; etcd's own
      2 GiB). Events and pods of 1,000 nodes outgrow the small one.
    """

    kube_api_qps: int | None = None
    kube_api_burst: int | None = None
    max_requests_inflight: int | None = None
    max_mutating_requests_inflight: int | None = None
    etcd_quota_bytes: int = _ETCD_QUOTA_BYTES

    def client_args(self) -> list[str]:
        """kube-controller-manager's and kube-scheduler's flags."""
        out = []
        if self.kube_api_qps is not None:
            out.append(f"--kube-api-qps={self.kube_api_qps}")
        if self.kube_api_burst is not None:
            out.append(f"--kube-api-burst={self.kube_api_burst}")
        return out

    def apiserver_args(self) -> list[str]:
        out = []
        if self.max_requests_inflight is not None:
            out.append(f"--max-requests-inflight={self.max_requests_inflight}")
        if self.max_mutating_requests_inflight is not None:
            out.append(f"--max-mutating-requests-inflight={self.max_mutating_requests_inflight}")
        return out


#: Named sizes a cluster file picks (`controlPlane: {size: large}`). "large" is sized for
#: about 1,000 nodes: client rates 5x the controller-manager's default (the scheduler's
#: default burst is already 100), the API server's concurrency 2.5x, etcd's quota at
#: 4 GiB (under etcd's recommended 8 GiB maximum).
SIZE_PROFILES: Final[Mapping[str, ControlPlaneSize]] = {
    "small": ControlPlaneSize(),
    "large": ControlPlaneSize(
        kube_api_qps=100,
        kube_api_burst=200,
        max_requests_inflight=1000,
        max_mutating_requests_inflight=500,
        etcd_quota_bytes=4 * 1024**3,
    ),
}


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback.

    Args:
        workdir: where certificates, kubeconfigs, logs, etcd data and the pids file go.
        bin_dir: the binaries' directory (default: see :func:`find_bin_dir`).
        fsync: let etcd fsync (off by default: the cluster is disposable, and tests faster).
        keep_data: keep etcd's data from an earlier run in ``workdir`` instead of wiping it.
        feature_gates: Kubernetes feature gates for all three Kubernetes components, on top
            of the gates kubegpu sets for the binaries' version (`kubegpu.kube.versions`,
            read from the API server binary at start; a gate given here wins).
        verbosity: klog ``--v`` of the Kubernetes components.
        size: the flags for the cluster's size (default: every component's own defaults).
    """

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        *,
        fsync: bool = False,
        keep_data: bool = False,
        feature_gates: Mapping[str, bool] | None = None,
        verbosity: int = 2,
        size: ControlPlaneSize | None = None,
    ) -> None:
        self.workdir = Path(workdir).absolute()
        self._bin_dir_arg = bin_dir
        self._fsync = fsync
        self._keep_data = keep_data
        self._gate_overrides = dict(feature_gates or {})
        self._feature_gates = dict(self._gate_overrides)  # the version's gates join at start
        self._verbosity = verbosity
        self.size = size or ControlPlaneSize()
        self._binaries: dict[str, Path] = {}
        self._procs: dict[str, Proc] = {}
        self._ports: dict[str, int] = {}
        self._used_ports: set[int] = set()
        self._lock_fd: int | None = None
        self._ca: CertificateAuthority | None = None
        self._admin_ctx: ssl.SSLContext | None = None
        self._stages: dict[str, Stage] = {}
        self._started = False

    # -- paths and facts ---------------------------------------------------------------

    @property
    def pki_dir(self) -> Path:
        """Certificates and keys."""
        return self.workdir / "pki"

    @property
    def logs_dir(self) -> Path:
        """One log file per component."""
        return self.workdir / "logs"

    @property
    def pid_file(self) -> Path:
        """The running processes, for a later run to clean up after a killed one."""
        return self.workdir / "pids"

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig (user ``kubernetes-admin``, group ``system:masters``)."""
        return self.workdir / "admin.kubeconfig"

    def log_path(self, component: str) -> Path:
        """The log file of one component (see :data:`COMPONENTS`)."""
        return self.logs_dir / f"{component}.log"

    @property
    def server(self) -> str:
        """The API server's URL."""
        if APISERVER not in self._ports:
            raise ControlPlaneError("control plane", "not started")
        return f"https://{LOOPBACK}:{self._ports[APISERVER]}"

    @property
    def etcd_url(self) -> str:
        """etcd's client URL (plain HTTP on loopback)."""
        if ETCD not in self._ports:
            raise ControlPlaneError("control plane", "not started")
        return f"http://{LOOPBACK}:{self._ports[ETCD]}"

    @property
    def ports(self) -> dict[str, int]:
        """Every port in use, by name (``etcd``, ``etcd-peer``, and one per component)."""
        return dict(self._ports)

    @property
    def pids(self) -> dict[str, int]:
        """The pid of each running component."""
        return {name: p.popen.pid for name, p in self._procs.items()}

    @property
    def running(self) -> bool:
        """Whether the control plane was started and every process still runs."""
        return (
            self._started
            and len(self._procs) == len(COMPONENTS)
            and all(p.popen.poll() is None for p in self._procs.values())
        )

    def health(self) -> dict[str, str | None]:
        """Check every component now: None when it is healthy, else what is wrong.

        The same checks as :meth:`start` waits on (etcd ``/health``, API server ``/readyz``,
        controller-manager and scheduler ``/healthz`` and leader leases).
        """
        out: dict[str, str | None] = {}
        for name in COMPONENTS:
            proc, stage = self._procs.get(name), self._stages.get(name)
            if proc is None or stage is None:
                out[name] = "not running"
            elif (code := proc.popen.poll()) is not None:
                out[name] = f"exited with status {code}"
            else:
                out[name] = stage.probe()
        return out

    def request_counts(self) -> Counter[tuple[str, str, str]]:
        """The API server's own count of the requests it served (`apiserver_request_total`),
        by verb, resource and subresource, over every client: what a scale test counts."""
        got = probe_get(f"{self.server}/metrics", self._admin_ctx, timeout_s=60.0)
        if isinstance(got, str) or got[0] != 200:
            raise ControlPlaneError("kube-apiserver", f"cannot read /metrics: {got}")
        counts: Counter[tuple[str, str, str]] = Counter()
        for line in got[1].decode().splitlines():
            if m := _REQUEST_TOTAL.match(line):
                labels = dict(_METRIC_LABEL.findall(m.group(1)))
                verb, kind = labels.get("verb", ""), labels.get("resource", "")
                counts[(verb, kind, labels.get("subresource", ""))] += int(float(m.group(2)))
        return counts

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _version_gates(self) -> Mapping[str, bool]:
        """The gates for the API server binary's version (kubegpu.kube.versions): a gate
        unknown to a version stops it. Asked once etcd runs, so a failing etcd is named
        first; a binary that cannot say its version is named with what it printed."""
        try:
            return version_gates(self._binaries[APISERVER])
        except UnsupportedVersion as exc:
            raise ControlPlaneError(APISERVER, str(exc)) from None

    def start(self, timeout: float = 120.0) -> None:
        """Start everything and wait until the cluster is usable.

        Usable means: the API server's ``/readyz`` passes; the controller-manager and the
        scheduler answer ``/healthz`` on their secure ports and hold their leader leases;
        the ``default`` ServiceAccount exists (the controllers are working). Processes a
        killed earlier run left in ``workdir`` are killed first.

        Raises:
            ControlPlaneError: a binary is missing, a process exited, or something was not
                ready within ``timeout`` seconds. Nothing is left running.
        """
        if self._procs or self._started:
            raise ControlPlaneError("control plane", f"already started in {self.workdir}")
        deadline = time.monotonic() + timeout
        self._binaries = check_binaries(find_bin_dir(self._bin_dir_arg))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self._acquire_lock()
        try:
            terminate_in_reverse(read_pid_file(self.pid_file), timeout=10.0)
            self.pid_file.unlink(missing_ok=True)
            for name in COMPONENTS:
                self.log_path(name).write_bytes(b"")
            if not self._keep_data:
                shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
            self._write_pki()
            self._run_stages([self._etcd_stage()], deadline, timeout)
            self._feature_gates = {**self._version_gates(), **self._gate_overrides}
            self._run_stages([self._apiserver_stage()], deadline, timeout)
            self._write_kubeconfigs()
            self._run_stages(
                [self._controller_manager_stage(), self._scheduler_stage()], deadline, timeout
            )
        except BaseException:
            self._shutdown(timeout=10.0)
            raise
        self._started = True
        atexit.register(self.stop)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every process (SIGTERM, then SIGKILL after ``timeout``) and reap it.

        Safe to call more than once, and on a control plane that never started.
        """
        atexit.unregister(self.stop)
        self._shutdown(timeout)

    @staticmethod
    def cleanup_stale(workdir: Path, timeout: float = 10.0) -> list[PidRecord]:
        """Kill the processes a killed run recorded in ``workdir/pids``; return those killed.

        A recorded pid that now belongs to another process (different start time) is left
        alone. Raises :class:`ControlPlaneError` if a live control plane holds ``workdir``.
        """
        workdir = Path(workdir)
        if not workdir.is_dir():
            return []
        fd = _lock(workdir)
        try:
            pid_file = workdir / "pids"
            live = [r for r in read_pid_file(pid_file) if r.alive()]
            terminate_in_reverse(live, timeout)
            pid_file.unlink(missing_ok=True)
            return live
        finally:
            os.close(fd)

    # -- internals: files --------------------------------------------------------------

    def _acquire_lock(self) -> None:
        self._lock_fd = _lock(self.workdir)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _pki(self, name: str) -> str:
        return str(self.pki_dir / name)

    def _write_pki(self) -> None:
        shutil.rmtree(self.pki_dir, ignore_errors=True)
        ca = CertificateAuthority.create(f"{CLUSTER_NAME}-ca")
        ca.write(self.pki_dir / "ca.crt", self.pki_dir / "ca.key")
        ca.issue(
            APISERVER,
            server=True,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=[LOOPBACK, SERVICE_IP],
        ).write(self.pki_dir / "apiserver.crt", self.pki_dir / "apiserver.key")
        ca.issue(
            "kube-apiserver-kubelet-client", organizations=["system:masters"], client=True
        ).write(
            self.pki_dir / "apiserver-kubelet-client.crt",
            self.pki_dir / "apiserver-kubelet-client.key",
        )
        for name in (CONTROLLER_MANAGER, SCHEDULER):
            ca.issue(name, server=True, dns_names=["localhost"], ip_addresses=[LOOPBACK]).write(
                self.pki_dir / f"{name}-serving.crt", self.pki_dir / f"{name}-serving.key"
            )
        # The front-proxy (request-header) CA authenticates the API server to aggregated API
        # servers, and the controller-manager and scheduler to check requests to them.
        proxy_ca = CertificateAuthority.create(f"{CLUSTER_NAME}-front-proxy-ca")
        write_public(self.pki_dir / "front-proxy-ca.crt", proxy_ca.cert_pem)
        proxy_ca.issue("front-proxy-client", client=True).write(
            self.pki_dir / "front-proxy-client.crt", self.pki_dir / "front-proxy-client.key"
        )
        admin = ca.issue("kubernetes-admin", organizations=["system:masters"], client=True)
        admin.write(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")
        sa = generate_signing_key()
        write_public(self.pki_dir / "sa.pub", sa.public_pem)
        write_private(self.pki_dir / "sa.key", sa.private_pem)
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")
        self._ca = ca
        self._admin_ctx = ctx

    def _write_kubeconfig(self, path: Path, user: str, cert: IssuedCert) -> None:
        assert self._ca is not None

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CLUSTER_NAME,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self._ca.cert_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(cert.cert_pem),
                        "client-key-data": b64(cert.key_pem),
                    },
                }
            ],
            "contexts": [
                {
                    "name": f"{user}@{CLUSTER_NAME}",
                    "context": {"cluster": CLUSTER_NAME, "user": user},
                }
            ],
            "current-context": f"{user}@{CLUSTER_NAME}",
            "preferences": {},
        }
        write_private(path, yaml.safe_dump(config, sort_keys=False).encode())

    def _write_kubeconfigs(self) -> None:
        assert self._ca is not None
        admin = IssuedCert(
            (self.pki_dir / "admin.crt").read_bytes(), (self.pki_dir / "admin.key").read_bytes()
        )
        self._write_kubeconfig(self.kubeconfig_path, "kubernetes-admin", admin)
        for name in (CONTROLLER_MANAGER, SCHEDULER):
            cert = self._ca.issue(f"system:{name}", client=True)
            self._write_kubeconfig(self.workdir / f"{name}.kubeconfig", f"system:{name}", cert)

    # -- internals: processes ----------------------------------------------------------

    def _pick_ports(self, names: Iterable[str]) -> None:
        for name in names:
            self._ports[name] = self._free_port()

    def _free_port(self) -> int:
        port = free_port(self._used_ports)
        if port is None:
            raise ControlPlaneError("control plane", "no free loopback port")
        return port

    def _spawn(self, stage: Stage) -> None:
        self._stages[stage.name] = stage
        if stage.name == ETCD and stage.attempts and not self._keep_data:
            # a relaunch on other ports: drop anything the failed launch wrote
            shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
        self._pick_ports(stage.ports)
        args = [str(self._binaries[stage.name]), *stage.args()]
        log_path = self.log_path(stage.name)
        with log_path.open("ab") as log:
            log.write(f"=== kubegpu: starting (attempt {stage.attempts + 1}): ".encode())
            log.write(" ".join(args).encode() + b"\n")
            log.flush()
            offset = log.tell()
            popen = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, not them
            )
        stage.attempts += 1
        self._procs[stage.name] = Proc(stage.name, popen, log_path, offset)
        write_pid_file(self.pid_file, (p.record() for p in self._procs.values()))

    def _bind_race(self, proc: Proc) -> bool:
        try:
            with proc.log_path.open("rb") as f:
                f.seek(proc.log_offset)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return False
        return bool(_BIND_RACE.search(text))

    def _run_stages(self, stages: list[Stage], deadline: float, timeout: float) -> None:
        """Launch the stages' processes together and wait until every one is ready."""
        for stage in stages:
            self._spawn(stage)
        pending = list(stages)
        while pending:
            for stage in list(pending):
                proc = self._procs[stage.name]
                code = proc.popen.poll()
                if code is not None:
                    if self._bind_race(proc) and stage.attempts < _PORT_ATTEMPTS:
                        self._spawn(stage)  # someone took the port meanwhile: pick another
                        continue
                    raise ControlPlaneError(
                        stage.name,
                        f"exited with status {code} while starting ({stage.waiting_for})",
                        proc.log_path,
                    )
                waiting = stage.probe()
                if waiting is None:
                    pending.remove(stage)
                else:
                    stage.waiting_for = waiting
            if pending and time.monotonic() > deadline:
                stage = pending[0]
                raise ControlPlaneError(
                    stage.name,
                    f"not ready within {timeout:g}s of the start; still waiting for: "
                    f"{stage.waiting_for}",
                    self.log_path(stage.name),
                )
            if pending:
                time.sleep(_POLL_S)

    def _shutdown(self, timeout: float) -> None:
        """Stop the processes in reverse start order; reap them; drop the pids file."""
        try:
            groups = ((SCHEDULER, CONTROLLER_MANAGER), (APISERVER,), (ETCD,))
            for group in groups:
                procs = [self._procs[n] for n in group if n in self._procs]
                for p in procs:
                    if p.popen.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            p.popen.send_signal(signal.SIGTERM)
                for p in procs:
                    try:
                        p.popen.wait(timeout)
                    except subprocess.TimeoutExpired:
                        with contextlib.suppress(ProcessLookupError):
                            p.popen.kill()
                        p.popen.wait()
                    del self._procs[p.name]
            self.pid_file.unlink(missing_ok=True)
        finally:
            self._started = False
            self._release_lock()

    # -- internals: components ---------------------------------------------------------

    def _common_k8s_args(self) -> list[str]:
        return kube.common_args(self._verbosity, self._feature_gates)

    def _etcd_stage(self) -> Stage:
        def args() -> list[str]:
            return etcd.args(
                self.workdir / "etcd",
                self._ports[ETCD],
                self._ports["etcd-peer"],
                self.size.etcd_quota_bytes,
                self._fsync,
            )

        return Stage(ETCD, (ETCD, "etcd-peer"), args, lambda: etcd.probe(self.etcd_url))

    def _apiserver_stage(self) -> Stage:
        def args() -> list[str]:
            return [
                *apiserver.args(self.etcd_url, self._ports[APISERVER], self.pki_dir),
                *self.size.apiserver_args(),
                *self._common_k8s_args(),
            ]

        def probe() -> str | None:
            return apiserver.probe(self.server, self._admin_ctx)

        return Stage(APISERVER, (APISERVER,), args, probe)

    def _component_args(self, name: str) -> list[str]:
        kubeconfig = self.workdir / f"{name}.kubeconfig"
        return [
            *kube.secure_component_args(name, kubeconfig, self.pki_dir, self._ports[name]),
            *self.size.client_args(),
            *self._common_k8s_args(),
        ]

    def _controller_manager_stage(self) -> Stage:
        def args() -> list[str]:
            return [
                *self._component_args(CONTROLLER_MANAGER),
                *controllermanager.args(self.pki_dir),
            ]

        def probe() -> str | None:
            port = self._ports[CONTROLLER_MANAGER]
            return controllermanager.probe(self.server, port, self._admin_ctx)

        return Stage(CONTROLLER_MANAGER, (CONTROLLER_MANAGER,), args, probe)

    def _scheduler_stage(self) -> Stage:
        def args() -> list[str]:
            return [*self._component_args(SCHEDULER), *scheduler.args()]

        def probe() -> str | None:
            return scheduler.probe(self.server, self._ports[SCHEDULER], self._admin_ctx)

        return Stage(SCHEDULER, (SCHEDULER,), args, probe)


def _lock(workdir: Path) -> int:
    """Take the work directory's lock; raise if a live control plane holds it."""
    fd = os.open(workdir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ControlPlaneError(
            "control plane", f"{workdir} is in use by another running control plane"
        ) from None
    return fd
