"""Tests of `contextfold/evaluate/` (the tests of a module live where its path says)."""
