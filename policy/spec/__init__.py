"""The spec a platform team writes: its pydantic model, YAML loading with positions, and the located diagnostics
every room reports with."""
