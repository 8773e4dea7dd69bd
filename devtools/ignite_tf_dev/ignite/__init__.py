"""A local Apache Ignite cluster (JVMs from Maven Central) for development and tests."""
