"""The rlax-launchers plugin module, loaded through its ``rlax`` entry point.

It will register the ``local``, ``tpu-vm`` and ``gke`` launchers. Until those are built,
it registers nothing, so ``rlax plugins`` lists the package as loaded without
implementations and a run config that asks for them is refused with the list of what is
installed.
"""
