"""The validation gate: Great Expectations suites run over the shards a training will read."""
