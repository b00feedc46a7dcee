"""Tests of `contextfold/core/report/` (the tests of a module live where its path says)."""
