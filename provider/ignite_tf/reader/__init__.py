"""Reading Ignite partitions: the read tasks (a partition or a key-hash slice of one), the thin-client scan, the
binary-object decoder, the table layout, a read started ahead of time, and the regrouping of the blocks it
yields."""
