import sys
from pathlib import Path

# test-support modules (strategies, program builders) are imported by plain name
sys.path.insert(0, str(Path(__file__).parent))
