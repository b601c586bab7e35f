"""Loopback servers for chute's tests and benchmarks of remote I/O (HTTP, faults, latency)."""
