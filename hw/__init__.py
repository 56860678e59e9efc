"""tensorfab.hw"""
