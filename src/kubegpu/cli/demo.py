"""`kubegpu demo`: a walkthrough of MIG on a simulated 8x H200 node.

Until the simulated cluster lands, this is the project's demo: the same library calls
the MIG manager makes, on a simulated node, narrated.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from kubegpu.catalog import get_model
from kubegpu.mig.config import ConfigError, parse_config
from kubegpu.mig.parted import (
    ApplyError,
    apply_config,
    assert_config,
    export_config,
    generate_config,
)
from kubegpu.nvml import Nvml
from kubegpu.nvml.sim import SimControls, SimNvml

console = Console(highlight=False)

MIXED = """\
version: v1
mig-configs:
  inference-and-training:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"1g.18gb": 7}
    - devices: [4, 5]
      mig-enabled: true
      mig-devices: {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
    - devices: [6, 7]
      mig-enabled: false
"""

TOO_MUCH = """\
version: v1
mig-configs:
  greedy:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.71gb": 2, "1g.18gb": 1}
"""


def _step(title: str) -> None:
    console.rule(f"[bold cyan]{title}")


def _mig_table(gpus: Nvml) -> Table:
    table = Table("GPU", "MIG", "MIG devices (profile@start, UUID)")
    for d in gpus.devices():
        mode = gpus.mig_mode(d.index)
        devices = gpus.mig_devices(d.index)
        listing = "\n".join(f"{m.profile}@{m.placement.start}  {m.uuid}" for m in devices) or "-"
        table.add_row(str(d.index), "on" if mode.current else "off", listing)
    return table


def demo(
    state: Path | None = typer.Option(
        None, "--state", help="Keep the simulated node's state file here."
    ),
) -> None:
    """Walk through MIG on a simulated 8x H200 node: generate, validate, apply, assert, export."""
    with tempfile.TemporaryDirectory(prefix="kubegpu-demo-") as tmp:
        path = state or Path(tmp) / "node.json"
        gpus = SimNvml.create(path, "h200:8")
        _step("1. A simulated node with 8 NVIDIA H200 (state in a file every process shares)")
        table = Table("GPU", "name", "UUID", "memory", "PCI id")
        for d in gpus.devices():
            table.add_row(
                str(d.index),
                d.name,
                d.uuid,
                f"{d.memory_total_mib} MiB",
                f"0x{d.pci_device_id:08X}",
            )
        console.print(table)
        sysinfo = gpus.system()
        console.print(
            f"driver {sysinfo.driver_version}, CUDA {'.'.join(map(str, sysinfo.cuda_version))}"
        )

        _step("2. The standard configs, generated from the hardware (as the MIG manager does)")
        generated = generate_config([get_model(d.model_id) for d in gpus.devices() if d.model_id])
        console.print(", ".join(generated.mig_configs))
        name, entries = generated.select("all-balanced")
        console.print(
            Panel(
                generated.model_copy(update={"mig_configs": {name: entries}}).to_yaml(),
                title="all-balanced",
            )
        )

        _step("3. Apply all-balanced: MIG mode on, then instances at explicit placements")
        apply_config(gpus, name, entries, report=lambda msg: console.print(f"  {msg}"))
        console.print(_mig_table(gpus))
        console.print(
            f"assert all-balanced: {'applied' if not assert_config(gpus, name, entries) else 'NOT applied'}"
        )

        _step("4. A bad layout is refused before any GPU is touched")
        bad = parse_config(TOO_MUCH, "greedy.yaml")
        try:
            apply_config(gpus, *bad.select("greedy"))
        except ConfigError as exc:
            console.print(f"[red]error:[/red] {str(exc).splitlines()[0]}")
        console.print(
            f"assert all-balanced still: {'applied' if not assert_config(gpus, name, entries) else 'NOT applied'}"
        )

        _step("5. A mixed node: 7 small slices on GPUs 0-3, a mix on 4-5, whole GPUs on 6-7")
        mixed = parse_config(MIXED, "mixed.yaml")
        apply_config(gpus, *mixed.select(None), report=lambda msg: console.print(f"  {msg}"))
        console.print(_mig_table(gpus))
        console.print(Panel(export_config(gpus).to_yaml(), title="kubegpu mig export"))

        _step("6. A workload holds a MIG device: repartitioning is refused and nothing changes")
        held = gpus.mig_devices(0)[0]
        SimControls.of(gpus).start_process(0, pid=4242, used_memory_mib=8000, mig_device=held.uuid)
        try:
            apply_config(gpus, name, entries)
        except ApplyError as exc:
            console.print(f"[red]error:[/red] {exc}")
        ok = not assert_config(gpus, *mixed.select(None))
        console.print(f"assert inference-and-training: {'applied' if ok else 'NOT applied'}")
        console.print(
            "\nTry it yourself: kubegpu mig generate --model h200 > configs.yaml; "
            "kubegpu mig apply -f configs.yaml -c all-1g.18gb --nvml sim:/tmp/node.json --sim-node h200:8"
        )
