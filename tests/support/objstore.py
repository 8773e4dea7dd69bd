"""The object-store fixture: one s3proxy (``ignite_tf_dev.objstore``, a real S3 server) per test session.

Nothing is simulated: clients speak S3 over HTTP to it. Each test takes its own bucket (``s3_bucket``) so
that tests never see each other's objects. The store is stopped at the end and the test checks its process
is gone.
"""

from __future__ import annotations

import tempfile
import uuid

import pytest
from ignite_tf_dev import objstore

from ignite_tf.cluster.procs import pid_alive


@pytest.fixture(scope="session")
def object_store():
    state = tempfile.mkdtemp(prefix="ignite-tf-s3-")
    store = objstore.start(state)
    yield store
    objstore.stop(state, wipe=True)
    assert not pid_alive(store.pid), f"s3proxy (pid {store.pid}) left running"


@pytest.fixture
def s3_bucket(object_store, monkeypatch):
    """A fresh bucket; the store's endpoint and credentials are in this test's environment (as boto3,
    s3fs and fsspec read them). Yields the bucket's name."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    object_store.bucket_dir(name).mkdir(parents=True)
    for k, v in object_store.env().items():
        monkeypatch.setenv(k, v)
    import s3fs

    # s3fs reads the variables when an instance is made and fsspec caches instances by their arguments: an
    # instance made earlier in the session under another store's variables must not serve this test.
    s3fs.S3FileSystem.clear_instance_cache()
    yield name
