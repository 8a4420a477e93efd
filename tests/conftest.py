"""Shared pytest configuration."""


def pytest_configure(config):
    # tests/test_distributed.py starts 2 CPU processes; deselect with -m "not distributed".
    config.addinivalue_line("markers", "distributed: launches several processes (gloo, CPU); runs by default")
