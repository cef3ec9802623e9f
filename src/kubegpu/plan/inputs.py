"""The planner's input file: a fleet (or cards to buy), workloads and options.

```yaml
fleet:
  - name: gpu-h200            # node name; with `count: N`, nodes <name>-1 .. <name>-N
    gpus: h200-nvl:8          # model:count[,model:count], as in `kubegpu sim` node specs
    driver: "575.51.03"       # optional: checked against MIG driver minimums
    display: graphics         # optional: RTX PRO Workstation / Max-Q / 5000 display mode
    nvlink: true              # optional: overrides the model's default
    current:                  # optional: what is configured and running there now
      sharing: time-slicing   # none | time-slicing | mps
      replicas: 4
      gpus:
        0: {mig: {1g.18gb: 7}, busy: {1g.18gb: 2}}
        1: {busy: whole}
        2: {busy: 3}          # shared replicas in use
buy:                          # buy mode: server types the plan may buy
  - name: h200-box
    model: h200-nvl
    card_price: 32000
    server_price: 18000
    max_cards: 8
    max_servers: 4            # optional
workloads:
  - name: chat
    replicas: 40
    memory: 12GiB             # per GPU: 12GiB, 12Gi, 12GB (decimal), 12288MiB, or a number of GiB
    compute: 0.1              # fraction of one GPU, "10%", or SMs: "16sm"
    isolation: memory         # hardware | memory | none   (default hardware)
    kind: inference           # inference | training | notebook (default inference)
    gpus: 1                   # GPUs per replica
    nvlink: false             # the replica's GPUs must be joined by NVLink
    nccl: false               # talks NCCL (default: true when gpus > 1)
    priority: 1               # weight of a replica left unplaced (default 1)
options:
  solver: auto                # auto | exact | heuristic
  mig_strategy: auto          # auto (single where a node allows it) | mixed
  allow_unconfirmed_mig: false
  time_limit: 30              # CPU seconds for the exact solver (wall clock: at most 4x)
description: ...              # optional free text (and `expect:`, read only by the test corpus)
```

Loading is strict and whole-file: an unknown key, a key given twice, a bad size or an
unknown model is refused with the file, the field and the value. Files go through
`kubegpu.base.loader` with larger bounds than a config file (`LIMITS`, docs/limits.md).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_validator,
)

from kubegpu.base import loader
from kubegpu.catalog import GpuModel, UnknownModelError, get_model
from kubegpu.nvml import NodeSpec, SpecError, parse_spec

MAX_GPUS_PER_NODE = 16
MAX_NODES = 10_000
# A fleet of MAX_NODES nodes (in all, `count`s expanded) written out one by one fits;
# anything larger is not an input.
LIMITS = loader.Limits(max_bytes=4 * loader.MIB, max_values=500_000)


class PlanInputError(loader.InputError):
    """The planner's input cannot be used; the message says where and why."""


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_UNITS_MIB = {
    "": 1024.0,  # a bare number is GiB
    "gib": 1024.0,
    "gi": 1024.0,
    "g": 1024.0,
    "gb": 1e9 / 2**20,
    "mib": 1.0,
    "mi": 1.0,
    "mb": 1e6 / 2**20,
    "tib": 1024.0 * 1024,
    "ti": 1024.0 * 1024,
    "tb": 1e12 / 2**20,
}


def parse_memory(value: Any) -> int:
    """`12GiB`, `12Gi`, `12GB`, `12288MiB` or a number of GiB -> MiB (rounded up)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a memory size")
    if isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError(f"{value!r} is not a memory size like 12GiB")
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS_MIB:
        raise ValueError(f"{value!r} is not a memory size (like 12GiB, 12Gi, 12GB or 12288MiB)")
    mib = float(m.group(1)) * _UNITS_MIB[m.group(2).lower()]
    if mib <= 0:
        raise ValueError(f"memory {value!r} must be more than 0")
    return int(-(-mib // 1))


def parse_compute(value: Any) -> tuple[float, int]:
    """A fraction of a GPU (`0.25`, `25%`) or streaming multiprocessors (`16sm`).

    Returns (fraction, sms): one of the two is zero.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a compute need")
    if isinstance(value, int | float):
        frac = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.endswith(("sm", "sms")):
            n = text.removesuffix("s").removesuffix("sm")
            if not n.isdigit() or int(n) <= 0:
                raise ValueError(f"{value!r}: SMs must be a whole number > 0, like 16sm")
            return 0.0, int(n)
        try:
            frac = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a compute need (0.25, 25% or 16sm)") from None
    else:
        raise ValueError(f"{value!r} is not a compute need (0.25, 25% or 16sm)")
    if not 0 <= frac <= 1:
        raise ValueError(
            f"compute {value!r} must be between 0 and 1 of a GPU (use gpus: N for more)"
        )
    return frac, 0


def _spec(text: str) -> NodeSpec:
    """A node's GPUs in the simulator's spec format (`h200-nvl:8;driver=...`), one parser."""
    try:
        return parse_spec(text)
    except SpecError as exc:
        raise ValueError(str(exc)) from None


def parse_gpus(text: str) -> list[tuple[GpuModel, int]]:
    """`h200-nvl:8` or `rtx-pro-6000-ws:2,l4:1` -> [(model, count), ...]."""
    return list(_spec(text).gpus)


StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]
# a whole number is a price, priority or time limit too; `"5"` and `true` are not
StrictFloat = Annotated[float, Strict()]


class _Strict(BaseModel):
    # inf and nan are not prices, priorities or time limits (issue 13: they were accepted)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class CurrentGpu(_Strict):
    mig: dict[str, StrictInt] | None = None  # the GPU's current MIG layout (profile -> count)
    busy: dict[str, StrictInt] | Literal["whole"] | StrictInt | None = None
    # the layout is kept even with no instance counted busy: running pods hold instances
    # of this GPU whose devices are not known (`kubegpu plan --from-snapshot`)
    keep: StrictBool = False

    @model_validator(mode="after")
    def _consistent(self) -> CurrentGpu:
        if self.keep and not self.mig:
            raise ValueError("keep: true needs the GPU's current mig layout")
        if isinstance(self.busy, dict):
            if self.mig is None:
                raise ValueError("busy MIG instances need the GPU's current mig layout")
            for name, n in self.busy.items():
                if n < 0 or n > self.mig.get(name, 0):
                    raise ValueError(
                        f"busy {name}: {n} in use but the layout has {self.mig.get(name, 0)}"
                    )
        if isinstance(self.busy, int) and self.busy < 0:
            raise ValueError(f"busy {self.busy}: negative")
        if self.busy == "whole" and self.mig:
            raise ValueError("busy: whole on a GPU with a MIG layout")
        for name, n in (self.mig or {}).items():
            if n < 0:
                raise ValueError(f"mig {name}: negative count {n}")
        return self


class Current(_Strict):
    sharing: Literal["none", "time-slicing", "mps"] = "none"
    replicas: StrictInt | None = None
    gpus: dict[int, CurrentGpu] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _replicas(self) -> Current:
        if self.sharing != "none" and (self.replicas is None or self.replicas < 2):
            raise ValueError(f"sharing {self.sharing} needs replicas >= 2")
        for i, g in self.gpus.items():
            if isinstance(g.busy, int) and self.sharing == "none" and g.busy:
                raise ValueError(f"GPU {i}: shared replicas busy but the node does not share")
            if isinstance(g.busy, int) and self.replicas is not None and g.busy > self.replicas:
                raise ValueError(f"GPU {i}: {g.busy} replicas busy > {self.replicas}")
        return self


class NodeFacts(_Strict):
    driver: str | None = None
    display: Literal["graphics", "compute"] | None = None
    nvlink: StrictBool | None = None

    @field_validator("driver", mode="before")
    @classmethod
    def _driver(cls, value: Any) -> Any:
        if value is None:
            return None
        text = str(value)
        if not re.fullmatch(r"\d+(\.\d+){0,2}", text):
            raise ValueError(f"{value!r} is not a driver version like 575.51.03")
        return text


class FleetNode(NodeFacts):
    name: str
    gpus: str
    count: StrictInt = 1
    current: Current | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", value) or len(value) > 240:
            raise ValueError(f"{value!r} is not a node name (lowercase DNS-1123)")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: str) -> str:
        _spec(value)
        return value

    @field_validator("count")
    @classmethod
    def _count(cls, value: int) -> int:
        if not 1 <= value <= MAX_NODES:
            raise ValueError(f"count {value} must be 1..{MAX_NODES}")
        return value

    @model_validator(mode="after")
    def _current(self) -> FleetNode:
        if self.current is not None and self.count != 1:
            raise ValueError("current state is per node: give it on nodes without count")
        n = sum(k for _, k in self.models())
        for i in self.current.gpus if self.current else {}:
            if not 0 <= i < n:
                raise ValueError(f"current.gpus: GPU index {i} out of range 0..{n - 1}")
        return self

    def models(self) -> list[tuple[GpuModel, int]]:
        return parse_gpus(self.gpus)

    def facts(self) -> NodeFacts:
        spec = _spec(self.gpus)
        given = ";driver=" in self.gpus  # the spec's default driver is not the node's
        display = self.display or spec.display
        return NodeFacts(
            driver=self.driver or (spec.driver if given else None),
            display=display if display in ("graphics", "compute") else None,
            nvlink=self.nvlink,
        )


class ServerType(NodeFacts):
    name: str
    model: str
    card_price: StrictFloat = Field(gt=0)
    server_price: StrictFloat = Field(0.0, ge=0)
    max_cards: StrictInt
    max_servers: StrictInt | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return FleetNode._name(value)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        try:
            return get_model(value).id
        except UnknownModelError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("max_cards")
    @classmethod
    def _cards(cls, value: int) -> int:
        if not 1 <= value <= MAX_GPUS_PER_NODE:
            raise ValueError(f"max_cards {value} must be 1..{MAX_GPUS_PER_NODE}")
        return value

    @field_validator("max_servers")
    @classmethod
    def _servers(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_NODES:
            raise ValueError(f"max_servers {value} must be 0..{MAX_NODES}")
        return value


class Workload(_Strict):
    name: str
    replicas: StrictInt = 1
    memory: Any
    compute: Any = 0.0
    isolation: Literal["hardware", "memory", "none"] = "hardware"
    kind: Literal["inference", "training", "notebook"] = "inference"
    gpus: StrictInt = 1
    nvlink: StrictBool = False
    nccl: StrictBool | None = None
    priority: StrictFloat = Field(1.0, gt=0)
    # a fixed MIG profile: the pods already request `nvidia.com/mig-<profile>`, so no other
    # method or profile serves them (`kubegpu plan --from-snapshot`)
    profile: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) or len(value) > 63:
            raise ValueError(f"{value!r} is not a workload name (lowercase DNS-1123 label)")
        return value

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"replicas {value} is negative")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: int) -> int:
        if not 1 <= value <= MAX_GPUS_PER_NODE:
            raise ValueError(
                f"gpus {value} must be 1..{MAX_GPUS_PER_NODE} (one pod is on one node)"
            )
        return value

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        parse_memory(value)
        return value

    @field_validator("compute", mode="before")
    @classmethod
    def _compute(cls, value: Any) -> Any:
        parse_compute(value)
        return value

    @cached_property
    def memory_mib(self) -> int:
        return parse_memory(self.memory)

    @cached_property
    def compute_fraction(self) -> float:
        return parse_compute(self.compute)[0]

    @cached_property
    def compute_sms(self) -> int:
        return parse_compute(self.compute)[1]

    @property
    def uses_nccl(self) -> bool:
        return self.gpus > 1 if self.nccl is None else self.nccl


class Options(_Strict):
    solver: Literal["auto", "exact", "heuristic"] = "auto"
    mig_strategy: Literal["auto", "mixed"] = "auto"
    allow_unconfirmed_mig: StrictBool = False
    time_limit: StrictFloat = Field(30.0, gt=0)


class PlanInput(_Strict):
    description: str = ""  # free text
    expect: dict[str, Any] | None = None  # the scenario corpus's expectations; not read here
    fleet: tuple[FleetNode, ...] = ()
    buy: tuple[ServerType, ...] = ()
    workloads: tuple[Workload, ...]
    options: Options = Field(default_factory=Options)

    @field_validator("fleet")
    @classmethod
    def _fleet_size(cls, value: tuple[FleetNode, ...]) -> tuple[FleetNode, ...]:
        total = sum(n.count for n in value)
        if total > MAX_NODES:  # before any node name is expanded
            raise ValueError(f"{total} nodes in all (counts expanded); at most {MAX_NODES}")
        return value

    @model_validator(mode="after")
    def _unique(self) -> PlanInput:
        if not self.fleet and not self.buy:
            raise ValueError("no fleet and nothing to buy: give fleet, buy or both")
        dup = sorted(n for n, k in Counter(self.node_names()).items() if k > 1)
        if dup:
            raise ValueError(f"node names used twice: {', '.join(dup[:5])}")
        dupw = sorted(n for n, k in Counter(w.name for w in self.workloads).items() if k > 1)
        if dupw:
            raise ValueError(f"workload names used twice: {', '.join(dupw)}")
        snames = [s.name for s in self.buy]
        if len(set(snames)) != len(snames):
            raise ValueError("server type names must be unique")
        return self

    def node_names(self) -> list[str]:
        out = []
        for n in self.fleet:
            out += [n.name] if n.count == 1 else [f"{n.name}-{i}" for i in range(1, n.count + 1)]
        return out


def parse_input(text: str, source: str = "<input>") -> PlanInput:
    return parse_data(loader.parse_yaml(text, source, PlanInputError, LIMITS), source)


def parse_data(data: Any, source: str = "<input>") -> PlanInput:
    loader.require_mapping(
        data, source, PlanInputError, "a mapping with fleet/buy, workloads and options"
    )
    return loader.validate(PlanInput, data, source, PlanInputError, loader.named_items)


_MERGED_LISTS = ("fleet", "buy", "workloads")


def _mergeable(data: dict[str, Any], source: str) -> dict[str, Any]:
    """One file of several, checked where `merge` would otherwise fail or let one file's
    value replace another's: the lists are lists, the options a mapping."""
    for key in _MERGED_LISTS:
        if key in data and not isinstance(data[key], list):
            raise PlanInputError(
                f"{source}: field {key}, value {loader.excerpt(data[key])}: expected a list"
            )
    if "options" in data and not isinstance(data["options"], dict):
        raise PlanInputError(
            f"{source}: field options, value {loader.excerpt(data['options'])}: expected a mapping"
        )
    return data


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several files as one: lists are concatenated, options merged (later wins)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key == "options" and isinstance(value, dict):
                out.setdefault("options", {}).update(value)
            elif isinstance(value, list):
                out.setdefault(key, []).extend(value)
            else:
                out[key] = value
    return out


def load_input(paths: list[str | Path]) -> PlanInput:
    """Read one or more files (fleet in one, workloads in another...) as one input."""
    parts: list[dict[str, Any]] = []
    names = []
    for path in paths:
        data, source = loader.load_yaml(path, PlanInputError, LIMITS)
        names.append(source)
        part = loader.require_mapping(data, source, PlanInputError)
        parts.append(_mergeable(part, source) if len(paths) > 1 else part)
    return parse_data(merge(parts), ", ".join(names))
