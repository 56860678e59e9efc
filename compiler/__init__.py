"""tensorfab.compiler"""
