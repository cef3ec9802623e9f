"""`kubegpu operator`: reconciles one ClusterPolicy into the GPU node stack.

Level-based (design.md §4): `render(policy, facts)` is a pure function from the policy and
a few cluster facts to the desired objects, in the upstream order of states; the controller
applies them with server-side apply under one field manager, removes what is no longer
desired, labels the GPU nodes and reports status and conditions on the ClusterPolicy.
Node components are never imported: their DaemonSets are rendered from data.
"""

from kubegpu.operator.render import ClusterFacts, Rendered, render
from kubegpu.operator.states import STATES, OperandState

__all__ = ["STATES", "ClusterFacts", "OperandState", "Rendered", "render"]
