"""Container Device Interface (CDI) specs, one implementation for the whole project.

Every writer (the device plugin, the DRA plugin, the MIG manager) builds its spec here and
every reader (the validator, the simulated container runtime and kubelet) parses specs
here, so the device nodes, the driver's files and hooks, and the scoping of edits to the
devices they belong to are the same everywhere (node-runtime.md §3):

- `spec`: the typed spec, written with the lowest version its content needs, parsed back
  with every refusal naming file, field and value;
- `nodes`: device nodes per GPU and MIG device, and the one list of control nodes;
- `driver`: the driver's libraries, binaries, firmware and IPC sockets found under the
  driver root, with nvcdi's hooks;
- `build`: the device plugin's, the MIG manager's and the per-claim specs, written
  atomically;
- `registry`: the specs of a node's spec directories, and CDI names resolved to edits.

The package sits below `kubegpu.sharing` in the layer contract (pyproject.toml): it needs
only the catalog's names, so every node component and the simulator can import it.
"""
