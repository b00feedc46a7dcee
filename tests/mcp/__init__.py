"""Tests of `contextfold/mcp/` (the tests of a module live where its path says)."""
