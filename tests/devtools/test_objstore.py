"""The local object store (s3proxy) answers S3 requests from s3fs/fsspec: real HTTP, nothing simulated."""

from __future__ import annotations

import fsspec


def test_objects_round_trip_through_the_store(s3_bucket):
    fs, root = fsspec.url_to_fs(f"s3://{s3_bucket}/run")
    fs.pipe(f"{root}/logs/chief.log", b"epoch 1\n")
    with fs.open(f"{root}/big.bin", "wb", block_size=5 * 2**20) as f:  # a multipart upload
        f.write(b"x" * (11 * 2**20))
    fs.invalidate_cache()
    assert fs.cat(f"{root}/logs/chief.log") == b"epoch 1\n"
    assert fs.info(f"{root}/big.bin")["size"] == 11 * 2**20
    fs.rm(f"{root}/big.bin")
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/big.bin")
