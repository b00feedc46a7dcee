"""docs/rules.md states every behaviour rule the tests name, so the repository stands alone.

A test names a rule in a comment (`# K1`, `# M4-M5`, `# S2, S3 on real data`) or at the start
of its name (`test_e1_baseline_…_e2_…`: every rule-shaped word of such a name counts). The
check reads real comments with `tokenize`, so rule-shaped text inside strings (a colour such
as "#D08770") is not mistaken for a rule.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
RULES = ROOT / "docs" / "rules.md"

FAMILIES = "TBEKMAPSRCODULNVGWYQ"  # the rule families; X (non-goals) has no numbered rules
RULE_IN_TEXT = re.compile(rf"\b([{FAMILIES}])([1-9][0-9]?)\b")
RULE_IN_NAME = re.compile(rf"^[{FAMILIES.lower()}][1-9][0-9]?$")
STATED = re.compile(r"^- \*\*([A-Z][0-9]+)\*\* — \S", re.MULTILINE)
SECTION = re.compile(r"^## ([A-Z]) — \S.*$", re.MULTILINE)
# Rule-shaped words that mean something else in one file: Pi's session format versions.
NOT_RULES = {"test_formats_pi.py": {"V1", "V3"}}


def rules_in_comments(source: str) -> set[str]:
    found: set[str] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found.update(a + b for a, b in RULE_IN_TEXT.findall(tok.string))
    return found


def rules_in_test_names(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and \
                node.name.startswith("test_"):
            words = node.name.split("_")[1:]
            if words and RULE_IN_NAME.match(words[0]):
                found.update(w.upper() for w in words if RULE_IN_NAME.match(w))
    return found


def rules_named_by_tests() -> dict[str, set[str]]:
    """Rule id -> test files naming it."""
    named: dict[str, set[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        names = rules_in_test_names(source) - NOT_RULES.get(path.name, set())
        for rule in rules_in_comments(source) | names:
            named.setdefault(rule, set()).add(str(path.relative_to(ROOT)))
    return named


def stated_rules(text: str) -> dict[str, str]:
    """Rule id -> the family section it is stated in."""
    sections = [(m.start(), m.group(1)) for m in SECTION.finditer(text)]
    stated: dict[str, str] = {}
    for m in STATED.finditer(text):
        family = next((f for start, f in reversed(sections) if start < m.start()), "")
        stated[m.group(1)] = family
    return stated


def test_the_scanner_finds_comment_and_name_rules_but_not_strings():
    source = (
        'COLOUR = "#D08770"  # K1 and M4-M5\n'
        "def test_e1_baseline_and_e2_rest():  # S2, S3 on real data\n"
        "    pass\n"
        "def test_real_session_v1_chain():\n"
        "    pass\n"
    )
    assert rules_in_comments(source) == {"K1", "M4", "M5", "S2", "S3"}
    assert rules_in_test_names(source) == {"E1", "E2"}


def test_every_rule_named_in_tests_is_stated_in_docs_rules():
    stated = stated_rules(RULES.read_text(encoding="utf-8"))
    missing = {rule: sorted(files) for rule, files in rules_named_by_tests().items()
               if rule not in stated}
    assert not missing, f"state these rules in docs/rules.md: {missing}"


def test_each_rule_sits_in_its_own_family_section_once():
    text = RULES.read_text(encoding="utf-8")
    ids = STATED.findall(text)
    assert len(ids) == len(set(ids)), "a rule is stated twice"
    families = SECTION.findall(text)
    assert len(families) == len(set(families)), "a family has two sections"
    misplaced = {rule: family for rule, family in stated_rules(text).items()
                 if rule[0] != family}
    assert not misplaced, f"rules outside their family's section: {misplaced}"
