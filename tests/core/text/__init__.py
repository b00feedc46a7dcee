"""Tests of `contextfold/core/text/` (the tests of a module live where its path says)."""
