"""Serving the policy: the OpenAI-compatible endpoint over the rollout engine.

Needs the ``serve`` extra (``pip install rlax-core[serve]``: aiohttp).
"""
