"""Re-planning a live cluster: the smallest change that places its Pending GPU pods.

It reads a doctor snapshot (`kubegpu.doctor`) and plans with the planner (`kubegpu.plan`),
two packages of one layer that may not import each other, so it sits a layer above both,
beside the operator and what-if; `kubegpu plan --from-snapshot` is its command.
"""
