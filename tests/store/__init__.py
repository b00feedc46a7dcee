"""Tests of `contextfold/store/` (the tests of a module live where its path says)."""
