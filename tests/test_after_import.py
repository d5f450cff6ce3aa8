"""record/after_import.py: a callback once a module is imported, now or later."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from tracediff.record.after_import import AfterImport


def test_the_callback_runs_once_the_module_has_been_imported_and_not_before(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "tracediff_late_module.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    with AfterImport("tracediff_late_module", lambda module: seen.append(module.VALUE)) as hook:
        assert seen == [] and hook in sys.meta_path
        import tracediff_late_module  # noqa: F401

        assert seen == [41] and hook not in sys.meta_path
    del sys.modules["tracediff_late_module"]


def test_a_module_imported_already_is_handed_over_at_once() -> None:
    seen: list[ModuleType] = []
    with AfterImport("json", seen.append) as hook:
        assert [m.__name__ for m in seen] == ["json"] and hook not in sys.meta_path


def test_leaving_before_the_import_leaves_nothing_behind() -> None:
    with AfterImport("tracediff_never_imported", lambda module: None) as hook:
        pass
    assert hook not in sys.meta_path


def test_a_lookup_without_an_import_leaves_the_hook_waiting(tmp_path: Path, monkeypatch) -> None:
    """`importlib.util.find_spec` asks the finders without importing: the callback must still come with the
    import after it, and two hooks on one module both fire."""
    import importlib.util

    (tmp_path / "tracediff_looked_up.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[tuple[str, int]] = []
    first = AfterImport("tracediff_looked_up", lambda m: seen.append(("first", m.VALUE)))
    second = AfterImport("tracediff_looked_up", lambda m: seen.append(("second", m.VALUE)))
    with first, second:
        assert importlib.util.find_spec("tracediff_looked_up") is not None and seen == []
        import tracediff_looked_up  # noqa: F401

        assert sorted(seen) == [("first", 7), ("second", 7)]
    del sys.modules["tracediff_looked_up"]
