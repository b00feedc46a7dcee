"""Tests of `contextfold/core/planning/` (the tests of a module live where its path says)."""
