"""Which functions a setting's value passes on its way from the command line to where it is used:
run a command under a profiler and list, in call order, every function of ``condenser_lite`` (and
``torch.optim``) whose arguments or locals hold the value, directly or one attribute or key deep
(a config object, a dict of settings). Give the setting an unusual value so that nothing else
equals it by chance.

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

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not (module.startswith("condenser_lite") or module.startswith("torch.optim")):
            return
        name = f"{module}.{frame.f_code.co_qualname}"
        if name not in seen and any(holds(v, value) for v in list(frame.f_locals.values())):
            seen.append(name)

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


if __name__ == "__main__":
    main()
