import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: the packaging test (builds a wheel, installs it into a new venv)"
    )
