"""The rlax-transport-grpc plugin module, loaded through its ``rlax`` entry point.

It will register the ``grpc`` transport (parameter server and queues as a gRPC service).
Until those are built, it registers nothing, so ``rlax plugins`` lists the package as
loaded without implementations and a run config that asks for them is refused with the
list of what is installed.
"""
