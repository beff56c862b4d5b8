"""What gpupolicy knows of NVIDIA's hardware and of the releases of the software that drives it: the GPU catalog,
MIG geometry, drivers, device-plugin and GPU Operator releases, sizing arithmetic, node labels."""
