"""Tests of `contextfold/core/`."""
