import shutil

import pytest

# The kafka_broker / kafka_broker_factory fixtures come from trio_broker's own pytest plugin
# (entry point pytest11), exactly as other projects get them.


@pytest.fixture
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (apt-get install kcat; .ci/run installs it)")
    return path
