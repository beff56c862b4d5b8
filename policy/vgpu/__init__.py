"""Software and cloud vGPUs: Project-HAMi's names, ranges and node records, and the cloud vGPU products gpupolicy
recognises."""
