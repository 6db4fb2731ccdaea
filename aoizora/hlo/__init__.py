"""Compiled HLO → typed collective graph (see docs/hlo.md)."""
