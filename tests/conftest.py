import shutil
from pathlib import Path

import pytest

# The kafka_broker / kafka_broker_factory fixtures come from trio_broker's own pytest plugin
# (entry point pytest11), exactly as other projects get them.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nemesis-soak",
        type=int,
        default=0,
        metavar="N",
        help="run each fault of tests/cluster/test_nemesis.py N times (default once)",
    )


@pytest.fixture
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (apt-get install kcat; .ci/run installs it)")
    return path


KAFKAJS_DIR = Path(__file__).resolve().parent / "kafkajs"


@pytest.fixture
def kafkajs() -> tuple[str, Path]:
    """(node, the directory of the KafkaJS scripts): KafkaJS (npm), the JavaScript client."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (.ci/run installs it)")
    if not (KAFKAJS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip(f"KafkaJS is not installed (npm ci --prefix {KAFKAJS_DIR}; .ci/run does it)")
    return node, KAFKAJS_DIR
