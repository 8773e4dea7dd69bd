"""Airflow DAGs from the YAML pipeline specs in specs/ (see ignite_tf/resources/pipeline.schema.json)."""
from ignite_tf.dags import load_dags

load_dags(__file__, "specs/*.yaml", globals())
