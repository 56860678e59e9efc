"""The files a bitstream build writes into its folder, declared once for the flow that
writes them and the command line that reads them or refuses to write over others.

Light on purpose (no Amaranth): the command line imports it at start-up.
"""

from __future__ import annotations

import re

__all__ = ["BUILD_ENTRY", "BUILD_NAME"]

#: The build's name: Amaranth's plan ``build_<name>.sh`` and its products ``<name>.*``
#: (``top.bit``, ``top.json``, ``top.tim``, ...).
BUILD_NAME = "top"

#: Entries of an ``-o`` folder that a build or breakdown writes: Amaranth's build plan
#: and products, the flow's log and reports, the breakdown's Yosys scripts and
#: results, ``--seeds``' summary and folders.
BUILD_ENTRY = re.compile(rf"build_{BUILD_NAME}\.sh|{BUILD_NAME}\..+|build\.log|report\.json|"
                         r"nextpnr-report\.json|breakdown.*|(flat_)?(stat|netlist)\.json|"
                         r"seeds\.json|seed-\d+|bench-entry\.json")

