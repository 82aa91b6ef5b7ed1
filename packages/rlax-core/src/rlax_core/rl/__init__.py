"""The RL loop: algorithms, trainer, controller, workers and evaluation."""
