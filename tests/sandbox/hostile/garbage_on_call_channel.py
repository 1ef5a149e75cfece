# Writes a frame that is not JSON to the call channel, then waits.
import os
import sys
import time

os.write(int(sys.argv[4]), b"\x00\x00\x00\x05hello")
time.sleep(600)
