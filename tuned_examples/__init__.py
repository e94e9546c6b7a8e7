"""Tuned examples: runnable training scripts whose configs are importable (RLlib's style).

``tuned_examples/atari/<game>.py`` and ``tuned_examples/minatar/<game>.py`` each define
``ENV``, ``BUDGET``, ``EXPECTED`` and ``config(algo="HCA", credit=None)``; see README.md.
"""
