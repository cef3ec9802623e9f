"""`kubegpu what-if`: a cluster's snapshot rebuilt as a simulated twin, a change tried on it.

`twin_spec` reads what the twin is made of from a snapshot (pure), `change` reads the
proposed change from the user's files, `twin` builds and drives the twin, `report` compares
the twin before and after the change (pure) and `command` is what the CLI calls.
"""
