"""Pure RL algorithms: advantages, losses, the training batch, model rows, the optimiser, pass@k.

Each is a function (or a small frozen dataclass) of its inputs with its formula in the
docstring and a NumPy reference in the tests; none talks to a transport or a file.
"""
