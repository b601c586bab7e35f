"""Servers on 127.0.0.1 for chute's tests and benchmarks of remote I/O (HTTP, S3 emulation, faults)."""
