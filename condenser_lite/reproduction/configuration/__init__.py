"""The reproduction's configuration: what is run, each thing named once.

* ``registry.py``: the arms and the claims, each named once (label, colour, parent, rule);
* ``settings_tree.py``: the settings as one tree (``Preset``: the model, the stages by name, the
  fine-tuning and STS-b recipes, the protocol's choices), each setting by one path, and the presets
  recorded in results files read back;
* ``presets.py``: the named presets (``micro``, ``tiny``, ``small``, ``colab``, ``paper``) and the
  stages they define.

May import: ``training``, ``retrieval``, ``modeling``, ``data`` and ``utils``.
"""
