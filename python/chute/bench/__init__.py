"""Benchmark helpers: a synthetic ImageNet-like dataset and the PyTorch DataLoader peer."""
