"""Tests of `bench/` (the tests of a module live where its path says)."""
