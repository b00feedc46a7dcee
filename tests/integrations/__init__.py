"""Tests of `contextfold/integrations/` (the tests of a module live where its path says)."""
