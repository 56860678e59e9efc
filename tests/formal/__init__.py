"""Formal proofs of the hardware's handshakes (SymbiYosys); see docs/architecture.md,
"Formal proofs"."""
