"""Test infrastructure that stays out of the wheel: the fault proxy (fault_proxy.py) and the S3 emulator
(s3_server.py), on loopback. Importable by the tests (pytest puts python/tests on sys.path) and by the
scripts under bench/ that put it there themselves. The nginx origin and the latency relay that
``chute bench --remote`` needs are a benchmark component: chute.bench.loopback."""
