"""tensorfab.runtime: graph executor and CPU kernels; never imports the compiler."""
