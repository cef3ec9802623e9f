"""The simulated cluster: the real Kubernetes control plane plus simulated GPU nodes.

Submodules are imported on demand (``kubegpu.sim.controlplane``, ``kubegpu.sim.certs``), so
importing this package starts nothing and pulls in nothing heavy.
"""
