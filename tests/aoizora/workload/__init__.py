"""Tests of the Wan workload, rules, candidates and AOT compilation."""
