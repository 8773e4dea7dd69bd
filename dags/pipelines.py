from ignite_tf.pipeline import load_dags

airflow_dags = load_dags(__file__, "specs/*.yaml", globals())
