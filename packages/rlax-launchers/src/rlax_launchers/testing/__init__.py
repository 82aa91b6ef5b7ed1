"""Test doubles that run for real: a ``gcloud`` executable and a Kubernetes API server.

They let the launchers' ``--apply`` paths run end to end on a machine without Google
Cloud: the fake ``gcloud`` is a separate process that records its argv, and the fake
API server speaks enough HTTP of the Kubernetes API for the ``kubernetes`` client.
"""
