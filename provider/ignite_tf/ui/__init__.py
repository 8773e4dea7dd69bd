"""The ignite-tf page in Airflow's UI (clusters, training curves, shard plans, published models) and TensorBoard.

Plain Python except ``app`` (FastAPI, served by Airflow's API server) and ``plugin`` (the Airflow plugin).
Nothing here imports TensorFlow or Great Expectations.
"""
