"""Tests of `contextfold/providers/` (the tests of a module live where its path says)."""
