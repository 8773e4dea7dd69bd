"""The model registry: versions published behind a quality gate, on any fsspec location."""
