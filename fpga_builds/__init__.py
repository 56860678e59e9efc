"""tensorfab.fpga_builds"""
