"""Which functions a setting's value passes on its way from the command line to where it is used:
run a command under a profiler and list, in call order, every function of ``condenser_lite`` (and
``torch.optim``) whose arguments or locals hold the value, directly or one attribute or key deep
(a config object, a dict of settings). Give the setting an unusual value so that nothing else
equals it by chance. Then it prints the library's call stack at the moment the value reaches the run's
optimizer (the last one built): the functions that hand it on to the optimizer, as against those that only read it.

    python scripts/trace_setting.py 1.23457e-4 -- pretrain --preset micro --method mlm \\
        --set max_steps=2 --set lr=1.23457e-4 --output-dir /tmp/trace
"""

from __future__ import annotations

import dataclasses
import sys


def holds(obj, value: float, depth: int = 1) -> bool:
    """Whether ``obj`` is ``value``, or holds it one attribute or key deep (``depth``)."""
    if isinstance(obj, float):
        return obj == value
    if depth <= 0 or isinstance(obj, (str, bytes, int, type)) or obj is None:
        return False
    if isinstance(obj, dict):
        return any(holds(v, value, depth - 1) for v in list(obj.values())[:200])
    if isinstance(obj, (list, tuple)):
        return any(holds(v, value, depth - 1) for v in obj[:50])
    if dataclasses.is_dataclass(obj):
        return any(holds(getattr(obj, f.name, None), value, depth - 1) for f in dataclasses.fields(obj))
    return False


def main() -> None:
    if "--" not in sys.argv[2:] or len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[-1])
    value, command = float(sys.argv[1]), sys.argv[sys.argv.index("--") + 1:]
    seen: list[str] = []
    handed: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not (module.startswith("condenser_lite") or module.startswith("torch.optim")):
            return
        name = f"{module}.{frame.f_code.co_qualname}"
        holding = any(holds(v, value) for v in list(frame.f_locals.values()))
        if holding and name not in seen:
            seen.append(name)
        if holding and module.startswith("torch.optim") and frame.f_code.co_qualname.endswith(".__init__"):
            handed.clear()  # the last optimizer built is the run's (the dry-run estimate's probe builds one first)
            outer = frame.f_back
            while outer is not None:
                caller = outer.f_globals.get("__name__", "")
                if caller.startswith("condenser_lite"):
                    handed.insert(0, f"{caller}.{outer.f_code.co_qualname}")
                outer = outer.f_back

    from condenser_lite.cli import main as cli

    sys.argv = ["condenser_lite", *command]
    sys.setprofile(profile)
    try:
        cli()
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    print(f"{len(seen)} functions hold {value!r}, in the order they are first called:")
    for i, name in enumerate(seen, 1):
        print(f"{i:3d}. {name}")
    print(f"the call stack when it reaches the optimizer, {len(handed)} functions of the library:")
    for i, name in enumerate(handed, 1):
        print(f"{i:3d}. {name}")


if __name__ == "__main__":
    main()
