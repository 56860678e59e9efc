"""tensorfab.hw.soc: SoC tops (core + on-chip memory + UART host bridge + LEDs)."""
