"""Tests of `contextfold/replay/` (the tests of a module live where its path says)."""
