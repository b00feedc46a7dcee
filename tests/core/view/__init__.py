"""Tests of `contextfold/core/view/` (the tests of a module live where its path says)."""
