import pytest


@pytest.fixture(scope="session")
def spark():
    """One Spark session (local[2]) for every report test: starting one costs seconds."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (extra 'analytics')")
    from trio_broker.analytics.job import build_session

    session = build_session("local[2]", "trio-broker-report-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
