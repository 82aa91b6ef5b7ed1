"""The code that runs inside the isolation boundary: zygotes, run setup, batches.

This package uses only the standard library and relative imports, so it runs as it is
in places where RLAX is not installed: copied into the Docker sandbox image as
``/opt/rlax/isolate``, bind-mounted read-only into the local backend's namespaces, and
imported by the Lambda handler.

Shape: a *driver* (:mod:`.pool`) owns one *zygote* (:mod:`.zygote`) per slot. A zygote
is a warm interpreter, started once inside the isolation, that forks one fresh child per
run (:mod:`.child`); the child drops to the slot's unprivileged uid, applies rlimits and
runs the program, and is discarded afterwards. The zygote never sees a program's source,
input or output: the driver hands it only file descriptors and limits, so nothing from
one run lingers in the memory that the next child is forked from.
"""
