"""What every layer shares: the known errors, settings checks, the cache, the devices, checkpoint
files and several processes.

* ``errors.py``: the problems a user can fix, each named in one line;
* ``checks.py``: settings' types and signs, checked where they enter;
* ``roles.py``: a setting's role (who reads it, its part in a cache key, a resume, the health
  check), declared once on its field;
* ``cli_args.py``: the command line's argument types and its one-line errors, for the scripts too;
* ``cache.py``: the cache root, names by content, compute-once and the folder lock;
* ``devices.py``: the device to run on, the precision ``"auto"`` means here, the TPU's few calls;
* ``loading.py``: checkpoint files, loading them with errors that name the folder, naming them by
  content (chapters 2, 4);
* ``distributed.py``: this process's rank, gathering and summing across processes, a training
  step's hooks with or without ``accelerate`` (chapter 3).

May import: nothing of the library.
"""
