from ignite_tf.dags import load_dags

airflow_dags = load_dags(__file__, "specs/*.yaml", globals())
