"""The real Kubernetes control plane, run as local processes (as envtest arranges it).

``plane`` (``ControlPlane``: start, stop, health, the work directory's layout) runs the
components; ``binaries`` finds their builds; ``process`` is one launched process and its
readiness probe; ``pids`` the records a later run cleans up after; ``certs`` the PKI;
``addr`` free addresses. This room imports nothing of ``kubegpu.sim.kubelet`` nor of the
top of ``kubegpu.sim``.
"""
