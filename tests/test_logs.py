"""framejit.logs: the FRAMEJIT_LOGS syntax, set_logs, and what actually reaches the output."""

from __future__ import annotations

import importlib.util
import io
import logging
import re
import sys
from collections.abc import Iterator

import pytest
from rich.table import Table

from framejit import logs

DEFAULT_LEVELS = dict.fromkeys(logs.COMPONENTS, logging.WARNING)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def default_settings() -> Iterator[None]:
    logs.set_logs()
    yield
    logs.set_logs()


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Every record that reaches the `framejit` logger's handlers, through `add_handler`."""

    class ListHandler(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    handler = ListHandler()
    logs.add_handler(handler)
    yield handler.records
    logs.remove_handler(handler)


def levels(default: int = logging.WARNING, **changed: int) -> dict[str, int]:
    return {**dict.fromkeys(logs.COMPONENTS, default), **changed}


# --- parse_spec -------------------------------------------------------------------------------


def test_empty_spec_is_the_default() -> None:
    for text in ["", "   ", " , ,"]:
        settings = logs.parse_spec(text)
        assert settings == logs.LogSettings()
        assert settings.components == DEFAULT_LEVELS
        assert settings.artifacts == frozenset()


def test_spec_artifacts_and_component_levels_with_spaces() -> None:
    settings = logs.parse_spec(" bytecode , +frontend,-backend ,  api,graph_breaks")
    assert settings.artifacts == {"bytecode", "graph_breaks"}
    assert settings.components == levels(
        frontend=logging.DEBUG, backend=logging.ERROR, api=logging.INFO
    )


def test_spec_all_levels() -> None:
    everything = logs.parse_spec("all")
    assert everything.artifacts == set(logs.ARTIFACTS)
    assert set(everything.components.values()) == {logging.INFO}

    debug = logs.parse_spec("+all")
    assert debug.artifacts == set(logs.ARTIFACTS)
    assert set(debug.components.values()) == {logging.DEBUG}

    errors = logs.parse_spec("-all")
    assert errors.artifacts == frozenset()
    assert set(errors.components.values()) == {logging.ERROR}


def test_spec_named_entries_override_all_wherever_they_stand() -> None:
    assert logs.parse_spec("bytecode,-all") == logs.parse_spec("-all,bytecode")
    settings = logs.parse_spec("bytecode,-all")
    assert settings.artifacts == {"bytecode"}
    assert set(settings.components.values()) == {logging.ERROR}

    settings = logs.parse_spec("-backend,+all")
    assert settings.components == levels(logging.DEBUG, backend=logging.ERROR)


def test_spec_names_that_are_both_component_and_artifact() -> None:
    assert logs.parse_spec("guards") == logs.LogSettings({"guards": logging.INFO}, {"guards"})
    assert logs.parse_spec("+cudagraphs") == logs.LogSettings(
        {"cudagraphs": logging.DEBUG}, {"cudagraphs"}
    )
    # A level above INFO turns the artifact off, even after `all` turned it on.
    settings = logs.parse_spec("all,-guards")
    assert "guards" not in settings.artifacts
    assert settings.components["guards"] == logging.ERROR
    assert "cudagraphs" in settings.artifacts


def test_spec_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError) as info:
        logs.parse_spec("bytecode, bytecod")
    message = str(info.value)
    assert "FRAMEJIT_LOGS" in message
    assert "'bytecod'" in message
    assert "did you mean 'bytecode'" in message
    for name in [*logs.ARTIFACTS, *logs.COMPONENTS, "all"]:
        assert name in message


def test_spec_prefix_on_an_artifact_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"artifacts take no \+/- prefix"):
        logs.parse_spec("+bytecode")


def test_log_settings_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="nonsense"):
        logs.LogSettings({"nonsense": logging.INFO})
    with pytest.raises(ValueError, match="nonsense"):
        logs.LogSettings({}, frozenset({"nonsense"}))


# --- set_logs and the current setting ---------------------------------------------------------


def test_set_logs_sets_levels_and_artifacts() -> None:
    logs.set_logs(bytecode=True, frontend=logging.DEBUG, backend=logging.ERROR)
    assert logs.current_settings() == logs.LogSettings(
        {"frontend": logging.DEBUG, "backend": logging.ERROR}, {"bytecode"}
    )
    assert logs.get_logger("frontend").isEnabledFor(logging.DEBUG)
    assert not logs.get_logger("backend").isEnabledFor(logging.WARNING)


def test_set_logs_replaces_instead_of_merging() -> None:
    logs.set_logs(bytecode=True, frontend=logging.DEBUG)
    logs.set_logs(graph=True)
    assert logs.current_settings() == logs.LogSettings({}, {"graph"})
    assert not logs.enabled("bytecode")
    assert logs.get_logger("frontend").level == logging.WARNING


def test_set_logs_without_arguments_resets() -> None:
    logs.set_logs(all=logging.DEBUG)
    assert logs.current_settings() != logs.LogSettings()
    logs.set_logs()
    assert logs.current_settings() == logs.LogSettings()


def test_set_logs_matches_the_spec() -> None:
    cases = {
        "guards": {"guards": True},
        "+guards": {"guards": logging.DEBUG},
        "all": {"all": True},
        "-all,bytecode": {"all": logging.ERROR, "bytecode": True},
        "+frontend,graph": {"frontend": logging.DEBUG, "graph": True},
    }
    for text, keywords in cases.items():
        logs.set_logs(**keywords)
        assert logs.current_settings() == logs.parse_spec(text), text


def test_set_logs_named_keywords_override_all() -> None:
    logs.set_logs(bytecode=False, all=logging.INFO, backend=logging.ERROR)
    settings = logs.current_settings()
    assert settings.artifacts == set(logs.ARTIFACTS) - {"bytecode"}
    assert settings.components == levels(logging.INFO, backend=logging.ERROR)


def test_set_logs_unknown_keyword_is_a_type_error_naming_valid_ones() -> None:
    with pytest.raises(TypeError) as info:
        logs.set_logs(bytcode=True)
    assert "'bytcode'" in str(info.value)
    for name in [*logs.ARTIFACTS, *logs.COMPONENTS]:
        assert name in str(info.value)


def test_set_logs_wrong_value_types() -> None:
    with pytest.raises(TypeError, match="artifact 'bytecode'"):
        logs.set_logs(bytecode=logging.DEBUG)
    with pytest.raises(TypeError, match="component 'frontend'"):
        logs.set_logs(frontend=True)
    with pytest.raises(TypeError, match="component 'backend'"):
        logs.set_logs(backend="DEBUG")  # type: ignore[arg-type]


def test_a_failed_set_logs_changes_nothing() -> None:
    logs.set_logs(graph=True)
    with pytest.raises(TypeError):
        logs.set_logs(bytecode=True, nonsense=True)
    assert logs.current_settings() == logs.LogSettings({}, {"graph"})


def test_apply_settings_round_trips_current_settings() -> None:
    wanted = logs.parse_spec("+guards,recompiles,-backend")
    logs.apply_settings(wanted)
    saved = logs.current_settings()
    logs.set_logs()
    logs.apply_settings(saved)
    assert logs.current_settings() == wanted


# --- enabled and get_logger -------------------------------------------------------------------


def test_enabled_reflects_settings() -> None:
    assert not any(logs.enabled(name) for name in logs.ARTIFACTS)
    logs.set_logs(recompiles=True, perf_hints=True)
    assert {name for name in logs.ARTIFACTS if logs.enabled(name)} == {"recompiles", "perf_hints"}
    logs.set_logs(all=True)
    assert all(logs.enabled(name) for name in logs.ARTIFACTS)


def test_enabled_and_artifact_reject_unknown_names() -> None:
    with pytest.raises(ValueError, match="valid: bytecode"):
        logs.enabled("bytecod")
    with pytest.raises(ValueError, match="bytecod"):
        logs.artifact("bytecod", "x")


def test_get_logger() -> None:
    logger = logs.get_logger("guards")
    assert logger is logging.getLogger("framejit.guards")
    assert logger.getEffectiveLevel() == logging.WARNING
    with pytest.raises(ValueError, match="valid: frontend"):
        logs.get_logger("guard")


def test_module_loggers_follow_their_component_and_api_covers_the_rest() -> None:
    logs.set_logs(guards=logging.DEBUG, api=logging.ERROR)
    assert logging.getLogger("framejit.guards.cache").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("framejit.config").isEnabledFor(logging.WARNING)
    assert not logging.getLogger("framejit").isEnabledFor(logging.WARNING)
    assert logging.getLogger("framejit.config").isEnabledFor(logging.ERROR)


# --- what reaches the output ------------------------------------------------------------------


def test_enabled_artifact_str_appears_with_prefix_on_every_line(capsys) -> None:
    logs.set_logs(graph_breaks=True)
    logs.artifact("graph_breaks", "graph break: print\nfile train.py, line 14")
    err = capsys.readouterr().err
    assert err == (
        "[framejit:graph_breaks] graph break: print\n"
        "[framejit:graph_breaks] file train.py, line 14\n"
    )


def test_disabled_artifact_writes_nothing_and_calls_nothing(capsys, records) -> None:
    logs.set_logs(graph=True)

    def expensive() -> str:
        raise AssertionError("a disabled artifact's message must not be formatted")

    logs.artifact("bytecode", expensive)
    logs.artifact("bytecode", "plain")
    assert capsys.readouterr().err == ""
    assert records == []


def test_callable_message_is_called_once_when_enabled(capsys) -> None:
    calls = []

    def message() -> str:
        calls.append(1)
        return "deferred text"

    logs.set_logs(recompiles=True)
    logs.artifact("recompiles", message)
    assert capsys.readouterr().err == "[framejit:recompiles] deferred text\n"
    assert calls == [1]


def test_rich_table_becomes_prefixed_plain_text(capsys) -> None:
    table = Table("guard", "expected")
    table.add_row("L['x'].dtype", "torch.float32")
    logs.set_logs(guards=True)
    logs.artifact("guards", lambda: table)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 3
    assert all(line.startswith("[framejit:guards] ") for line in lines)
    text = "\n".join(lines)
    assert "L['x'].dtype" in text and "torch.float32" in text
    assert "\x1b[" not in text  # no colour codes outside a terminal
    assert "<rich.table.Table" not in text


def test_component_records_have_prefix_and_level(capsys) -> None:
    logs.get_logger("guards").info("hidden at the default level")
    logs.get_logger("guards").warning("recompile limit reached")
    logging.getLogger("framejit.guards.cache").warning("from a module logger")
    assert capsys.readouterr().err == (
        "[framejit.guards] WARNING: recompile limit reached\n"
        "[framejit.guards.cache] WARNING: from a module logger\n"
    )
    logs.set_logs(guards=logging.INFO)
    logs.get_logger("guards").info("now shown")
    assert "[framejit.guards] now shown\n" in capsys.readouterr().err


def test_records_reach_added_handlers_with_plain_messages(records) -> None:
    table = Table("node")
    table.add_row("add_1")
    logs.set_logs(graph=True)
    logs.artifact("graph", table)
    logs.artifact("graph", "code here", language="python")
    [table_record, code_record] = records
    assert table_record.name == "framejit.__artifact.graph"
    assert table_record.framejit_artifact == "graph"  # type: ignore[attr-defined]
    assert "add_1" in table_record.getMessage()
    assert code_record.getMessage() == "code here"
    assert code_record.funcName == "test_records_reach_added_handlers_with_plain_messages"


def test_caplog_sees_records_through_add_handler(caplog) -> None:
    # Recent pytest also attaches caplog to non-propagating loggers; add_handler works either way
    # (a handler already attached is not attached twice).
    logs.set_logs(summary=True)
    logs.add_handler(caplog.handler)
    try:
        logs.artifact("summary", "1 graph, 0 breaks")
    finally:
        logs.remove_handler(caplog.handler)
    assert [record.getMessage() for record in caplog.records] == ["1 graph, 0 breaks"]


def test_records_do_not_propagate_to_the_root_logger(capsys) -> None:
    root_records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = root_records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        logs.set_logs(summary=True)
        logs.artifact("summary", "once")
        logs.get_logger("api").warning("warned once")
    finally:
        logging.getLogger().removeHandler(handler)
    assert root_records == []
    err = capsys.readouterr().err
    assert err.count("once") == 2  # one line each, from framejit's own handler


def test_handler_is_installed_once(monkeypatch) -> None:
    def ours() -> list[logging.Handler]:
        root = logging.getLogger("framejit")
        return [h for h in root.handlers if getattr(h, "framejit_handler", False)]

    assert len(ours()) == 1
    # A second copy of the module (loaded from its file, under another name) adds no handler.
    # Not importlib.reload: that would replace classes other test files may have imported.
    spec = importlib.util.spec_from_file_location("framejit_logs_copy", logs.__file__)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "framejit_logs_copy", copy)  # dataclasses look it up
    spec.loader.exec_module(copy)
    assert len(ours()) == 1
    assert logging.getLogger("framejit").propagate is False


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_output_is_drawn_with_rich_and_still_prefixed(monkeypatch) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    table = Table("buffer", "size")
    table.add_row("buf0", "128")
    logs.set_logs(graph=True, output_code=True)
    logs.artifact("graph", table)
    logs.artifact("output_code", "def kernel(in_ptr0):\n    pass", language="python")
    raw = terminal.getvalue()
    assert "\x1b[" in raw  # drawn by rich, with colour
    lines = ANSI.sub("", raw).splitlines()
    assert all(line.startswith(("[framejit:graph] ", "[framejit:output_code] ")) for line in lines)
    text = "\n".join(lines)
    assert "buf0" in text and "128" in text
    assert "def kernel(in_ptr0):" in text


# --- the environment --------------------------------------------------------------------------


def test_apply_env_reads_framejit_logs(monkeypatch) -> None:
    monkeypatch.setenv("FRAMEJIT_LOGS", "graph_code, +backend")
    settings = logs.apply_env()
    assert settings == logs.LogSettings({"backend": logging.DEBUG}, {"graph_code"})
    assert logs.current_settings() == settings
    assert logs.enabled("graph_code")
    assert logs.get_logger("backend").isEnabledFor(logging.DEBUG)


def test_apply_env_unset_means_defaults(monkeypatch) -> None:
    logs.set_logs(bytecode=True)
    monkeypatch.delenv("FRAMEJIT_LOGS", raising=False)
    assert logs.apply_env() == logs.LogSettings()
    assert not logs.enabled("bytecode")


def test_apply_env_bad_value_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("FRAMEJIT_LOGS", "grpah")
    with pytest.raises(ValueError, match="FRAMEJIT_LOGS.*'grpah'.*did you mean 'graph'"):
        logs.apply_env()
