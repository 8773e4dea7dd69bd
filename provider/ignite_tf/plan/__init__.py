"""Planning: which Ignite node holds which partition, the shard plan over workers, the read tasks."""
