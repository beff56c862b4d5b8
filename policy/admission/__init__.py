"""The admission engine: what a workload asks for, the rules that judge it, the fixes and hints, the engine
that runs them online (webhook) and offline (`admit`)."""
