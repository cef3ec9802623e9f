"""`render(policy, facts) -> Rendered`: the desired objects of every state, as plain dicts.

Pure: no API calls, no clock, no randomness. The same policy and facts always give the same
objects and the same hashes, which is what makes the controller level-based and lets it
skip objects whose hash has not changed (`nvidia.com/last-applied-hash`).

Our operands (validator, device plugin, GPU feature discovery, MIG manager, exporter, MPS
control daemon, node status exporter) run the kubegpu image with a `kubegpu <component>`
command; the driver, container toolkit, DCGM host engine and the sandbox operands are not
Kubernetes logic, so they run the upstream images the policy names, with upstream's
settings. Every kubegpu operand waits in an init container for the validator's ready files,
which is how the node-side order (driver -> toolkit -> the rest) is kept.

The builders are registered on their states (`kubegpu.operator.states`) and live in
`kubegpu.operator.operands`; this module runs them and adds what every object carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from kubegpu.kube.policy import ClusterPolicySpec
from kubegpu.operator.operands.context import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    HASH_ANNOTATION,
    IMAGE_ENV,
    KUBEGPU_COMMANDS,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STATE_LABEL,
    ClusterFacts,
    Obj,
    Owner,
    RenderContext,
    RenderError,
    object_hash,
)
from kubegpu.operator.operands.native import default_mig_config
from kubegpu.operator.quantities import quantity_problems
from kubegpu.operator.reserved import reserved_key_problems
from kubegpu.operator.states import STATES, OperandState

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_NAMESPACE",
    "HASH_ANNOTATION",
    "IMAGE_ENV",
    "KUBEGPU_COMMANDS",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "STATE_LABEL",
    "ClusterFacts",
    "Owner",
    "RenderError",
    "Rendered",
    "StateObjects",
    "default_mig_config",
    "dump_yaml",
    "object_hash",
    "render",
    "validate_spec",
]


@dataclass(frozen=True)
class StateObjects:
    name: str
    enabled: bool
    objects: tuple[Obj, ...] = ()
    daemonsets: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Rendered:
    states: tuple[StateObjects, ...]
    problems: tuple[str, ...] = ()  # the spec is invalid as a whole: apply nothing

    def objects(self) -> list[Obj]:
        return [o for s in self.states for o in s.objects]

    def state(self, name: str) -> StateObjects:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def daemonset(self, name: str) -> Obj:
        for o in self.objects():
            if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name:
                return o
        raise KeyError(name)


def validate_spec(spec: ClusterPolicySpec) -> list[str]:
    """Whole-policy rules (upstream: validateClusterPolicySpec)."""
    problems = []
    if spec.cdi.nriPluginEnabled:
        if not spec.cdi_enabled:
            problems.append("cdi.nriPluginEnabled needs cdi.enabled=true")
        if not spec.toolkit.is_enabled(True):
            problems.append("cdi.nriPluginEnabled needs toolkit.enabled=true")
    return problems


def render(spec: ClusterPolicySpec, facts: ClusterFacts) -> Rendered:
    """Every state's desired objects, in upstream order. Disabled states have none. A spec
    that breaks a whole-policy rule or sets a reserved key renders nothing (`problems`)."""
    problems = [*validate_spec(spec), *reserved_key_problems(spec), *quantity_problems(spec)]
    if problems:
        return Rendered(
            tuple(StateObjects(s.name, s.enabled(spec)) for s in STATES), tuple(problems)
        )
    return render_states(STATES, spec, facts)


def render_states(
    states: Sequence[OperandState], spec: ClusterPolicySpec, facts: ClusterFacts
) -> Rendered:
    """Each state's desired objects, in the order given; disabled states have none. Shared
    by the ClusterPolicy's states and the GPUCluster's (which render through a policy view)."""
    out = []
    for state in states:
        if not state.enabled(spec):
            out.append(StateObjects(state.name, False))
            continue
        ctx = RenderContext(spec, facts, state)
        try:
            objects = state.build(ctx)
        except RenderError as exc:
            out.append(StateObjects(state.name, True, error=str(exc)))
            continue
        if facts.gpu_nodes == 0:
            # no GPU node yet: nothing to run (a node watch renders again when one appears)
            objects = [o for o in objects if o["kind"] != "DaemonSet"]
        finished = tuple(ctx.finish(o) for o in objects)
        daemonsets = tuple(o["metadata"]["name"] for o in finished if o["kind"] == "DaemonSet")
        out.append(StateObjects(state.name, True, finished, daemonsets))
    return Rendered(tuple(out))


def dump_yaml(objects: Sequence[Obj]) -> str:
    """Objects as a multi-document YAML stream (for `kubegpu operator render`)."""
    text: str = yaml.safe_dump_all(list(objects), sort_keys=False)
    return text
