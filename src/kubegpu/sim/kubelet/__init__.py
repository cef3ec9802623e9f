"""SimNode, the kubelet stand-in, split the way the kubelet itself is.

- ``node``: the Node object, its status and lease (heartbeats), and ``SimNode`` holding it all;
- ``podworkers``: each pod's lifecycle (admit, volumes, containers, restarts);
- ``status``: the status manager (what it owns, resending a write until taken, writing
  again what someone else changed); ``qos``: the pod's QoS class;
- ``pluginwatcher``: registration sockets found, asked and answered;
- ``devicemanager``: the device-plugin API's kubelet side (Registration, ListAndWatch,
  Allocate); ``dramanager``: the DRA kubelet side (the plugin watcher's handler, claim
  preparation, the claims' CDI environment);
- ``podresources``: the pod-resources gRPC server;
- ``volumes`` and ``mounted``: a pod's volumes and the ConfigMaps/Secrets they show;
- ``podenv``: a container's environment; ``podexec``: a container's start (mount
  namespace, then exec); ``processes``: the node's pod processes;
- ``gpuload``: what each container runs on its GPUs and the cgroup trace it leaves;
- ``server``: the kubelet's HTTPS endpoint (``kubectl logs``).

It may import ``kubegpu.sim.controlplane`` (certificates, addresses) and the container side
(``inprocess``, ``smi``: files at the top of ``sim/``, a layer below this room), never the
cluster files or demos.
"""
