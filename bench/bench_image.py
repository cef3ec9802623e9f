"""The operand image's size per architecture, from what `make image` left under dist/.

Target (issue 25): <= 80 MiB compressed per architecture. Compressed: the sum of the
manifest's layer blobs (what a node pulls); unpacked: the layers' uncompressed size. Also
the sizes of the release artefacts and the build time scripts/build-image recorded.

    python -m bench.bench_image           (after `make image`; not part of `make bench`)
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
TARGET_MIB = 80.0
MIB = 1024 * 1024


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest


def _unpacked(path: Path) -> int:
    size = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            size += len(chunk)
    return size


def image_sizes(layout: Path) -> tuple[str, int, int]:
    """(manifest digest, compressed bytes, unpacked bytes) of the layout's one image."""
    entry = json.loads((layout / "index.json").read_text())["manifests"][0]
    manifest = json.loads(_blob(layout, entry["digest"]).read_bytes())
    layers = [_blob(layout, layer["digest"]) for layer in manifest["layers"]]
    compressed = sum(layer["size"] for layer in manifest["layers"])
    return entry["digest"], compressed, sum(_unpacked(p) for p in layers)


def run() -> int:
    layouts = sorted((DIST / "image").glob("oci-*"))
    if not layouts:
        print(f"bench_image: no image under {DIST}/image (run `make image`)", file=sys.stderr)
        return 1
    over = 0
    print(f"{'arch':<6} {'compressed MiB':>15} {'unpacked MiB':>13}  digest")
    for layout in layouts:
        digest, compressed, unpacked = image_sizes(layout)
        arch = layout.name.removeprefix("oci-")
        flag = "" if compressed / MIB <= TARGET_MIB else f"  OVER the {TARGET_MIB:.0f} MiB target"
        over += bool(flag)
        print(f"{arch:<6} {compressed / MIB:>15.1f} {unpacked / MIB:>13.1f}  {digest}{flag}")
    times = DIST / "image" / "build-seconds"
    if times.exists():
        print("build time:", ", ".join(times.read_text().split("\n")).strip(", "))
    print("\ndist/ artefacts:")
    artefacts = [*DIST.glob("*"), *(DIST / "release").glob("*")]
    for path in sorted(p for p in artefacts if p.is_file()):
        print(f"  {path.stat().st_size / MIB:>8.1f} MiB  {path.relative_to(DIST)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(run())
