"""Tests of `contextfold/formats/` (the tests of a module live where its path says)."""
