"""Sim node specs: `h200-nvl:8`, `rtx-pro-6000-ws:2,l4:1`, with `;key=value` options.

Options: `driver=575.51.03` (driver version), `cuda=13.0`, `display=graphics|compute`
(display mode of RTX PRO Workstation cards; real boards ship in graphics mode),
`mig=on|off` (initial MIG mode of MIG-capable GPUs), `seed=<text>` (stable UUIDs).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubegpu.base.loader import EXCERPT_CHARS, excerpt
from kubegpu.catalog import GpuModel, UnknownModelError, get_model, parse_driver_version

DEFAULT_DRIVER = "580.95.05"
DEFAULT_CUDA = "13.0"


class SpecError(ValueError):
    """A sim node spec that cannot be used; the message names the part and why."""


@dataclass(frozen=True)
class NodeSpec:
    gpus: tuple[tuple[GpuModel, int], ...]
    driver: str = DEFAULT_DRIVER
    cuda: str = DEFAULT_CUDA
    display: str | None = None  # None: each model's factory default
    mig: bool = False
    seed: str | None = None

    @property
    def models(self) -> list[GpuModel]:
        return [m for m, n in self.gpus for _ in range(n)]

    def __str__(self) -> str:
        text = ",".join(f"{m.id}:{n}" for m, n in self.gpus)
        opts = []
        if self.driver != DEFAULT_DRIVER:
            opts.append(f"driver={self.driver}")
        if self.cuda != DEFAULT_CUDA:
            opts.append(f"cuda={self.cuda}")
        if self.display:
            opts.append(f"display={self.display}")
        if self.mig:
            opts.append("mig=on")
        if self.seed:
            opts.append(f"seed={self.seed}")
        return ";".join([text, *opts])


def parse_spec(text: str) -> NodeSpec:
    shown = excerpt(text)  # a spec quoted in an error is never a whole huge value
    parts = [p.strip() for p in text.split(";")]
    if not parts[0]:
        raise SpecError(f"sim node spec {shown}: no GPUs (expected e.g. h200-nvl:8)")
    gpus: list[tuple[GpuModel, int]] = []
    for item in parts[0].split(","):
        name, _, count = item.strip().partition(":")
        try:
            model = get_model(name)
        except UnknownModelError as exc:
            why = str(exc) if len(name) <= EXCERPT_CHARS else f"unknown GPU model {excerpt(name)}"
            raise SpecError(f"sim node spec {shown}: {why}") from None
        # Digits only: int() would also take `+8`, ` 8` and `1_6`.
        if count and not (count.isascii() and count.isdigit()):
            raise SpecError(
                f"sim node spec {shown}: count {excerpt(count)} for {name} is not a number"
            )
        n = int(count) if count else 1
        if not 1 <= n <= 16:
            raise SpecError(f"sim node spec {shown}: count {n} for {name} must be 1..16")
        gpus.append((model, n))
    if sum(n for _, n in gpus) > 16:
        raise SpecError(f"sim node spec {shown}: more than 16 GPUs on one node")
    opts: dict[str, str] = {}
    for opt in parts[1:]:
        key, eq, value = opt.partition("=")
        if not eq or key not in {"driver", "cuda", "display", "mig", "seed"}:
            raise SpecError(
                f"sim node spec {shown}: unknown option {excerpt(opt)} (known: driver=, cuda=, display=, mig=, seed=)"
            )
        if key in opts:  # the last would win unseen: `driver=575.57.08;driver=1` plans driver 1
            raise SpecError(f"sim node spec {shown}: option {key}= given twice")
        opts[key] = value
    driver = opts.get("driver", DEFAULT_DRIVER)
    try:
        parse_driver_version(driver)
    except ValueError:
        raise SpecError(
            f"sim node spec {shown}: driver={excerpt(driver)} is not a version"
        ) from None
    cuda = opts.get("cuda", DEFAULT_CUDA)
    major, dot, minor = cuda.partition(".")
    if not (major.isdigit() and dot and minor.isdigit()):
        raise SpecError(f"sim node spec {shown}: cuda={excerpt(cuda)} is not like 13.0")
    display = opts.get("display")
    if display not in {None, "graphics", "compute"}:
        raise SpecError(
            f"sim node spec {shown}: display={excerpt(display)} (use graphics or compute)"
        )
    mig = opts.get("mig", "off")
    if mig not in {"on", "off"}:
        raise SpecError(f"sim node spec {shown}: mig={excerpt(mig)} (use on or off)")
    if mig == "on" and not any(m.mig_capable for m, _ in gpus):
        # It would be silently off: the node would run, just never with MIG.
        raise SpecError(
            f"sim node spec {shown}: mig=on, but no GPU of {excerpt(parts[0])} is MIG-capable"
        )
    return NodeSpec(tuple(gpus), driver, cuda, display, mig == "on", opts.get("seed"))
