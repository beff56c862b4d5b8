"""`gpupolicy plan`: choose each node class's sharing mode and sizing from measured workloads.

Pure like the rest of the core: text in (inventories, manifests, Prometheus exports), values out (ranked
candidates with their reasons, spec fragments, simulations). One concept per module:

- ``figures``: every overhead, isolation level, compatibility figure and default weight, with its source;
- ``inventory``: the workload inventory, parsed from YAML, CSV, application manifests and Prometheus exports;
- ``candidates``: the sharing modes, replica counts and MIG layouts one GPU model allows;
- ``packing``: how many GPUs a candidate needs for the inventory, and which slot hosts what;
- ``scoring``: contention, isolation, OOM risk and the weighted score, with the reasons;
- ``simulate``: a batch of tasks run under each candidate (makespan, utilization), deterministic for a seed;
- ``recommend``: the ranking per class, the spec fragments and the full draft.
"""
