"""Tests of `contextfold/core/recall/` (the tests of a module live where its path says)."""
