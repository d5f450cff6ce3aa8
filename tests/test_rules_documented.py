"""docs/design.md §8.2 names every rule of the verdict, and names no rule the code lacks."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tracediff
from tracediff.diff.verdict.pair_rules import PAIR_RULES

PACKAGE = Path(tracediff.__file__).parent
DESIGN = PACKAGE.parent / "docs" / "design.md"
# Where a first divergence gets its `rule`: the trace rules, the same-input verdict, a replica drift.
RULE_SOURCES = [*sorted((PACKAGE / "diff" / "verdict").glob("*.py")), PACKAGE / "diff" / "decide.py",
                PACKAGE / "diff" / "rank_verdict.py"]


def _rules_named_in_code() -> set[str]:
    """Every `rule="..."` keyword given where a divergence is made."""
    names = set()
    for path in RULE_SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "rule" and isinstance(node.value, ast.Constant):
                names.add(node.value.value)
    return names


def _rules_section() -> str:
    text = DESIGN.read_text()
    return text[text.index("### 8.2 The trace rules"):text.index("### 8.3")]


def test_every_rule_a_report_can_name_is_documented_and_no_other() -> None:
    section = _rules_section()
    named_in_code = _rules_named_in_code()
    assert len(named_in_code) > 15  # the walk's rules were found at all
    documented = set(re.findall(r"`([a-z_]+)`", section))
    assert named_in_code - documented == set(), "rules missing from docs/design.md §8.2"
    listed = section[section.index("The names a report's"):]
    listed_names = set(re.findall(r"`([a-z_]+)`", listed)) - {"may_start_earlier", "strict_structure", "same_input_divergence"}
    helpers = {"unsure_if_barely_beyond", "unsure_if_inputs_moved"}  # refinements that keep the rule they refine
    assert listed_names - named_in_code - helpers == set(), "docs/design.md §8.2 names rules the code lacks"


def test_the_pair_rules_are_documented_in_their_order() -> None:
    section = _rules_section()
    numbered = re.findall(r"^\s*\d+\. `([a-z_]+)`", section, re.MULTILINE)
    assert numbered == [rule.__name__ for rule in PAIR_RULES]
    for rule in PAIR_RULES:
        assert rule.__doc__ and "Example" in rule.__doc__, f"{rule.__name__} needs its case and an example"
