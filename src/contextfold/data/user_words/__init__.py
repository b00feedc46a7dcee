"""Natural user rules for `contextfold eval` (issue 37): a byte-for-byte copy of the
hand-written `tests/fixtures/user_words/natural_rules.json` (written before the code; see
that folder's README), packaged so the command runs from an installed wheel. A test keeps
the two copies equal."""
