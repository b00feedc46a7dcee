"""Tests of `contextfold/server/` (the tests of a module live where its path says)."""
