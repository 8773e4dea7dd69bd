"""Planning: which Ignite node holds which partition, and the shard plan that deals read tasks to workers."""
