"""The simulated cluster: the real Kubernetes control plane plus simulated GPU nodes.

Three rooms, each importing only the rooms below it (import-linter enforces it):

- ``controlplane/``: the real etcd, kube-apiserver, kube-controller-manager and
  kube-scheduler as local processes, as controller-runtime's envtest arranges them:
  binaries, processes, pid records, certificates, free addresses and ports, one module
  per component's flags. It imports nothing of the other rooms.
- ``kubelet/``: ``SimNode``, the kubelet stand-in, split as the kubelet is: node status
  and lease, pod workers, status manager, plugin watcher, device manager, DRA manager,
  pod-resources, volumes, pod environment, container start, the kubelet's HTTPS server.
- the top: cluster files (``cluster``), the demos' stacks (``stack``, ``dra_demo``),
  and what runs inside a simulated container: ``inprocess`` (a kubegpu container as a
  task) and ``smi`` (the simulated ``nvidia-smi`` and CUDA samples).

A fourth room, ``runtime/`` (the container runtime), is reserved for the real-node work:
the kubelet will start containers through it, and it will import neither the kubelet nor
the top.

Submodules are imported on demand, so importing this package starts nothing and pulls in
nothing heavy.
"""
