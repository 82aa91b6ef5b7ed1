"""The RL loop: algorithms, trainer, controller, workers and the run's outputs."""
