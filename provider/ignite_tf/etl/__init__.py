"""ETL: load CSV/Parquet/generated rows into an Ignite table (input checking, binary encoding, the load)."""
