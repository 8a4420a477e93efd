"""Running the command line inside a test, shared by the tests of each module whose checks the
commands show: ``cli`` runs one command in this process and returns its exit status, stdout and
stderr; ``one_error_line`` is the single ``error: ...`` line of a refused command; ``FINETUNE``, the
flags of a two-step fine-tuning on the 12-document BEIR folder (``toy_data.write_beir``, the
fixture ``beir``)."""

from __future__ import annotations

from condenser_lite.cli import main


def cli(args: list, capsys) -> tuple[int, str, str]:
    """Run the command line in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(result: tuple[int, str, str]) -> str:
    """The single ``error: ...`` line of a refused command (exit status 1, no traceback)."""
    code, _, err = result
    assert code == 1, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


def finetune_with(*pairs: str) -> list[str]:
    """``FINETUNE`` with ``pairs`` (``"finetune.lr=0"``) in place of its own settings of the same
    paths: a path given twice is refused, so a test's change replaces the default."""
    from condenser_lite.reproduction.configuration.settings_tree import setting_path

    changed = {setting_path(p.split("=", 1)[0]) for p in pairs}
    out, args = [], list(FINETUNE)
    while args:
        flag = args.pop(0)
        if flag == "--set" and setting_path(args[0].split("=", 1)[0]) in changed:
            args.pop(0)
        else:
            out.append(flag)
    return [*out, *(x for p in pairs for x in ("--set", p))]


FINETUNE = ["--data", "scifact", "--set", "finetune.max_steps=2", "--set", "finetune.batch_size=2", "--set", "train_n_passages=1",
            "--set", "p_max_len=64", "--set", "n_bm25_negatives=3"]
