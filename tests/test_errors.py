"""Every error cleanpipe shows its user shares one base that carries the exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import cleanpipe
from cleanpipe import cli
from cleanpipe.errors import CleanpipeError, ExitCode

#: exceptions that never reach the user as such, and why
NOT_FOR_THE_USER = {
    # a chat template failing on one record becomes that record's finding
    "cleanpipe.templating.chat.TemplateError",
    # a conversation the skeleton tracer cannot replay is rendered by jinja instead
    "cleanpipe.templating.chat_skeleton.Unsupported",
    # a report cleanpipe built that breaks its own schema is a bug (exit 70)
    "cleanpipe.report.schema.ReportSchemaError",
}


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for mod in pkgutil.walk_packages(cleanpipe.__path__, "cleanpipe."):
        module = importlib.import_module(mod.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, Exception) and not name.startswith("_")
                    and obj.__module__ == module.__name__):
                found.append(obj)
    return found


def test_every_user_facing_error_is_a_cleanpipe_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 10  # the walk found the package's errors
    stray = [f"{c.__module__}.{c.__name__}" for c in classes
             if not issubclass(c, CleanpipeError)
             and f"{c.__module__}.{c.__name__}" not in NOT_FOR_THE_USER]
    assert stray == []


@pytest.mark.parametrize("code", [ExitCode.USAGE, ExitCode.UNREADABLE])
def test_the_command_line_exits_with_the_code_the_error_carries(
        code: ExitCode, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class NewError(CleanpipeError):
        exit_code = code

    def fail(args: object) -> int:
        raise NewError("data.jsonl:3: something the user can fix")

    monkeypatch.setattr(cli, "cmd_stages", fail)
    assert cli.main(["stages"]) == code
    assert capsys.readouterr().err == "cleanpipe: data.jsonl:3: something the user can fix\n"
