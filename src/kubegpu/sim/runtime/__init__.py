"""The simulated node's container runtime: containerd or CRI-O with its config on the
node's host root (`config`), NVIDIA's toolkit installer stood in for (`toolkit`), and which
GPUs and driver files a container gets (`injection`, pure). The kubelet room starts
containers through it; it imports nothing of the kubelet."""
