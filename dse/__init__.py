"""Design-space exploration: which accelerator configuration to build.

Sweeps of :class:`~tensorfab.isa.HwConfig` fields over workloads run on
dask.distributed (a LocalCluster by default); per point the timing model gives cycles,
real FPGA builds or a resource model fitted to them give resources and fmax. The same
layer holds the per-model advice, verification at scale and the schedule tuner. It sits
above the models and FPGA builds and below the benchmarks and the command line.
"""
