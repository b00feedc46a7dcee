"""Tests of `contextfold/runtime/` (the tests of a module live where its path says)."""
