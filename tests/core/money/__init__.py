"""Tests of `contextfold/core/money/` (the tests of a module live where its path says)."""
