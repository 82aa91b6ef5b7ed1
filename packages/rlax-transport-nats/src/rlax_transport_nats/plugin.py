"""The rlax-transport-nats plugin module, loaded through its ``rlax`` entry point.

It will register the ``nats`` transport (parameter store and queues on JetStream). Until
those are built, it registers nothing, so ``rlax plugins`` lists the package as loaded
without implementations and a run config that asks for them is refused with the list of
what is installed.
"""
