"""Tests of `contextfold/cli/` (the tests of a module live where its path says)."""
