"""Compiled HLO → typed collective graph (see docs/hlo.md); a saved device profile read back
(:mod:`aoizora.hlo.profile`: the time each instruction took, input like the HLO text)."""
