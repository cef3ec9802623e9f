"""What every node component shares, below the components and above `kube`.

- `node.config`: the device-plugin config this node runs (file, or the named config its
  `nvidia.com/device-plugin.config` label picks), with the first-label wait and events;
- `node.overrides`: flag and environment values over that config, checked one by one;
- `node.runtime`: `run(component)`: logging, signals and exit codes of every program;
- `node.gpus`: the GPU backend `--nvml` chose: NVML, its CUDA probe and its MPS backend;
- `node.api`: the API client a node agent uses.

Import the submodule you need: this package imports nothing, so a component's process
holds only what it uses.
"""
