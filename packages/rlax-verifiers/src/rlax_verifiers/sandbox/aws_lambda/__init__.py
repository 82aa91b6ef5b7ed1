"""The ``lambda`` sandbox: batches run by the "oubliette" AWS Lambda function.

``client`` calls the function through boto3; ``local_api`` serves the Lambda Invoke API
on this machine, running the same handler in a fresh process per invocation, for tests
and for running without AWS; ``Dockerfile`` builds the function's container image.
"""
