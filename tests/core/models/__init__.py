"""Tests of `contextfold/core/models/` (the tests of a module live where its path says)."""
