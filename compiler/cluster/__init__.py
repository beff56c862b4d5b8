"""The live cluster against the policy: read it (snapshot), compare it (verify), draft a spec from it (discover)."""
