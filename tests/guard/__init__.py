"""Tests of `contextfold/guard/` (the tests of a module live where its path says)."""
