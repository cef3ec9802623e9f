"""The real Kubernetes control plane, run as local processes (as envtest arranges it).

- ``plane``: ``ControlPlane`` (start, stop, health, the work directory's layout, its PKI
  and kubeconfigs) and the cluster sizes;
- one module per component's flags and readiness: ``etcd``, ``apiserver``,
  ``controllermanager``, ``scheduler``; what the Kubernetes ones share in ``kube``;
- ``binaries`` (where the builds are), ``process`` (a launched process, its error, its
  HTTP probe), ``pids`` (the records a later run cleans up after), ``certs`` (the PKI),
  ``addr`` (free ports, and each simulated node's own address).

This room imports nothing of ``kubegpu.sim.kubelet`` nor of the top of ``kubegpu.sim``.
"""
