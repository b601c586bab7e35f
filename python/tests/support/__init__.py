"""Test infrastructure that stays out of the wheel: the fault proxy (fault_proxy.py), the S3 emulator
(s3_server.py), an object server that replaces objects between ranges and stalls (object_server.py), and
stand-ins for AWS's metadata, STS and container-credential services (aws_standins.py), on loopback.
Importable by the tests (pytest puts python/tests on sys.path) and by the scripts under bench/ that put it
there themselves. The nginx origin and the latency relay that
``chute bench --remote`` needs are a benchmark component: chute.bench.loopback."""
