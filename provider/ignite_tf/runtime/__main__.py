"""``python -m ignite_tf.runtime``: run one TensorFlow task of a cluster (see :mod:`ignite_tf.runtime.train`)."""

from ignite_tf.runtime.train import exit_with, main

exit_with(main())
