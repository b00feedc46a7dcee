"""Tests of `contextfold/core/values/` (the tests of a module live where its path says)."""
