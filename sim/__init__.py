"""tensorfab.sim"""
