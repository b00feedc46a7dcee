"""Tests of `contextfold/core/sizing/` (the tests of a module live where its path says)."""
