"""The RL loop: algorithms, trainer, controller, workers, evaluation and the run's outputs."""
