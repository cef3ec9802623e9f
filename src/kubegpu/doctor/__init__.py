"""`kubegpu doctor`: a cluster's GPU stack checked for the pitfalls the reference documents.

`snapshot` is the typed view of a cluster (also what `kubegpu what-if` builds its twin
from), `capture` reads it from a live cluster, `checks` are pure functions over it and
`report` renders their findings.
"""
