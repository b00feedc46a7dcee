"""Tests of `contextfold/core/render/` (the tests of a module live where its path says)."""
