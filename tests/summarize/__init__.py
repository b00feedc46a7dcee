"""Tests of `contextfold/summarize/` (the tests of a module live where its path says)."""
