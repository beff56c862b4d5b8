"""The pod controllers the rules check, each with the path of its pod spec (shared by the policy tests)."""

CONTROLLERS = [
    ("Pod", "v1", ("spec",)),
    ("Deployment", "apps/v1", ("spec", "template", "spec")),
    ("ReplicaSet", "apps/v1", ("spec", "template", "spec")),
    ("StatefulSet", "apps/v1", ("spec", "template", "spec")),
    ("DaemonSet", "apps/v1", ("spec", "template", "spec")),
    ("Job", "batch/v1", ("spec", "template", "spec")),
    ("CronJob", "batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
    ("ReplicationController", "v1", ("spec", "template", "spec")),
]
