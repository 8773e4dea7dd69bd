"""The TensorFlow cluster: spec (who runs where), state (what is running), launchers and the supervisor."""
