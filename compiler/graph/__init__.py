"""tensorfab.compiler.graph: the typed graph IR, its text form, passes and device planning."""
