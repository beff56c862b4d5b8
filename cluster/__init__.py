"""The live cluster against the policy: read it (snapshot), compare it (verify), draft a spec from it (discover)."""


class ClusterError(Exception):
    """The cluster cannot be read or gives nothing to work from: one sentence saying why, and the fix."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
