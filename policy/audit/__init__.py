"""What a policy does to the running cluster: existing workloads audited, and the impact of a spec change.

`scan` judges recorded or live objects with the admission engine and folds them per owning workload; `reports`
turns an audit into wg-policy PolicyReports (or OpenReports Reports); `impact` compares two resolved policies
(capacity per class and tenant, disruption on nodes) and two audits. No I/O: the command line reads the objects.
"""
