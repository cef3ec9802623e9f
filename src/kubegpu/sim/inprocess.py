"""Node components as asyncio tasks in the simulator's interpreter: in-process pods.

A thousand simulated nodes cannot each run a device plugin, feature discovery and a MIG
manager as processes on one small machine. In this mode the sim kubelet runs a kubegpu
container's command in-process instead: the very same CLI command parses the container's
arguments and environment (`kubegpu.node.runtime.HOST` makes its `run()` hand the built
component back rather than start an event loop), and the component's `run()` becomes a
task in the simulator's loop. What a process gets from its mount namespace is given by
translation instead:

- every resolved option whose value is a path under a volume's mount path (given, from the
  environment, or the option's default) points at the volume's source on the node;
- the pod's service-account volume becomes a kubeconfig with the same token and CA, passed
  as the command's `--kubeconfig` (so the component keeps the pod's RBAC, not the admin's);
- a wildcard listen address moves to the node's own address (`sim.controlplane.addr`).

The environment is the container's only while the command parses and the component is
built: a component that reads `os.environ` later sees the simulator's (see
docs/architecture.md, known weaknesses). Log records of a container's tasks go to its log
file (found by a context variable every task it starts inherits). Processes stay the
default (`SimNodeConfig.components`): they isolate what in-process tasks share.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

import typer
import yaml
from typer._click import exceptions as click_exceptions

from kubegpu.node import runtime

log = logging.getLogger(__name__)

ComponentsMode = Literal["process", "inprocess"]
COMPONENT_MODES: tuple[str, ...] = ("process", "inprocess")
# `kubegpu <command>` run in-process; the rest (the MPS control daemon, which starts
# daemons, and the DRA plugin) keep a process each
IN_PROCESS_COMMANDS = frozenset(
    {"device-plugin", "feature-discovery", "node-labeller", "mig-manager", "exporter", "validator"}
)
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
WILDCARDS = ("", "0.0.0.0", "::", "[::]")
EXIT_KILLED = 137
EXIT_FAILED = 1
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# the root click command of `kubegpu` (kubegpu.cli.app.root_command), given by the caller:
# the simulator sits below the CLI and never imports it
RootCommand = Callable[[], Any]

_log_file: ContextVar[Path | None] = ContextVar("kubegpu_inprocess_log", default=None)


@dataclass(frozen=True)
class PathMap:
    """Container paths -> node paths, from the container's volume mounts."""

    mounts: tuple[tuple[str, str], ...]  # (mount path in the container, source on the node)

    @classmethod
    def of(cls, mounts: Sequence[tuple[str, str, bool]]) -> PathMap:
        pairs = [(dst.rstrip("/") or "/", src) for src, dst, _ in mounts]
        return cls(tuple(sorted(pairs, key=lambda p: len(p[0]), reverse=True)))

    def host(self, path: str) -> str | None:
        """The node path for a container path under a mount, or None."""
        for dst, src in self.mounts:
            if dst == "/":
                continue  # a mount of / would capture every path: never translate through it
            if path == dst:
                return src
            if path.startswith(dst + "/"):
                return src + path[len(dst) :]
        return None

    def source_of(self, mount_path: str) -> str | None:
        return next((src for dst, src in self.mounts if dst == mount_path.rstrip("/")), None)


def translate(value: Any, paths: PathMap, node_ip: str) -> Any:
    """One resolved option value as the component must see it in-process."""
    if isinstance(value, list | tuple):
        return type(value)(translate(v, paths, node_ip) for v in value)
    if isinstance(value, PurePath):
        mapped = paths.host(str(value))
        return Path(mapped) if mapped is not None else value
    if isinstance(value, str):
        if value.startswith("/"):
            mapped = paths.host(value)
            return mapped if mapped is not None else value
        return listen_address(value, node_ip)
    return value


def listen_address(value: str, node_ip: str) -> str:
    """`0.0.0.0`, `:9400`, `0.0.0.0:9400`, `[::]:9400` -> the node's address (same port)."""
    if value in WILDCARDS[1:]:
        return node_ip
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and host in WILDCARDS:
        return f"{node_ip}:{port}"
    return value


def service_account_kubeconfig(
    token_dir: str, api_host: str, api_port: int, namespace: str, out: Path
) -> Path:
    """A kubeconfig with the pod's service-account token and CA (the in-cluster config a
    process would read from its mount), for an in-process component."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "in-cluster",
                "cluster": {
                    "server": f"https://{api_host}:{api_port}",
                    "certificate-authority": f"{token_dir}/ca.crt",
                },
            }
        ],
        "users": [{"name": "pod", "user": {"tokenFile": f"{token_dir}/token"}}],
        "contexts": [
            {
                "name": "in-cluster",
                "context": {"cluster": "in-cluster", "user": "pod", "namespace": namespace},
            }
        ],
        "current-context": "in-cluster",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config))
    return out


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """`os.environ` is the container's for the duration (synchronous code only)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class _ContainerLogs(logging.Handler):
    """Routes a record to the log file of the in-process container that logged it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        path = _log_file.get()
        if path is None:
            return
        try:
            with path.open("a") as out:
                out.write(self.format(record) + "\n")
        except OSError:
            self.handleError(record)


_handlers: list[_ContainerLogs] = []  # the one installed, once


class _SimulatorOnly(logging.Filter):
    """On the simulator's own handlers: no container's records, and no more than the
    simulator logged before the root logger was opened up for the containers."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return _log_file.get() is None and record.levelno >= self.level


class _ContainerStream:
    """sys.stdout / sys.stderr: a container's writes go to its log file, the rest on."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        path = _log_file.get()
        if path is None:
            return int(self._inner.write(text))
        with contextlib.suppress(OSError), path.open("a") as out:
            out.write(text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _install_log_handler() -> None:
    """Once: container records go to their files (at INFO, as `runtime.setup_logging`
    sets up a component's process), and not to the simulator's own log."""
    if _handlers:
        return
    root = logging.getLogger()
    before = root.getEffectiveLevel()
    for existing in root.handlers:
        existing.addFilter(_SimulatorOnly(before))
    _handlers.append(_ContainerLogs())
    root.addHandler(_handlers[0])
    if before > logging.INFO:
        root.setLevel(logging.INFO)
    for name in runtime.QUIET_LOGGERS:  # one line per API request, as in a component
        logging.getLogger(name).setLevel(logging.WARNING)
    sys.stdout = _ContainerStream(sys.stdout)
    sys.stderr = _ContainerStream(sys.stderr)


# Threads for `asyncio.to_thread` in a loop that hosts in-process components. Every
# component of every node shares them and the event loop shares the GIL with them: each
# thread busy with CPU work (a MIG manager applying a layout: a state-file transaction per
# instance) delays the loop, and with it every node's kubelet answers, by a switch interval
# per turn. At a hundred nodes changing MIG layouts at once, a pool of 128 kept the loop
# from answering pod-resources calls within their 5 s deadline. So: few threads (a long
# apply queues others' calls, which wait without a deadline running), and a short switch
# interval so the loop gets the GIL back soon after it asks.
COMPONENT_THREADS = 8
SWITCH_INTERVAL_S = 0.001
_provided: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def provide_threads(loop: asyncio.AbstractEventLoop) -> None:
    """Set `loop` up to host many nodes' components (once per loop)."""
    if loop in _provided:
        return
    _provided.add(loop)
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=COMPONENT_THREADS, thread_name_prefix="inprocess")
    )
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))


def _resolve(root: Any, argv: Sequence[str]) -> tuple[Any, list[str], list[str]]:
    """The (sub)command `argv` names, its own arguments, and its name path."""
    command, args, names = root, list(argv), ["kubegpu"]
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        ctx = command.make_context(names[-1], [], resilient_parsing=True)
        sub = command.get_command(ctx, args[0])
        if sub is None:
            raise ValueError(f"unknown command {' '.join([*names[1:], args[0]])!r}")
        names.append(args.pop(0))
        command = sub
    return command, args, names


@functools.lru_cache(maxsize=256)
def _command(root_command: RootCommand, argv: tuple[str, ...]) -> tuple[Any, list[str], list[str]]:
    """`_resolve`, remembered: building a command (typer's parameters, their pydantic
    adapters) costs more than parsing it, and every node starts the same few."""
    return _resolve(root_command(), argv)


def in_process_command(command: Sequence[str]) -> bool:
    """Whether a container command (`kubegpu SUB ...`) is one this mode runs in-process."""
    return (
        bool(command)
        and Path(command[0]).name == "kubegpu"
        and len(command) > 1
        and (command[1] in IN_PROCESS_COMMANDS)
    )


@dataclass
class ContainerSpec:
    """What an in-process container is made of, in its own (container) terms."""

    argv: list[str]  # after `kubegpu`
    env: dict[str, str]
    mounts: list[tuple[str, str, bool]]  # (node source, container path, read-only)
    namespace: str
    log_path: Path
    kubeconfig_path: Path  # where the service-account kubeconfig is written
    api_host: str
    api_port: int
    node_ip: str


class InProcessContainer:
    """One container's component as a task: `run()` returns the exit status."""

    def __init__(self, spec: ContainerSpec, root_command: RootCommand) -> None:
        self.spec = spec
        self._root_command = root_command
        self.component: runtime.Component | None = None
        self._task: asyncio.Task[int] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError), self.spec.log_path.open("a") as out:
            out.write(text if text.endswith("\n") else text + "\n")

    def _build(self) -> runtime.Component:
        """Parse the command line and build the component, as the process would."""
        spec = self.spec
        paths = PathMap.of(spec.mounts)
        command, args, names = _command(self._root_command, tuple(spec.argv))
        made: list[Callable[[], runtime.Component]] = []
        token = runtime.HOST.set(made.append)
        try:
            with environment(spec.env):
                ctx = command.make_context(" ".join(names), list(args))  # parsing eats it
                params = {k: translate(v, paths, spec.node_ip) for k, v in ctx.params.items()}
                token_dir = paths.source_of(SERVICE_ACCOUNT_DIR)
                if "kubeconfig" in params and not params["kubeconfig"] and token_dir:
                    kubeconfig = service_account_kubeconfig(
                        token_dir,
                        spec.api_host,
                        spec.api_port,
                        spec.namespace,
                        spec.kubeconfig_path,
                    )
                    wants_path = _expects_path(command, "kubeconfig")
                    params["kubeconfig"] = kubeconfig if wants_path else str(kubeconfig)
                ctx.params = params
                try:
                    command.invoke(ctx)
                except typer.Exit:
                    if not made:
                        raise
                if not made:
                    raise runtime.ComponentError("the command did not start a component")
                return made[-1]()
        finally:
            runtime.HOST.reset(token)

    def start(self) -> None:
        """Start the component's task (what exec'ing the process is)."""
        self._task = asyncio.create_task(self._main(), name=f"inprocess:{self.spec.argv[:1]}")

    async def wait(self) -> int:
        """The exit status, once the component has ended."""
        assert self._task is not None
        return await asyncio.shield(self._task)

    async def terminate(self, grace_s: float) -> None:
        """SIGTERM's equivalent (`stop()`), then SIGKILL's (cancel) after `grace_s`."""
        task = self._task
        if task is None or task.done():
            return
        if self.component is not None:
            self.component.stop()
        else:
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=grace_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _main(self) -> int:
        _install_log_handler()
        _log_file.set(self.spec.log_path)  # this task's context: every task it starts too
        try:
            self.component = self._build()
            await self.component.run()
        except runtime.ComponentError as exc:
            self._write(f"error: {exc}")
            return exc.exit_code
        except asyncio.CancelledError:
            return EXIT_KILLED
        except Exception as exc:  # what would end the process: its status and message
            self._write(_message(exc))
            return _exit_code(exc)
        return 0


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, typer.Exit):
        return int(exc.exit_code)
    if isinstance(exc, click_exceptions.ClickException):
        return int(exc.exit_code)
    return EXIT_FAILED


def _message(exc: BaseException) -> str:
    if isinstance(exc, click_exceptions.ClickException):
        return f"error: {exc.format_message()}"
    return "".join(traceback.format_exception(exc))


def _expects_path(command: Any, name: str) -> bool:
    for param in getattr(command, "params", []):
        if param.name == name:
            descriptor = getattr(param, "type_descriptor", None)
            return "Path" in str(getattr(descriptor, "annotation", ""))
    return False
