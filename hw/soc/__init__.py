"""tensorfab.hw.soc: SoC tops around the core (memory, UART host bridge, LEDs)."""
