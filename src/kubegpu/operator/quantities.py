"""`quantity_problems(spec)`: every `resources` value of a policy that is no Kubernetes
quantity, named by its field.

The CRD types resource values as int-or-string, so `cpu: lots` is stored; the API server
refuses it only when it decodes the DaemonSet, with a message that names neither the
policy field nor the container. Checked here, before anything is rendered, the refusal
names the field and the value; what only the API server can judge (a negative amount, a
request above its limit) is left to the pass's dry-run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pydantic import BaseModel

from kubegpu.kube.policy import ResourceRequirements

# resource.Quantity's serialization: a decimal number, then a binary or decimal SI suffix
# or a decimal exponent
QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


def is_quantity(value: int | str) -> bool:
    return isinstance(value, int) or QUANTITY.fullmatch(value) is not None


def quantity_problems(spec: BaseModel) -> list[str]:
    """`field X.resources.limits.cpu, value 'lots': not a quantity ...` per bad value."""
    problems = []
    for path, resources in _resources(spec, ""):
        for part in ("limits", "requests"):
            for name, value in (getattr(resources, part) or {}).items():
                if not is_quantity(value):
                    problems.append(
                        f"field {path}.{part}.{name}, value {value!r}: not a quantity "
                        "(e.g. 500m, 2, 1Gi)"
                    )
    return problems


def _resources(model: BaseModel, at: str) -> Iterator[tuple[str, ResourceRequirements]]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        path = f"{at}.{name}" if at else name
        if isinstance(value, ResourceRequirements):
            yield path, value
        elif isinstance(value, BaseModel):
            yield from _resources(value, path)
