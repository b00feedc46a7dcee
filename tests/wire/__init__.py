"""Tests of `contextfold/wire/` (the tests of a module live where its path says)."""
