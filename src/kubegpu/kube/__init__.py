"""Kubernetes access: the API server client, label patches, watch loops, CRD models, and the
kubelet's gRPC APIs (`kubegpu.kube.kubelet`).

Sits below the node components and the operator, above the domain layers (design.md §2).
"""
