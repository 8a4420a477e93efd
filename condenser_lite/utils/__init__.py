"""What every layer shares: the known errors, settings checks, the cache and the devices.

* ``errors.py``: the problems a user can fix, each named in one line;
* ``checks.py``: settings' types and signs, checked where they enter;
* ``cache.py``: the cache root, names by content, compute-once and the folder lock;
* ``devices.py``: the device to run on, the precision ``"auto"`` means here, the TPU's few calls.

May import: nothing of the library.
"""
