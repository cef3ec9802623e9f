"""Control plane cold start: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Target: median cold start to ready < 20 s on the 2-core development machine. "Ready" is
what ControlPlane.start waits for: API server /readyz, controller-manager and scheduler
/healthz and leader leases, the default ServiceAccount. Each round starts in a fresh work
directory (new certificates, empty etcd), so every start is cold apart from the OS page
cache holding the binaries.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.controlplane.process import ControlPlaneError

ROUNDS = 3
START_TARGET_S = 20.0


def run() -> int:
    starts: list[float] = []
    stops: list[float] = []
    for i in range(ROUNDS):
        with tempfile.TemporaryDirectory(prefix="kubegpu-bench-cp-") as tmp:
            cp = ControlPlane(Path(tmp))
            t = time.perf_counter()
            try:
                cp.start(timeout=180)
            except ControlPlaneError as exc:  # start() has stopped whatever it started
                print(f"control plane failed to start: {exc}")
                return 1
            started = time.perf_counter() - t
            t = time.perf_counter()
            cp.stop()
            stopped = time.perf_counter() - t
        starts.append(started)
        stops.append(stopped)
        print(f"round {i + 1}: start to ready {started:.2f} s, stop {stopped:.2f} s")
    median = statistics.median(starts)
    print(
        f"control plane cold start, median of {ROUNDS}: {median:.2f} s "
        f"(target < {START_TARGET_S:.0f} s); stop median {statistics.median(stops):.2f} s"
    )
    ok = median < START_TARGET_S
    print("control plane targets:", "met" if ok else "MISSED")
    return 0 if ok else 1
