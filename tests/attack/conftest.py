import os
import sys

# the shared helpers of the workflow fault tests (drive, run_one, ack_lost_once, ...)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "workflow_faults"))
